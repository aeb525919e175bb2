"""Networks: populations, connectivity and synapse indices (``bs.models``).

Example:
  >>> import jax, brainshard as bs
  >>> from brainshard import models as bm
  >>> lay = bm.Layout({'E': 80, 'I': 20}, n_shards=2)
  >>> idx = bm.connect([bm.Projection('E', 'I', bm.FixedInDegree(5))],
  ...                  lay, dt=0.1, seed=1, mesh=jax.make_mesh((2,), ('x',)))
  >>> int(idx.count.sum())
  100
"""

from brainshard._models.connectivity import connect, synapses
from brainshard._models.distributions import Normal, Uniform
from brainshard._models.index import SynapseIndex
from brainshard._models.layout import Layout
from brainshard._models.rules import (
    Explicit, FixedInDegree, FixedOutDegree, FixedTotalNumber,
    PairwiseBernoulli, Projection)

__all__ = [
    "Layout", "SynapseIndex",
    # connectivity
    "Projection", "FixedInDegree", "FixedOutDegree", "PairwiseBernoulli",
    "FixedTotalNumber", "Explicit", "Normal", "Uniform", "connect",
    "synapses",
]
