"""One device's connection to a range of neurons, as the network's step
adds it: counts times the weight into a receptor's input, or currents
times the weight into the current input, ``delay`` steps late.

A device's output in step ``t`` reaches its targets in step ``t + d``
(``devices/base.py``), so in step ``k`` the network asks the device for
``emit(k - d)``: no ring buffer, and a random device's draws (a pure
function of its key and the step) are the same whatever the mesh. Each
connection has a key of its own (NEST gives every connection its own
train), folded from the network's seed and the connection's number.

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

__all__ = ["Stimulus"]


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
          ids: jax.Array, seed: int, dt: float, dtype: Any
          ) -> tuple[jax.Array, jax.Array]:
    """``(inputs, currents)`` with this connection's share of step ``t``
    added for the shard's neurons ``ids``."""
    start, stop = self.ids
    inside = (ids >= start) & (ids < stop)
    targets = jnp.where(inside, ids - start, -1)
    key = None
    if self.device.random:
      key = jax.random.fold_in(jax.random.key(seed), 0x5EED + self.number)
    c = self.device.constants(dt)
    value = self.device.emit(c, t - self.delay, targets, key, dtype=dtype)
    value = self.weight * value.astype(dtype)
    if self.device.emits == "current":
      return inputs, currents + value
    return inputs.at[self.receptor].add(value), currents
