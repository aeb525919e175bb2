"""Moving an array to another mesh device to device, in any layout.

``jax.device_put(x, sharding)`` onto other devices is device to device only
where JAX can copy whole blocks; where the layout changes too (a ``P('x')``
array of one 4-device mesh wanted as ``P()`` on another), JAX 0.12 takes a
slow path that reads the whole array to the host. :func:`move_array` never
does: each target device's block is cut from a source block that holds it
(gathered on the source devices first where none does) and copied to its
device, and the blocks are assembled into one array.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from brainshard._core.caches import Cache
from brainshard._scaleout.describe import device_ids

__all__ = ["move_array"]

# One compiled gather per (source sharding, aval): jax.jit caches per
# function object, so the function is kept per source sharding.
_gathers: Cache = Cache(64)


def _bounds(index: tuple, shape: tuple) -> tuple:
  """``((start, stop), ...)`` of a block's index, one pair per dimension."""
  out = []
  for i, n in zip(index, shape):
    start, stop, _ = i.indices(n)  # shardings cut contiguous blocks
    out.append((start, stop))
  return tuple(out)


def _containing(bounds: tuple, blocks: dict) -> tuple | None:
  """A source block (its bounds and data) that contains ``bounds``; an exact
  match first, so an unchanged layout copies whole blocks."""
  if bounds in blocks:
    return bounds, blocks[bounds]
  for have, data in blocks.items():
    if all(a <= c and d <= b for (a, b), (c, d) in zip(have, bounds)):
      return have, data
  return None


def _cut(data: jax.Array, have: tuple, want: tuple) -> jax.Array:
  """The ``want`` part of a block covering ``have``, on the block's device."""
  if have == want:
    return data
  return data[tuple(slice(c - a, d - a) for (a, _), (c, d) in zip(have, want))]


def _gathered(x: jax.Array) -> jax.Array:
  """``x`` whole on every device that holds part of it (a collective on
  those devices; nothing goes through the host)."""
  sharding = x.sharding
  if not isinstance(sharding, NamedSharding):
    devices = sorted(sharding.device_set, key=lambda d: d.id)
    sharding = NamedSharding(Mesh(np.array(devices), ("_",)), P())
  key = (sharding.mesh, sharding.memory_kind)
  gather = _gathers.get(key)
  if gather is None:
    whole = NamedSharding(sharding.mesh, P(), memory_kind=sharding.memory_kind)
    gather = _gathers[key] = jax.jit(lambda a: a, out_shardings=whole)
  return gather(x)


def _blocks(x: jax.Array) -> dict:
  return {_bounds(s.index, x.shape): s.data for s in x.addressable_shards}


def move_array(x: jax.Array, target: NamedSharding, where: str) -> jax.Array:
  """``x`` laid out as ``target`` (on other devices), device to device.

  Where every block ``target`` puts on a device is a block of ``x``, this is
  ``jax.device_put``. Otherwise every block is cut on a source device that
  holds it and copied to its device; where no source block holds it (the
  layout gathers what the source splits), ``x`` is first gathered on its
  own devices. In a multi-process run JAX's CPU and GPU
  runtimes cannot move an array between processes, so every process must
  hold the blocks its own target devices need; otherwise the error names
  both device sets and the fix.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jax.sharding import NamedSharding, PartitionSpec as P
    >>> from brainshard._scaleout.move import move_array
    >>> a, b = (jax.make_mesh((2,), ('x',), devices=d)
    ...         for d in (jax.devices()[:2], jax.devices()[2:4]))
    >>> x = jax.device_put(jnp.arange(4.0), NamedSharding(a, P('x')))
    >>> y = move_array(x, NamedSharding(b, P()), 'example')
    >>> sorted(d.id for d in y.sharding.device_set), y
    ([2, 3], Array([0., 1., 2., 3.], dtype=float32))
  """
  wanted = target.addressable_devices_indices_map(x.shape)
  single = jax.process_count() == 1
  for attempt in ("as it is", "gathered"):
    blocks = _blocks(x)
    found = {d: _containing(_bounds(i, x.shape), blocks)
             for d, i in wanted.items()}
    if single and all(f is not None and f[0] == _bounds(wanted[d], x.shape)
                      for d, f in found.items()):
      # Whole blocks: JAX's own copy is device to device, and fastest.
      return jax.device_put(x, target)
    if all(f is not None for f in found.values()) and (single or found):
      break
    if not single:  # (no target device in this process: also across)
      raise ValueError(
          f"{where}: an argument of shape {x.shape} on devices "
          f"{device_ids(x.sharding.device_set)} cannot reach devices "
          f"{device_ids(target.device_set)}: across processes, JAX moves "
          "arrays only where each process holds the same blocks in both "
          "meshes. Give every sub-mesh devices of every process in the same "
          "order (see docs/submesh.md), or gather the value first.")
    x = _gathered(x)
  devices = list(wanted)
  parts = [_cut(found[d][1], found[d][0], _bounds(wanted[d], x.shape))
           for d in devices]
  # One device_put of single-device arrays: device-to-device copies.
  local = jax.device_put(parts, devices)
  return jax.make_array_from_single_device_arrays(x.shape, target, local)
