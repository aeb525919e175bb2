"""The synapse index a network keeps: per shard, a CSR over presynaptic ids.

Synapses live on the shard of their *target*. Each shard keeps a push index
ordered by global presynaptic id (then by the device-independent order the
rule generated them in), so delivering the spikes of step ``t`` visits the
fired neurons in global order and every target sums its inputs in the same
order on any number of devices: bit-identical results on 1 and 8 devices
with no ``psum`` of float partial sums.

Arrays are global ``jax.Array``s split over the mesh axis ``axis`` (leading
dimension = shards); inside ``bs.shard_map`` with ``P(axis)`` a shard sees
its own block: ``indptr [n_pre + 1]``, ``post``/``weight``/``delay``/
``receptor [capacity]``. Slots past a shard's count hold ``post =
n_local`` (out of range: dropped by a ``mode='drop'`` scatter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax

__all__ = ["SynapseIndex"]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SynapseIndex:
  """One network's synapses, sharded by target.

  Attributes (global shapes; ``S`` = shards):
    indptr: int32 ``[S * (n_pre + 1)]``: shard ``s``'s synapses from global
      presynaptic id ``j`` are its slots ``indptr[j] : indptr[j + 1]``.
    post: int32 ``[S * capacity]``: the target, as an index into the
      shard's block of ``n_local`` neurons; ``n_local`` in unused slots.
    weight: float32 ``[S * capacity]``.
    delay: int32 ``[S * capacity]``: in steps, ``>= 1``.
    receptor: int32 ``[S * capacity]``: the target's input channel
      (``0 .. n_receptors - 1``; e.g. 0 excitatory, 1 inhibitory).
    count: int32 ``[S]``: used slots per shard.
  Static (not arrays): ``n_pre`` (presynaptic ids, the padded global axis),
  ``n_local``, ``n_shards``, ``capacity``, ``min_delay``, ``max_delay``
  (steps), ``n_receptors``, ``max_degree`` (most synapses one presynaptic
  neuron has on one shard; the delivery kernels' lane count).
  """

  indptr: jax.Array
  post: jax.Array
  weight: jax.Array
  delay: jax.Array
  receptor: jax.Array
  count: jax.Array
  n_pre: int = field(metadata=dict(static=True), default=0)
  n_local: int = field(metadata=dict(static=True), default=0)
  n_shards: int = field(metadata=dict(static=True), default=1)
  capacity: int = field(metadata=dict(static=True), default=0)
  min_delay: int = field(metadata=dict(static=True), default=1)
  max_delay: int = field(metadata=dict(static=True), default=1)
  n_receptors: int = field(metadata=dict(static=True), default=1)
  max_degree: int = field(metadata=dict(static=True), default=0)

  @property
  def nbytes(self) -> int:
    """Bytes of the index summed over shards."""
    leaves: list[Any] = jax.tree.leaves(self)
    return sum(int(x.size) * x.dtype.itemsize for x in leaves)
