"""One device's connection to a range of neurons, as the network's step
adds it: counts times the weight into a receptor's input, or currents
times the weight into the current input, ``delay`` steps late.

A device's output in step ``t`` reaches its targets in step ``t + d``
(``devices/base.py``), so in step ``k`` the network asks the device for
``emit(k - d)``: no ring buffer, and a random device's draws (a pure
function of its key and the step) are the same whatever the mesh. Each
connection has a key of its own (NEST gives every connection its own
train), folded from the network's seed and the connection's number.

A shard asks the device only for the window of its slots that holds the
connection's targets (as wide as the targets, or the shard), with a block
key at the window's first global id: each neuron still gets the element
of a draw over every neuron that its global id picks, the same on any
mesh, but a device into one of eight populations draws for that
population, not for all eight.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.devices import DcGenerator
  >>> from brainshard._models.network.stimulus import Stimulus
  >>> s = Stimulus(DcGenerator(amplitude=2.0), (1, 3), 0.5, 2, 0, 0)
  >>> x, i = s.add(jnp.zeros((1, 4)), jnp.zeros(4), jnp.int32(5),
  ...              jnp.arange(4), seed=0, dt=0.1, dtype=jnp.float32)
  >>> i.tolist()
  [0.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from brainshard._core.caches import Cache
from brainshard._simulation.random.blocks import block_key
from brainshard._models.connectivity.counter import host_fold_in, host_key

__all__ = ["Stimulus", "connection_key", "window_of", "add_spikes"]


class Stimulus(NamedTuple):
  """``device`` to neurons ``ids`` (a global range) with ``weight``,
  ``delay`` (steps) and ``receptor``; ``number`` keys its draws."""

  device: Any
  ids: tuple[int, int]
  weight: float
  delay: int
  receptor: int
  number: int

  def add(self, inputs: jax.Array, currents: jax.Array, t: Any,
          ids: jax.Array, seed: int, dt: float, dtype: Any,
          shards: int = 0) -> tuple[jax.Array, jax.Array]:
    """``(inputs, currents)`` with this connection's share of step ``t``
    added for the shard's neurons ``ids`` (``shards``: the number of
    shards, where known; 1 makes the window static)."""
    start, stop = self.ids
    first, width, off = window_of(start, stop, ids, shards)
    window = first + jnp.arange(width, dtype=ids.dtype)
    inside = (window >= start) & (window < stop)
    targets = jnp.where(inside, window - start, -1)
    key = None
    if self.device.random:
      key = block_key(connection_key(seed, self.number), 0,
                      jnp.asarray(first).astype(jnp.uint32))
    c = self.device.constants(dt)
    # spec=P(): the draw is the window's, not a block per shard of it
    value = self.device.emit(c, t - self.delay, targets, key, dtype=dtype,
                             spec=P())
    value = self.weight * value.astype(dtype)
    if self.device.emits == "current":
      return inputs, _add_at(currents, value, off)
    return add_spikes(inputs, value, self.receptor, off), currents


def window_of(start: int, stop: int, ids: jax.Array, shards: int = 0
              ) -> tuple[Any, int, Any]:
  """``(first, width, off)``: the window ``[first, first + width)`` of
  global ids that lies in the shard of ``ids`` and holds every id of
  ``[start, stop)`` the shard has, and its offset in the shard. On one
  shard (``shards == 1``) its first id is 0, known: ``first`` and ``off``
  are ints, the window a static slice, which XLA:CPU fuses far better
  than a dynamic one."""
  n_local = ids.shape[0]
  width = min(n_local, stop - start)
  if shards == 1:
    first = min(max(start, 0), n_local - width)
    return first, width, first
  base = ids[0]
  first = jnp.clip(start, base, base + n_local - width)
  return first, width, first - base


def add_spikes(inputs: jax.Array, value: jax.Array, receptor: int,
               off: Any) -> jax.Array:
  """``inputs [R, n]`` with ``value`` added to row ``receptor`` from
  ``off`` on: one update of the block (a row read, added to and set back
  copied the block twice a connection on XLA:CPU)."""
  return _add_at(inputs, value[None], (receptor, off))


_KEY_DATA = Cache(maxsize=256)  # (seed, number) -> key data, hashed once


def _key_data(seed: int, number: int) -> np.ndarray:
  data = _KEY_DATA.get((seed, number))
  if data is None and jax.config.jax_default_prng_impl == "threefry2x32":
    # folded in NumPy: JAX's eager fold compiles 4 small programs (~0.1 s)
    data = _KEY_DATA[seed, number] = host_fold_in(host_key(seed),
                                                  0x5EED + number)
  elif data is None:
    with jax.ensure_compile_time_eval():
      key = jax.random.fold_in(jax.random.key(seed), 0x5EED + number)
      data = _KEY_DATA[seed, number] = np.asarray(jax.random.key_data(key))
  return data


def connection_key(seed: int, number: int) -> jax.Array:
  """Connection ``number``'s key, ``fold_in(key(seed), 0x5EED + number)``,
  hashed once on the host: in the step it is a constant (traced, the fold
  ran every step, a threefry loop XLA does not hoist)."""
  return jax.random.wrap_key_data(jnp.asarray(_key_data(seed, number)))


def _add_at(x: jax.Array, value: jax.Array, off: Any) -> jax.Array:
  """``x`` with ``value`` added to its elements from ``off`` on (an int or
  a tuple, one per dimension; ints make static slices)."""
  off = off if isinstance(off, tuple) else (off,)
  if all(isinstance(o, int) for o in off):
    return x.at[tuple(slice(o, o + w) for o, w in zip(off, value.shape))
                ].add(value)
  # one index dtype: a Python int is int64 under jax_enable_x64, an id int32
  off = tuple(jnp.asarray(o, jnp.int32) for o in off)
  part = jax.lax.dynamic_slice(x, off, value.shape)
  return jax.lax.dynamic_update_slice(x, part + value, off)
