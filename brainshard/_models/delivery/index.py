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

The per-synapse fields are as narrow as the network's sizes allow (the
index is most of a large network's memory): the dtypes are a static
function of ``n_local``, ``max_delay`` and ``n_receptors`` (see
:func:`field_dtypes`); the weight is float32 (``connect``'s
``weight_dtype`` may make it wider, for plastic synapses followed in
float64). Read a field with
``.astype(jnp.int32)`` before arithmetic.

Example:
  >>> from brainshard._models.delivery.index import field_dtypes
  >>> {k: (v and v.__name__) for k, v in field_dtypes(
  ...     n_local=77169, max_delay=60, n_receptors=1).items()}
  {'post': 'int32', 'delay': 'uint8', 'receptor': None}
  >>> {k: (v and v.__name__) for k, v in field_dtypes(
  ...     n_local=40000, max_delay=300, n_receptors=2).items()}
  {'post': 'uint16', 'delay': 'uint16', 'receptor': 'uint8'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

__all__ = ["SynapseIndex", "field_dtypes", "narrowest"]


def narrowest(largest: int) -> type:
  """The narrowest of uint8, uint16 and int32 that holds ``0 .. largest``."""
  for dtype in (np.uint8, np.uint16):
    if largest <= np.iinfo(dtype).max:
      return dtype
  if largest > np.iinfo(np.int32).max:
    raise ValueError(f"SynapseIndex: {largest} does not fit an int32 field.")
  return np.int32


def field_dtypes(n_local: int, max_delay: int, n_receptors: int) -> dict:
  """The dtypes of the index's integer fields (the weight is float32):

  * ``post``: uint16 while ``n_local <= 65535`` (``n_local`` itself marks an
    unused slot), else int32;
  * ``delay`` (steps): uint8 up to 255 steps, uint16 up to 65,535, else int32;
  * ``receptor``: ``None`` (no array: every synapse on receptor 0) for one
    receptor, uint8 up to 256 receptors, then uint16 / int32.

  Bytes a synapse: 4 (weight) + 2 or 4 + 1, 2 or 4 + 0, 1, 2 or 4; e.g. 9
  for the full-scale microcircuit on one device (77,169 neurons, one
  receptor, delays below 256 steps), 7 on two devices."""
  return dict(post=np.uint16 if n_local <= 0xFFFF else np.int32,
              delay=narrowest(max_delay),
              receptor=None if n_receptors <= 1 else narrowest(n_receptors - 1))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SynapseIndex:
  """One network's synapses, sharded by target.

  Attributes (global shapes; ``S`` = shards; integer dtypes from
  :func:`field_dtypes`):
    indptr: int32 ``[S * (n_pre + 1)]``: shard ``s``'s synapses from global
      presynaptic id ``j`` are its slots ``indptr[j] : indptr[j + 1]``.
    post: uint16 or int32 ``[S * capacity]``: the target, as an index into
      the shard's block of ``n_local`` neurons; ``n_local`` in unused slots.
    weight: float32 (or ``connect``'s ``weight_dtype``) ``[S * capacity]``.
    delay: uint8, uint16 or int32 ``[S * capacity]``: in steps, ``>= 1``.
    receptor: uint8 (or wider) ``[S * capacity]``, the target's input channel
      (``0 .. n_receptors - 1``; e.g. 0 excitatory, 1 inhibitory); ``None``
      when ``n_receptors == 1``.
    count: int32 ``[S]``: used slots per shard.
  Static (not arrays): ``n_pre`` (presynaptic ids, the padded global axis),
  ``n_local``, ``n_shards``, ``capacity``, ``min_delay``, ``max_delay``
  (steps), ``n_receptors``, ``max_degree`` (most synapses one presynaptic
  neuron has on one shard; the delivery kernels' lane count), ``dt`` (the
  step in ms the delays were counted in; None where not known).
  """

  indptr: jax.Array
  post: jax.Array
  weight: jax.Array
  delay: jax.Array
  receptor: jax.Array | None
  count: jax.Array
  n_pre: int = field(metadata=dict(static=True), default=0)
  n_local: int = field(metadata=dict(static=True), default=0)
  n_shards: int = field(metadata=dict(static=True), default=1)
  capacity: int = field(metadata=dict(static=True), default=0)
  min_delay: int = field(metadata=dict(static=True), default=1)
  max_delay: int = field(metadata=dict(static=True), default=1)
  n_receptors: int = field(metadata=dict(static=True), default=1)
  max_degree: int = field(metadata=dict(static=True), default=0)
  dt: float | None = field(metadata=dict(static=True), default=None)

  @property
  def nbytes(self) -> int:
    """Bytes of the index summed over shards."""
    leaves: list[Any] = jax.tree.leaves(self)
    return sum(int(x.size) * x.dtype.itemsize for x in leaves)
