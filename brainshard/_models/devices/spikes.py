"""NEST's ``spike_generator``: spikes at given times, one train for all
targets or one per target.

A spike at ``spike_times[k]`` (ms, relative to ``origin``) is stamped at
step ``s = origin + spike_time`` in steps and sent in step ``s - 1``, if
``origin + start < s <= origin + stop`` and ``s >= 1``; over a delay of
``d`` steps it lands in the target's ``inputs[s + d - 1]``. As NEST's
(``precise_times=False``), a time must be on the grid, unless
``allow_offgrid_times`` moves it to the end of the step it lies in; a time
of 0 is refused, unless ``shift_now_spikes`` moves a spike at 0 to the
first step. Times are sorted, non-decreasing; several spikes in one step
add up. A spike counts ``spike_multiplicities[k]`` (default 1) times
``spike_weights[k]`` (default 1; the connection's weight multiplies it, as
NEST's ``event_hook``), so :meth:`SpikeGenerator.emit` gives int32 counts,
or, with ``spike_weights``, their weighted sums in ``dtype``. NEST routes
each spike by its own weight's sign (``iaf_psc_exp``'s two receptors);
spikes of one step whose ``spike_weights`` differ in sign are summed here
first, so give such spikes to two generators.

``spike_times`` given as a list of sequences is one train per target (NEST:
one generator per target, connected one to one); ``spike_weights`` and
``spike_multiplicities`` then follow the same ragged shape. ``emit`` then
needs each slot's target index (``targets`` an int array). The trains live
on the host as one sorted list of ``(train, step)``, and a step finds each
slot's value by a binary search of its train: ``O(n log m)``, whole on
every shard.

Example:
  >>> from brainshard._models.devices.spikes import SpikeGenerator
  >>> sg = SpikeGenerator(spike_times=[0.5, 0.5, 1.0])
  >>> c = sg.constants(0.1)
  >>> [int(sg.emit(c, t, 1)[0]) for t in (3, 4, 5, 9)]   # step s - 1
  [0, 2, 0, 1]
  >>> per = SpikeGenerator(spike_times=[[0.2], [], [0.2, 0.3]],
  ...                      spike_weights=[[2.0], [], [1.0, 0.5]])
  >>> c = per.constants(0.1)
  >>> import numpy as np
  >>> per.emit(c, 1, np.array([2, 0, -1, 1])).tolist()
  [1.0, 2.0, 0.0, 0.0]
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.devices.base import WINDOW, Device, slots
from brainshard._models.devices.currents import finite_sequence
from brainshard._models.devices.times import (
    TICS_PER_MS, grid_steps, stamp_steps, tics_per_step)

__all__ = ["SpikeGenerator"]

_TRAINS = ("spike_times", "spike_weights", "spike_multiplicities")


class SpikeGenerator(Device):
  """NEST's ``spike_generator`` (see the module doc): ``spike_times`` (ms),
  ``spike_weights``, ``spike_multiplicities``, ``allow_offgrid_times``,
  ``shift_now_spikes``; ``precise_times=True`` (off-grid spikes for
  NEST's precise neuron models) is not supported."""

  nest_name = "spike_generator"
  defaults = {**WINDOW, "spike_times": (), "spike_weights": (),
              "spike_multiplicities": (), "precise_times": False,
              "allow_offgrid_times": False, "shift_now_spikes": False}
  emits = "spikes"

  def check(self, name, value):
    if name in _TRAINS:
      return _trains(value, f"{self.nest_name}: {name}")
    return super().check(name, value)

  @property
  def per_target(self) -> bool:
    """Whether ``spike_times`` holds one train per target."""
    return isinstance(self.params["spike_times"], list)

  def validate(self, p):
    name = self.nest_name
    if p["precise_times"]:
      raise ValueError(f"{name}: precise_times=True is not supported (it "
                       "sends off-grid spikes for NEST's precise neuron "
                       "models); use allow_offgrid_times=True to round "
                       "times to the end of their step.")
    per_target = isinstance(p["spike_times"], list)
    times = _as_list(p["spike_times"])
    for what in _TRAINS[1:]:
      other = _as_list(p[what])
      if _empty(p[what]):
        continue
      if isinstance(p[what], list) != isinstance(p["spike_times"], list) or (
          [len(a) for a in other] != [len(a) for a in times]):
        raise ValueError(f"{name}: {what} must have the same number of "
                         "elements as spike_times (per target too), or none.")
    for i, train in enumerate(times):
      where = f"spike_times[{i}]" if per_target else "spike_times"
      if (np.diff(train) < 0).any():
        k = int(np.argmax(np.diff(train) < 0))
        raise ValueError(f"{name}: {where} must be sorted in non-descending "
                         f"order ({train[k]} before {train[k + 1]}).")
      if not p["shift_now_spikes"] and (train == 0.0).any():
        raise ValueError(f"{name}: {where}: a spike time cannot be 0 (NEST's "
                         "BadProperty; shift_now_spikes=True sends it in "
                         "the first step).")
    mult = p["spike_multiplicities"]
    if any((m != np.round(m)).any() or (m < 0).any() for m in _as_list(mult)):
      raise ValueError(f"{name}: spike_multiplicities must be whole numbers "
                       ">= 0.")

  def constants(self, dt):
    """``offsets [trains + 1]``, ``steps [m]`` (each train's emission
    steps, sorted, unique) and ``values [m]``: counts (int32), or weighted
    sums (float64) with ``spike_weights``."""
    p = self.params
    origin = int(grid_steps(p["origin"], dt, f"{self.nest_name}: origin"))
    t_min, t_max = self.limits(dt)
    weighted = not _empty(p["spike_weights"])
    steps, values, offsets = [], [], [0]
    for i, train in enumerate(_as_list(p["spike_times"])):
      stamp = origin + self._stamps(train, dt, origin, i)
      value = np.ones(len(train))
      if weighted:
        value = value * _as_list(p["spike_weights"])[i]
      if not _empty(p["spike_multiplicities"]):
        value = value * _as_list(p["spike_multiplicities"])[i]
      keep = (stamp >= 1) & (stamp > t_min) & (stamp <= t_max)
      emit, index = np.unique(stamp[keep] - 1, return_inverse=True)
      summed = np.zeros(len(emit))
      np.add.at(summed, index, value[keep])
      steps.append(emit)
      values.append(summed)
      offsets.append(offsets[-1] + len(emit))
    steps = np.concatenate(steps).astype(np.int64)
    if steps.size and steps.max() > 2**31 - 1:
      raise ValueError(f"{self.nest_name}: spike_times beyond 2**31 steps.")
    values = np.concatenate(values)
    return {"offsets": np.asarray(offsets, np.int32),
            "steps": steps.astype(np.int32),
            "values": values if weighted else values.astype(np.int32)}

  def _stamps(self, train, dt, origin, i):
    """One train's spike times as steps (relative to origin)."""
    p = self.params
    where = f"{self.nest_name}: spike_times" + (
        f"[{i}]" if self.per_target else "")
    if p["allow_offgrid_times"]:  # NEST stamps only a time off the grid
      stamped = stamp_steps(train, dt, where)
      tics = np.trunc(train * TICS_PER_MS + 0.5).astype(np.int64)
      tps = tics_per_step(dt)
      steps = np.where(tics % tps == 0, tics // tps, stamped)
    else:
      steps = grid_steps(train, dt, where)
    if p["shift_now_spikes"]:  # a spike at "now" (0 here) goes one step on
      steps = np.where(origin + steps == 0, steps + 1, steps)
    return steps

  def emit(self, c, t, targets, key=None, *, dtype=jnp.float32, spec=None):
    n, hit = slots(targets)
    weighted = jnp.issubdtype(jnp.result_type(c["values"]), jnp.floating)
    kind = dtype if weighted else jnp.int32
    if c["steps"].shape[0] == 0:
      return jnp.zeros((n,), kind)
    t = jnp.asarray(t, jnp.int32)
    steps, offsets = jnp.asarray(c["steps"]), jnp.asarray(c["offsets"])
    values = jnp.asarray(c["values"], kind)
    if not self.per_target:
      i = jnp.minimum(jnp.searchsorted(steps, t), steps.shape[0] - 1)
      got = jnp.where(steps[i] == t, values[i], 0)
      return jnp.where(hit, got, jnp.zeros((n,), kind)).astype(kind)
    if isinstance(targets, (int, np.integer)):
      raise TypeError(f"{self.nest_name}: spike_times per target needs "
                      "targets= the target index of each slot (an int "
                      "array), not a number of slots.")
    ids = jnp.asarray(targets)
    hit = hit & (ids < offsets.shape[0] - 1)  # past the last train: nothing
    train = jnp.clip(ids, 0, offsets.shape[0] - 2)
    i, found = _search(steps, offsets[train], offsets[train + 1], t)
    return jnp.where(found & hit, values[i], jnp.zeros((n,), kind)).astype(kind)


def _search(steps: jax.Array, lo: jax.Array, end: jax.Array, t: jax.Array):
  """Per slot, the first ``i`` in ``[lo, end)`` with ``steps[i] >= t``
  (clipped into ``steps``), and whether ``steps[i] == t``: a vectorised
  binary search of fixed depth."""
  last = steps.shape[0] - 1
  hi = end

  def halve(_, bounds):
    lo, hi = bounds
    mid = (lo + hi) // 2
    less = steps[jnp.minimum(mid, last)] < t
    live = lo < hi
    return (jnp.where(live & less, mid + 1, lo),
            jnp.where(live & ~less, mid, hi))

  depth = math.ceil(math.log2(steps.shape[0] + 1)) + 1
  lo, _ = jax.lax.fori_loop(0, depth, halve, (lo, hi))
  i = jnp.minimum(lo, last)
  return i, (lo < end) & (steps[i] == t)


def _trains(value: Any, what: str) -> Any:
  """One train (a 1-D float64 array) or one per target (a list of them)."""
  if isinstance(value, (list, tuple)) and value and all(
      isinstance(v, (list, tuple, np.ndarray)) for v in value):
    return [finite_sequence(v, f"{what}[{i}]") for i, v in enumerate(value)]
  if isinstance(value, np.ndarray) and value.ndim == 2:
    return [finite_sequence(v, f"{what}[{i}]") for i, v in enumerate(value)]
  return finite_sequence(value, what)


def _as_list(trains: Any) -> list[np.ndarray]:
  return trains if isinstance(trains, list) else [trains]


def _empty(trains: Any) -> bool:
  """No entries given (NEST: an empty list clears the property)."""
  return not isinstance(trains, list) and len(trains) == 0
