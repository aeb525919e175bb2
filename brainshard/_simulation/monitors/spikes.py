"""Spikes as sparse events, compacted on the device, per shard.

Inside a chunk each step ORs its boolean spike vector into a word buffer
``[rows, n]`` of uint32, one bit per step (``rows`` = chunk length / 32):
elementwise work that keeps whatever sharding the spikes have, and 1/8 of
the bytes of a stacked boolean raster. After the chunk a small program finds
the non-zero words of each shard (``cumsum`` + ``searchsorted``, under
``jax.shard_map`` over the buffer's own sharding) into fixed-capacity
buffers of (position, word) pairs and their count; the host copies these,
one block per shard (no all-gather of the raster), and expands the bits into
(step, neuron) events. A count above the capacity is an overflow: it is
detected, never truncated (the caller compacts again with room to spare).
A buffer of at most ``HOST_WORDS`` words skips the program: it is copied
whole and read on the host (:func:`dispatch`), as a small network's first
chunk would otherwise wait for one compile per recorded population.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.caches import Cache

__all__ = ["word_rows", "zeros_like_aval", "record_spikes", "compact",
           "Compacted", "Whole", "dispatch", "decode", "Overflow"]

BITS = 32
# Up to this many words (256 KiB) a buffer is copied whole: about what a
# compacted copy of a default capacity costs, and no compile (~0.2 s for
# each buffer shape on a CPU) before the first spikes come back.
HOST_WORDS = 1 << 16


class Overflow(Exception):
  """A shard found more spike words than its buffer holds."""

  def __init__(self, needed: int, capacity: int):
    super().__init__(f"{needed} spike words, capacity {capacity}")
    self.needed = needed
    self.capacity = capacity


def word_rows(length: int) -> int:
  """Rows of the word buffer of a chunk of ``length`` steps (any start)."""
  return length // BITS + 2


def zeros_like_aval(aval: Any, lead: int, dtype: Any) -> jax.Array:
  """Zeros ``[lead, *aval.shape]`` laid out like ``aval`` along the rest.

  Under an Explicit mesh a value's type carries its sharding, and an update
  must match the buffer's; elsewhere the compiler propagates it.
  """
  shape = (lead, *aval.shape)
  sharding = getattr(aval, "sharding", None)
  if isinstance(sharding, NamedSharding) and any(
      t == jax.sharding.AxisType.Explicit for t in sharding.mesh.axis_types):
    rest = [None] * (len(aval.shape) - len(sharding.spec))
    spec = P(None, *sharding.spec, *rest)
    # reshard, not zeros(out_sharding=): JAX 0.12 drops a sharding on an
    # abstract mesh given to zeros outside a mesh context.
    return jax.reshard(jnp.zeros(shape, dtype),
                       NamedSharding(sharding.mesh, spec))
  return jnp.zeros(shape, dtype)


def record_spikes(buf: jax.Array, spikes: jax.Array, i: jax.Array,
                  base: jax.Array) -> jax.Array:
  """ORs step ``i``'s spikes into bit ``i % 32`` of row ``i // 32 - base``."""
  row = i // BITS - base
  bit = (spikes != 0).astype(jnp.uint32) << (i % BITS).astype(jnp.uint32)
  return buf.at[row].set(buf[row] | bit)


def _compact_local(buf: jax.Array, capacity: int):
  flat = buf.reshape(-1)
  seen = jnp.cumsum(flat != 0, dtype=jnp.int32)
  # The k-th non-zero word sits where the running count first reaches k+1.
  # method="scan": faster here than "scan_unrolled" (about 280 vs 480 us for
  # 34x4000 words on 8 faked devices), whose compile takes ~10 s on JAX 0.12.
  pos = jnp.searchsorted(seen, jnp.arange(1, capacity + 1, dtype=jnp.int32),
                         side="left", method="scan").astype(jnp.int32)
  words = flat[jnp.minimum(pos, flat.size - 1)]
  # Spikes, not words, are what a SpikeMonitor's capacity counts.
  spikes = jnp.sum(jax.lax.population_count(flat), dtype=jnp.int32)
  return pos, words, seen[-1:], spikes[None]


class Compacted(NamedTuple):
  """Device arrays of one chunk's compacted spikes (all shards)."""
  pos: jax.Array      # [shards * capacity] flat position in the shard's buffer
  words: jax.Array    # [shards * capacity] the word there
  counts: jax.Array   # [shards] non-zero words found per shard
  spikes: jax.Array   # [shards] spikes (set bits) per shard
  shards: int
  n_local: int
  capacity: int


class Whole(NamedTuple):
  """A small word buffer on its way to the host whole (not compacted)."""
  buf: jax.Array      # [rows, shards * n_local], its copy started
  shards: int
  n_local: int
  capacity: int       # rows * n_local: a whole buffer never overflows

  @property
  def spikes(self) -> np.ndarray:
    """Spikes (set bits) per shard, as :attr:`Compacted.spikes`."""
    h = np.asarray(self.buf)
    return np.bitwise_count(h.reshape(h.shape[0], self.shards, self.n_local)
                            ).sum((0, 2), dtype=np.int64)


