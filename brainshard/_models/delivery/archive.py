"""The post neurons' spike archive (NEST's ``ArchivingNode``) on a mesh:
each neuron's last ``H`` spikes and its trace ``K_minus``, kept on the
neuron's shard for the STDP synapses onto it.

NEST keeps this history in every neuron that has STDP synapses incoming;
here one :class:`Archive` holds it for the whole padded neuron axis, as
sharded States: a :class:`~brainshard._models.plasticity.history.
PostHistory` (``[n, H]`` stamps and ``K_minus``, ``[n]`` counts) and the
neurons' ``tau_minus`` (a neuron parameter in NEST). The network's step
calls :meth:`Archive.record` right after its neurons update, before
delivery visits the synapses of the neurons that fired (NEST's order).

Example:
  >>> import jax, numpy as np, jax.numpy as jnp
  >>> import brainshard as bs
  >>> from brainshard._models.delivery.archive import Archive
  >>> mesh = jax.make_mesh((1,), ('x',))
  >>> arc = Archive(np.full(4, 20.0), mesh, 'x', dt=0.1, size=8)
  >>> @bs.shard_map(mesh=mesh, in_specs=(), out_specs=jax.P())
  ... def fire():
  ...   arc.record(jnp.array([True, False, True, False]), 10)
  ...   return jnp.int32(0)
  >>> _ = fire()
  >>> arc.history.value.count.tolist()
  [1, 0, 1, 0]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.state.state import ParamState, ShortTermState
from brainshard._models.plasticity.history import (
    DEFAULT_SIZE, post_history, record)

__all__ = ["Archive"]


class Archive:
  """The spike history of ``len(tau_minus)`` neurons (the padded axis) on
  ``mesh`` axis ``axis``: ``size`` entries each, ``K_minus`` in
  ``dtype``. States: ``history`` (a ``PostHistory``) and ``tau_minus``."""

  def __init__(self, tau_minus: np.ndarray, mesh: Any, axis: str, *,
               dt: float, size: int = DEFAULT_SIZE, dtype: Any = jnp.float32,
               name: str = "archive"):
    if not isinstance(size, int) or size < 1:
      raise ValueError(f"Archive: the history bound H = {size!r} must be a "
                       "positive int.")
    n = int(np.shape(tau_minus)[0])
    self.dt, self.size = float(dt), size
    put = lambda x: jax.device_put(x, NamedSharding(mesh, P(axis)))  # noqa: E731
    self.history = ShortTermState(
        jax.tree.map(put, post_history(n, size, dtype)),
        name=f"{name}.history", spec=P(axis))
    self.tau_minus = ParamState(put(jnp.asarray(tau_minus, dtype)),
                                name=f"{name}.tau_minus", spec=P(axis))

  def record(self, spikes: jax.Array, stamp: Any) -> None:
    """Per shard: appends this step's ``spikes [n_local]``, stamped
    ``stamp`` (the step's end, in steps), to the neurons' histories."""
    self.history.value = record(self.history.value, spikes, stamp,
                                self.tau_minus.value, self.dt)
