"""NEST's neuron models as pure steps over their state (see ``base.py``).

``MODELS`` maps each NEST model name to its class.

Example:
  >>> from brainshard._models.neurons import MODELS
  >>> sorted(MODELS)[:4]
  ['aeif_cond_exp', 'hh_psc_alpha', 'iaf_cond_alpha', 'iaf_cond_exp']
  >>> MODELS['iaf_psc_exp'](I_e=376.0).params['I_e']
  376.0
"""

from brainshard._models.neurons.aeif import AeifCondExp
from brainshard._models.neurons.base import NeuronModel
from brainshard._models.neurons.hh import HhPscAlpha
from brainshard._models.neurons.iaf_cond import IafCondAlpha, IafCondExp
from brainshard._models.neurons.iaf_psc import (
    IafPscAlpha, IafPscDelta, IafPscExp)
from brainshard._models.neurons.izhikevich import Izhikevich
from brainshard._models.neurons.parrot import ParrotNeuron

__all__ = ["NeuronModel", "IafPscDelta", "IafPscExp", "IafPscAlpha",
           "Izhikevich", "IafCondExp", "IafCondAlpha", "AeifCondExp",
           "HhPscAlpha", "ParrotNeuron", "MODELS"]

MODELS: dict[str, type[NeuronModel]] = {
    cls.nest_name: cls
    for cls in (IafPscDelta, IafPscExp, IafPscAlpha, Izhikevich, IafCondExp,
                IafCondAlpha, AeifCondExp, HhPscAlpha, ParrotNeuron)}
