"""The block of the unsharded draw that a shard holds, and keys that draw it.

With threefry (``jax_threefry_partitionable``, the default since JAX 0.5),
element ``i`` of ``jax.random.bits(key, shape)`` is the threefry hash of the
key and the 64-bit counter ``i``, the element's row-major index. A *block
key* carries, besides the key's two words, the counter of a block's first
element; its bits hash ``offset, offset + 1, ...``. jax.random's closed-form
samplers (normal, uniform, randint, ...) called with a block key therefore
return exactly that block of the draw over the global shape, at the cost of
an ordinary draw of the block's size (no per-element ``fold_in``).

A block that is not contiguous in the global order (a spec splitting a
non-leading axis) is drawn one contiguous row at a time, under ``jax.vmap``.
Rejection samplers get one key per element (:func:`element_keys`), itself
drawn as bits, so each element's stream depends on its global index only.

Example:
  >>> import jax
  >>> from brainshard._simulation.random import blocks as rb
  >>> key = jax.random.key(0)
  >>> whole = jax.random.normal(key, (8,))
  >>> tail = jax.random.normal(rb.block_key(key, 0, 4), (4,))  # elements 4..7
  >>> bool((tail == whole[4:]).all())
  True
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from brainshard._core import compat

__all__ = ["Layout", "layout", "block_key", "run", "element_keys", "lanes",
           "threefry2x32"]

_TF = compat.threefry_prng_impl
_UINT = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}


# ----------------------------------------------------------------------------
# The block key type: (k1, k2, first counter hi, first counter lo)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x1, x2):
  """Threefry-2x32 with 20 rounds, written out: the bits of
  ``threefry2x32_p``. JAX lowers that primitive on CPU as a rolled loop of
  5 iterations, which XLA:CPU runs as separate passes over the operands,
  ~1.5-4x slower than these fused rounds (a Poisson background draws every
  step). Elsewhere JAX's default lowering is this same unrolled form; and
  jnp ops keep shard_map's varying axes, which the primitive's outputs drop."""
  ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
  x1, x2 = x1 + ks[0], x2 + ks[1]
  for group in range(5):
    for r in _ROTATIONS[group % 2]:
      x1 = x1 + x2
      x2 = lax.shift_left(x2, jnp.uint32(r)) | lax.shift_right_logical(
          x2, jnp.uint32(32 - r))
      x2 = x1 ^ x2
    x1 = x1 + ks[(group + 1) % 3]
    x2 = x2 + ks[(group + 2) % 3] + jnp.uint32(group + 1)
  return x1, x2


def threefry2x32(k1, k2, x1, x2):
  """Threefry-2x32's two hash words of counters ``(x1, x2)`` under key
  words ``(k1, k2)``, elementwise (uint32, broadcasting): a block key's
  bits are ``b1 ^ b2`` of ``(0, counter)``, its ``fold_in(x)`` the words
  of ``(0, x)``. For kernels that draw with a key per element."""
  return _threefry2x32(k1, k2, x1, x2)


# Draws of at least _PAD_MIN elements, not a multiple of _PAD, are hashed
# on a CPU over a length rounded up to _PAD (see lanes).
_PAD, _PAD_MIN = 64, 1024


def _hash(data, bit_width, n):
  """The ``n`` flat words of ``bit_width`` bits from counter ``data[2:]``."""
  lo = data[3] + lax.iota(jnp.uint32, n)
  hi = data[2] + (lo < data[3]).astype(jnp.uint32)  # carry into the high word
  b1, b2 = _threefry2x32(data[0], data[1], hi, lo)
  # As jax's partitionable threefry combines the two hash words.
  if bit_width == 64:
    dt = _UINT[64]
    return lax.shift_left(b1.astype(dt), dt(32)) | b2.astype(dt)
  if bit_width == 32:
    return b1 ^ b2
  return (b1 ^ b2).astype(_UINT[bit_width])


def _bits(data, bit_width, shape):
  n = math.prod(shape)
  out = lanes(lambda m: _hash(data, bit_width, m), n, data[0])
  return out.reshape(shape)


def lanes(fn: Callable, n: int, witness: Any) -> jax.Array:
  """``fn(m)[:n]``: ``fn`` builds an elementwise vector of ``m >= n``
  lanes whose first ``n`` are the result; on a CPU ``m`` is ``n`` rounded
  up to a multiple of ``_PAD``.

  XLA:CPU splits a fused loop over its threads; when the length is not a
  multiple of the split, every element is bounds-checked and LLVM leaves
  the loop scalar (the microcircuit's 7,717 uniforms a step: ~190 us of
  CPU instead of ~40). So ``fn`` runs on a multiple of ``_PAD`` lanes
  behind a cond, a fusion boundary XLA keeps (it drops
  optimization_barrier before fusing), and the result is cut. The cond's
  predicate, from the traced uint32 ``witness`` (a key word), is always
  true, but XLA does not know it (with ``fn`` in both branches it merges
  them, and the boundary is gone). Everything elementwise after the hash
  (a sampler's compares) belongs in ``fn``: outside, it is a loop of
  ``n`` again.
  """
  if n < _PAD_MIN or n % _PAD == 0 or jax.default_backend() != "cpu":
    return fn(n)
  m = -(-n // _PAD) * _PAD
  shape = jax.eval_shape(lambda: fn(m))
  never = lambda: jnp.broadcast_to(  # noqa: E731
      (witness ^ witness).astype(shape.dtype), shape.shape)
  return lax.cond((witness | 1) != 0, lambda: fn(m), never)[:n]


def _split(data, shape):
  # A split key draws the same block of another stream: the counter stays.
  raw = _TF.split(data[:2], shape)
  return jnp.concatenate([raw, jnp.broadcast_to(data[2:], (*shape, 2))], -1)


def _fold_in(data, x):
  # threefry's fold_in, written out: the hash of the counter (0, x). JAX's
  # primitive is a rolled loop on CPU, a loop XLA:CPU runs pass by pass:
  # a device folding in its step every step paid ~10 us for it.
  y1, y2 = _threefry2x32(data[0], data[1], jnp.uint32(0),
                         jnp.asarray(x, jnp.uint32))
  return jnp.concatenate([jnp.stack([y1, y2]), data[2:]])


def _seed(seed):
  return jnp.concatenate([_TF.seed(seed), jnp.zeros(2, jnp.uint32)])


BLOCK_IMPL = compat.define_prng_impl(
    key_shape=(4,), seed=_seed, split=_split, random_bits=_bits,
    fold_in=_fold_in, name="brainshard_block", tag="bsblock")


def block_key(key: jax.Array, hi: Any, lo: Any) -> jax.Array:
  """``key`` (typed, threefry) as a block key whose first counter is
  ``hi * 2**32 + lo`` (uint32 words, possibly batched alike). A block key
  moves its own counter on by that much: a draw from the result is the
  block of the same stream that starts there (a device that draws for a
  window of a shard's neurons, ``network/stimulus.py``)."""
  data = jax.random.key_data(key)
  hi, lo = jnp.broadcast_arrays(jnp.asarray(hi, jnp.uint32),
                                jnp.asarray(lo, jnp.uint32))
  if jax.random.key_impl(key) == BLOCK_IMPL:
    new_lo = data[..., 3] + lo
    hi = data[..., 2] + hi + (new_lo < lo).astype(jnp.uint32)
    lo, data = new_lo, data[..., :2]
  data = jnp.broadcast_to(data, (*hi.shape, 2))
  return jax.random.wrap_key_data(
      jnp.concatenate([data, hi[..., None], lo[..., None]], -1), impl=BLOCK_IMPL)


# ----------------------------------------------------------------------------
# 64-bit counters in uint32 words (jax_enable_x64 may be off)


def _mul_add(hi, lo, x, c: int):
  """``(hi, lo) + x * c`` modulo 2**64, for uint32 ``x`` and a static ``c``."""
  c_lo, c_hi = c & 0xFFFFFFFF, (c >> 32) & 0xFFFFFFFF
  a0, a1 = x & 0xFFFF, x >> 16
  b0, b1 = jnp.uint32(c_lo & 0xFFFF), jnp.uint32(c_lo >> 16)
  p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
  mid = (p00 >> 16) + (p01 & 0xFFFF) + (p10 & 0xFFFF)
  p_lo = (p00 & 0xFFFF) | (mid << 16)
  p_hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16) + x * jnp.uint32(c_hi)
  new_lo = lo + p_lo
  return hi + p_hi + (new_lo < lo).astype(jnp.uint32), new_lo


# ----------------------------------------------------------------------------
# Layouts


class Layout(NamedTuple):
  """Where a draw's block sits: ``dims`` gives, per batch dimension, the
  mesh axes splitting it and their total size; ``event`` trailing
  dimensions are never split. ``global_shape`` / ``shape`` are the batch
  shapes of the whole draw and of this shard's block."""
  global_shape: tuple[int, ...]
  shape: tuple[int, ...]
  dims: tuple[tuple[tuple[str, ...], int], ...]
  event: tuple[int, ...]


def _entry_axes(entry: Any) -> tuple[str, ...]:
  if entry is None:
    return ()
  return tuple(entry) if isinstance(entry, tuple) else (entry,)


def layout(where: str, shape: tuple[int, ...], spec: Any,
           axes: tuple[tuple[str, int], ...], out_event: int = 0,
           bits_event: tuple[int, ...] = ()) -> Layout | None:
  """The layout of a draw of per-shard output shape ``shape`` (its last
  ``out_event`` dimensions an event, never split) under ``spec`` over the
  manual mesh ``axes``; None when no mesh axis splits it.

  ``spec=None`` splits the leading batch dimension over all ``axes``.
  """
  ndim = len(shape)
  batch = ndim - out_event
  if spec is None:
    if not axes or batch == 0:
      return None
    spec = jax.sharding.PartitionSpec(tuple(a for a, _ in axes))
  if not isinstance(spec, jax.sharding.PartitionSpec):
    raise TypeError(f"bs.random.{where}: spec= must be a PartitionSpec over "
                    f"the draw's global shape; got {spec!r}.")
  if len(spec) > ndim:
    raise ValueError(f"bs.random.{where}: spec={spec} has {len(spec)} entries "
                     f"but the draw has {ndim} dimensions (shape {shape}).")
  if not axes:  # outside shard_map: the whole draw (spec kept for the reader)
    return None
  sizes = dict(axes)
  used: list[str] = []
  dims = []
  for d, entry in enumerate(tuple(spec) + (None,) * (ndim - len(spec))):
    names = _entry_axes(entry)
    for name in names:
      if name not in sizes:
        raise ValueError(
            f"bs.random.{where}: spec={spec} names mesh axis {name!r}, which "
            f"is not a manual axis here (manual axes: {tuple(sizes)}).")
      if name in used:
        raise ValueError(f"bs.random.{where}: spec={spec} uses mesh axis "
                         f"{name!r} twice.")
      used.append(name)
    if names and d >= batch:
      raise ValueError(
          f"bs.random.{where}: spec={spec} splits dimension {d} of the draw "
          f"(shape {shape}) over mesh axis {names}, but that dimension is the "
          f"sampler's event axis, which every shard must hold whole; leave "
          f"it None in spec=.")
    if d < batch:
      dims.append((names, math.prod(sizes[n] for n in names)))
  if not any(n > 1 for _, n in dims):
    return None
  local = tuple(shape[:batch])
  whole = tuple(s * n for s, (_, n) in zip(local, dims))
  return Layout(whole, local, tuple(dims), tuple(bits_event))


# ----------------------------------------------------------------------------
# Drawing a block


def _starts(lay: Layout) -> list[Any]:
  return [lax.axis_index(names).astype(jnp.uint32) * jnp.uint32(local)
          if n > 1 else jnp.uint32(0)
          for (names, n), local in zip(lay.dims, lay.shape)]


def _row_keys(key: jax.Array, lay: Layout) -> tuple[jax.Array, int]:
  """Block keys, one per contiguous row of the block, and the number of
  leading batch dimensions those rows enumerate."""
  full = lay.global_shape + lay.event
  strides = [math.prod(full[d + 1:]) for d in range(len(full))]
  k = max(d for d, (_, n) in enumerate(lay.dims) if n > 1)
  starts = _starts(lay)
  hi = jnp.zeros(lay.shape[:k], jnp.uint32)
  lo = jnp.zeros(lay.shape[:k], jnp.uint32)
  for d in range(k):
    index = starts[d] + lax.broadcasted_iota(jnp.uint32, lay.shape[:k], d)
    hi, lo = _mul_add(hi, lo, index, strides[d])
  hi, lo = _mul_add(hi, lo, jnp.broadcast_to(starts[k], hi.shape), strides[k])
  return block_key(key, hi.reshape(-1), lo.reshape(-1)), k


def run(fn: Callable, key: jax.Array, lay: Layout | None, params: tuple,
        ranks: tuple[int, ...], shape: tuple[int, ...], **kw: Any) -> Any:
  """``fn(key, *params, shape=shape, **kw)`` drawing the block ``lay``
  describes (the whole draw when ``lay`` is None).

  ``fn`` must use its key only through ``split``/``fold_in``, jax.random's
  closed-form samplers at ``shape`` (+ the layout's event dims) and
  :func:`element_keys`. ``ranks[i]`` is the number of trailing event
  dimensions of ``params[i]`` (its other dimensions broadcast against
  ``shape``; a param with no batch dimensions is shared by every row).
  """
  if lay is None:
    return fn(block_key(key, 0, 0), *params, shape=shape, **kw)
  keys, k = _row_keys(key, lay)
  if keys.shape[0] == 1:
    return fn(keys[0], *params, shape=shape, **kw)
  rows, run_shape = math.prod(shape[:k]), shape[k:]
  args, in_axes = [], [0]
  for x, e in zip(params, ranks):
    x = None if x is None else jnp.asarray(x)
    if x is None or x.ndim <= e:
      args.append(x)
      in_axes.append(None)
      continue
    event = x.shape[x.ndim - e:]
    x = jnp.broadcast_to(x, shape + event)
    args.append(x.reshape(rows, *run_shape, *event))
    in_axes.append(0)
  out = jax.vmap(lambda kk, *ps: fn(kk, *ps, shape=run_shape, **kw),
                 in_axes=tuple(in_axes))(keys, *args)
  return jax.tree.map(lambda y: y.reshape(*shape[:k], *y.shape[1:]), out)


def element_keys(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """One ordinary threefry key per element of a draw of ``shape``, each a
  function of ``key`` and the element's global index only (two words of
  bits from two folds of a block key), for samplers that reject."""
  words = [jax.random.bits(jax.random.fold_in(key, i), shape, jnp.uint32)
           for i in (0, 1)]
  return jax.random.wrap_key_data(jnp.stack(words, -1))


def per_element(sample: Callable, key: jax.Array, params: tuple,
                shape: tuple[int, ...]) -> jax.Array:
  """``sample(k, *p)`` (a scalar draw) for every element, each with its own
  key from :func:`element_keys`; ``params`` broadcast against ``shape``."""
  keys = element_keys(key, shape).reshape(-1)
  # The barrier keeps XLA from constant-folding a constant parameter into
  # the sampler, which it does or not depending on the block's shape, and
  # whose results differ from the computed ones in the last bits.
  flat = lax.optimization_barrier(tuple(
      jnp.broadcast_to(jnp.asarray(p), shape).reshape(-1) for p in params))
  return jax.vmap(sample)(keys, *flat).reshape(shape)