def _neuron_axes(sharding: Any, ndim: int) -> Any:
  """The mesh axes the neuron dimension of a word buffer is split over."""
  if not isinstance(sharding, NamedSharding) or ndim != 2:
    return None
  spec = tuple(sharding.spec) + (None,) * (2 - len(sharding.spec))
  if spec[0] is not None or spec[1] is None:
    return None
  return spec[1]


# (mesh, axes, capacity) -> the compiled compactor; bs.clear_caches() empties it
_compactors: Cache = Cache(maxsize=64)


def _compactor(mesh: Any, axes: Any, capacity: int):
  key = (mesh, axes, capacity)
  found = _compactors.get(key)
  if found is None:
    fun = functools.partial(_compact_local, capacity=capacity)
    if axes is None:
      found = jax.jit(fun)
    else:
      out = P(axes)
      found = jax.jit(jax.shard_map(fun, mesh=mesh, in_specs=P(None, axes),
                                    out_specs=(out, out, out, out)))
    _compactors[key] = found
  return found


def compact(buf: jax.Array, capacity: int | None) -> Compacted:
  """Dispatches the compaction of a word buffer ``[rows, n]`` (async);
  ``capacity``: words per shard, None for a first guess."""
  axes = _neuron_axes(buf.sharding, buf.ndim)
  mesh = buf.sharding.mesh if axes is not None else None
  shards = 1
  if axes is not None:
    for a in (axes if isinstance(axes, tuple) else (axes,)):
      shards *= mesh.shape[a]
  rows, n_local = buf.shape[0], buf.shape[1] // shards
  capacity = min(capacity or initial_capacity(rows, n_local), rows * n_local)
  pos, words, counts, spikes = _compactor(mesh, axes, capacity)(buf)
  for x in (pos, words, counts, spikes):
    x.copy_to_host_async()
  return Compacted(pos, words, counts, spikes, shards, n_local, capacity)


def dispatch(buf: jax.Array, capacity: int | None) -> Compacted | Whole:
  """A word buffer on its way to the host: whole when it has at most
  ``HOST_WORDS`` words and this process holds all of it, else
  :func:`compact` ed."""
  if buf.size > HOST_WORDS or not buf.is_fully_addressable:
    return compact(buf, capacity)
  axes = _neuron_axes(buf.sharding, buf.ndim)
  shards = 1
  if axes is not None:
    for a in (axes if isinstance(axes, tuple) else (axes,)):
      shards *= buf.sharding.mesh.shape[a]
  buf.copy_to_host_async()
  rows, n_local = buf.shape[0], buf.shape[1] // shards
  return Whole(buf, shards, n_local, rows * n_local)


def _words(c: Compacted | Whole) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Each non-zero word's row, global neuron and value."""
  if isinstance(c, Whole):
    h = np.asarray(c.buf)
    row, col = np.nonzero(h)
    return row.astype(np.int64), col.astype(np.int64), h[row, col]
  counts = np.asarray(c.counts)
  if counts.max(initial=0) > c.capacity:
    raise Overflow(int(counts.max()), c.capacity)
  pos = np.asarray(c.pos).reshape(c.shards, c.capacity)
  words = np.asarray(c.words).reshape(c.shards, c.capacity)
  rows, cols, values = [], [], []
  for s in range(c.shards):
    k = int(counts[s])
    row, col = np.divmod(pos[s, :k].astype(np.int64), c.n_local)
    rows.append(row)
    cols.append(s * c.n_local + col)
    values.append(words[s, :k])
  return np.concatenate(rows), np.concatenate(cols), np.concatenate(values)


def decode(c: Compacted | Whole, start: int, length: int, base: int
           ) -> tuple[np.ndarray, np.ndarray]:
  """The (step, neuron) events of one chunk, sorted by step then neuron.

  ``base`` is the chunk's first word row (``start // 32``); events outside
  ``[start, start + length)`` (bits of a shared boundary word) are dropped.
  Raises :class:`Overflow` when a shard's count exceeds the capacity.
  """
  row, col, w = _words(c)
  bits = (w[:, None] >> np.arange(BITS, dtype=np.uint32)) & 1
  which, bit = np.nonzero(bits)
  step = (base + row[which]) * BITS + bit
  neuron = col[which].astype(np.int32)
  keep = (step >= start) & (step < start + length)
  step, neuron = step[keep], neuron[keep]
  order = np.lexsort((neuron, step))
  return step[order], neuron[order]


def initial_capacity(rows: int, n_local: int) -> int:
  """A first guess: room for 1 word in 64 (the overflow path grows it)."""
  return int(min(rows * n_local, max(1024, 1 << int(np.ceil(
      np.log2(max(1, rows * n_local // 64)))))))


def grown_capacity(needed: int, limit: int) -> int:
  return int(min(limit, 1 << int(np.ceil(np.log2(needed * 1.25 + 1)))))
