"""Poisson generators' connections drawn in one pass: the same numbers as
connection by connection, at the cost of one draw.

A network with a ``poisson_generator`` per population (the microcircuit's
eight) draws eight small vectors a step; on XLA:CPU each is a few fused
loops and a cond with a fixed cost of their own, and eight cost several
times one draw over every neuron (~110 against ~30 CPU us a step for the
microcircuit at scale 0.1). A :class:`PoissonPass` takes connections of
Poisson generators with disjoint targets into one receptor and computes,
for every neuron of the shard's window over them, in one elementwise
loop: its connection (the last one starting at or before it, by a chain
of selects over the few connections), that connection's key folded with
its step (``t - delay``, hashed once a step for all connections), the
hash of the neuron's global id, the count from its connection's table and
the weight. The count is found by the connection's guide (``small.guide``:
a bucket of the draw, one gather from the guides of all connections side
by side, one compare), not by comparing with every row of a table chosen
per neuron (a select per connection a row: the microcircuit's 8
connections of 13-17 rows, 52 against 37 CPU us a step at scale 0.1); the
counts are the rows' all the same. Each neuron gets exactly the element it
gets from its own connection's draw (``Stimulus.add``: the block of the
connection's draw that starts at the neuron's id), so the spikes are the
same on any mesh.

:func:`passes` groups a network's connections: runs of Poisson generators
with a table (``poisson_generator``'s ``constants``: a rate of at least
10 Hz at ``dt = 0.1``) into passes, everything else one by one.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.devices import PoissonGenerator
  >>> from brainshard._models.network.stimulus import Stimulus
  >>> from brainshard._models.network.poisson_pass import passes
  >>> pg = [PoissonGenerator(rate=r) for r in (8000.0, 20000.0)]
  >>> stims = [Stimulus(pg[0], (0, 3), 1.0, 1, 0, 0),
  ...          Stimulus(pg[1], (3, 5), -2.0, 2, 0, 1)]
  >>> (one,) = passes(stims, dt=0.1)
  >>> args = (jnp.int32(9), jnp.arange(5), 7, 0.1, jnp.float32, 1)
  >>> fused, _ = one.add(jnp.zeros((1, 5)), jnp.zeros(5), *args)
  >>> x = (jnp.zeros((1, 5)), jnp.zeros(5))
  >>> for s in stims:
  ...   x = s.add(*x, *args)
  >>> bool((fused == x[0]).all())
  True
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.devices.poisson import PoissonGenerator
from brainshard._models.network.stimulus import (
    Stimulus, _key_data, add_spikes, window_of)
from brainshard._simulation.random import blocks, small

__all__ = ["PoissonPass", "passes"]

# a threshold no 31-bit draw exceeds: pads a shorter table's rows
_NEVER = np.int32(small.ONE - ((1 << 30) + 1))


class PoissonPass(NamedTuple):
  """Connections ``stims`` (Poisson generators with tables, disjoint
  targets, one receptor; sorted by first target) drawn in one pass."""

  stims: tuple[Stimulus, ...]
  receptor: int

  def add(self, inputs: jax.Array, currents: jax.Array, t: Any,
          ids: jax.Array, seed: int, dt: float, dtype: Any,
          shards: int = 0) -> tuple[jax.Array, jax.Array]:
    """As :meth:`Stimulus.add`, for every connection of the pass."""
    start, stop = self.stims[0].ids[0], max(s.ids[1] for s in self.stims)
    first, width, off = window_of(start, stop, ids, shards)
    value = self.values(t, first, width, seed, dt, dtype)
    return add_spikes(inputs, value, self.receptor, off), currents

  def values(self, t: Any, first: Any, width: int, seed: int, dt: float,
             dtype: Any) -> jax.Array:
    """The weighted counts of step ``t`` of global ids ``first ..
    first + width - 1`` (0 where no connection of the pass reaches)."""
    c = [s.device.constants(dt) for s in self.stims]
    rows = max(len(x["table"]) for x in c)
    table = np.full((len(c), rows), _NEVER, np.int32)
    for k, x in enumerate(c):
      table[k, :len(x["table"])] = x["table"]
    words = np.stack([_key_data(seed, s.number)[:2] for s in self.stims])
    # each connection's key folded with its step: one hash for all
    steps = jnp.asarray(t, jnp.int32) - np.array([s.delay for s in self.stims],
                                                 np.int32)
    k1, k2 = blocks.threefry2x32(words[:, 0], words[:, 1], np.uint32(0),
                                 steps.astype(jnp.uint32))
    on = (steps >= np.array([x["first"] for x in c])) & (
        steps <= np.array([x["last"] for x in c]))
    scale = jnp.where(on, np.array([s.weight for s in self.stims]), 0.0
                      ).astype(dtype)
    starts = [s.ids[0] for s in self.stims]
    stops = np.array([s.ids[1] for s in self.stims], np.uint32)

    guides = _guides(table)

    def lanes(m):
      gid = jnp.asarray(first).astype(jnp.uint32) + jnp.arange(
          m, dtype=jnp.uint32)
      # each lane's connection: the last that starts at or before it
      pick = [gid >= np.uint32(a) for a in starts]
      def chain(vals, none):
        out = jnp.full((m,), none, jnp.asarray(vals).dtype)
        for k, p in enumerate(pick):
          out = jnp.where(p, vals[k], out)
        return out
      inside = gid < chain(stops, np.uint32(0))
      b1, b2 = blocks.threefry2x32(chain(k1, np.uint32(0)),
                                   chain(k2, np.uint32(0)), np.uint32(0), gid)
      if guides is None:
        counts = small.counts(b1 ^ b2, [chain(table[:, r], _NEVER)
                                         for r in range(rows)])
      else:  # the lane's connection's guide: one gather, no row compares
        counts = small.guided_at(b1 ^ b2, guides.reshape(-1), chain(
            np.arange(len(c), dtype=np.int32) * guides.shape[1], 0))
      return jnp.where(inside, counts.astype(dtype) * chain(scale, 0.0), 0)

    return blocks.lanes(lanes, width, k1[0])


def _guides(table: np.ndarray) -> np.ndarray | None:
  """Each connection's guide (``small.guide``) of its rows of ``table``
  (``[connections, rows]``, padded with ``_NEVER``), as int32 ``[connections,
  entries]``, or None where a guide leaves rows to compares (none of the
  Poisson tables ``small`` builds) or the rows are too many for one."""
  out = []
  for row in table:
    kept = tuple(int(x) for x in row if x != _NEVER)
    if not kept:
      return None
    try:
      entries, extra = small.guide(kept)
    except ValueError:  # more rows than a guide holds
      return None
    if len(extra):
      return None
    out.append(entries)
  return np.stack(out)


def fusable(stim: Stimulus, dt: float) -> bool:
  """A Poisson generator's connection that draws from a table."""
  return (type(stim.device) is PoissonGenerator
          and stim.device.params["rate"] > 0
          and "table" in stim.device.constants(dt))


def passes(stimuli: Sequence[Stimulus], dt: float) -> list[Any]:
  """``stimuli`` as the network's step adds them, in their order: each run
  of consecutive Poisson connections with tables, into one receptor and
  with pairwise disjoint targets, as one pass (a neuron gets at most one
  count from a pass, so every input is summed in the same order as one by
  one); every other connection alone."""
  out: list[Any] = []
  run: list[Stimulus] = []

  def close():
    if run:
      run.sort(key=lambda s: s.ids[0])
      out.append(PoissonPass(tuple(run), run[0].receptor) if len(run) > 1
                 else run[0])
      run.clear()

  for s in stimuli:
    if not fusable(s, dt):
      close()
      out.append(s)
      continue
    if run and (run[0].receptor != s.receptor or any(
        s.ids[0] < o.ids[1] and o.ids[0] < s.ids[1] for o in run)):
      close()
    run.append(s)
  close()
  return out
