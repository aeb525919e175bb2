"""NEST's neuron models as pure steps over their state (see ``base.py``)."""

from brainshard._models.neurons.aeif import aeif_cond_exp
from brainshard._models.neurons.hh import hh_psc_alpha
from brainshard._models.neurons.iaf_cond import iaf_cond_alpha
from brainshard._models.neurons.iaf_cond import iaf_cond_exp
