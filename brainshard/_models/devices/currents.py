"""NEST's deterministic current generators: ``dc_generator`` and
``step_current_generator``, the same current (pA) to every target.

Both are current generators (``base.py``): they send in step ``t`` when
``origin + start < t + 2 <= origin + stop`` (in steps), and what they send
in step ``t`` reaches a target over a delay of ``d`` steps in its
``currents[t + d]``, which ``iaf_psc`` neurons apply in the step after.

``step_current_generator``'s amplitude changes at ``amplitude_times``
(absolute ms, not shifted by ``origin``; strictly increasing, > 0, on the
grid unless ``allow_offgrid_times``, which moves a time to the end of its
step). NEST changes it one step ahead: an amplitude time of ``s`` steps
sets the current sent from step ``s - 1`` on, which a delay of one step
brings to ``currents[s]``. Before the first time the amplitude is 0.

Example:
  >>> from brainshard._models.devices.currents import (
  ...     DcGenerator, StepCurrentGenerator)
  >>> dc = DcGenerator(amplitude=100.0, start=1.0, stop=1.5)
  >>> c = dc.constants(0.1)
  >>> [float(dc.emit(c, t, 2)[0]) for t in (8, 9, 13, 14)]
  [0.0, 100.0, 100.0, 0.0]
  >>> sc = StepCurrentGenerator(amplitude_times=[0.5, 1.0],
  ...                           amplitude_values=[5.0, -5.0])
  >>> c = sc.constants(0.1)
  >>> [float(sc.emit(c, t, 1)[0]) for t in (3, 4, 8, 9)]
  [0.0, 5.0, 5.0, -5.0]
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from brainshard._models.devices.base import WINDOW, Device, active, slots
from brainshard._models.devices.times import grid_steps, stamp_steps

__all__ = ["DcGenerator", "StepCurrentGenerator", "finite_sequence"]


class DcGenerator(Device):
  """NEST's ``dc_generator``: a constant current ``amplitude`` (pA) while
  active."""

  nest_name = "dc_generator"
  defaults = {**WINDOW, "amplitude": 0.0}
  emits = "current"

  def constants(self, dt):
    return {**self.window(dt),
            "amplitude": np.float64(self.params["amplitude"])}

  def emit(self, c, t, targets, key=None, *, dtype=jnp.float32, spec=None):
    n, hit = slots(targets)
    on = active(c, t) & hit
    return jnp.where(on, jnp.asarray(c["amplitude"], dtype),
                     jnp.zeros((n,), dtype)).astype(dtype)


class StepCurrentGenerator(Device):
  """NEST's ``step_current_generator``: ``amplitude_values`` (pA) from
  ``amplitude_times`` (ms) on, while active (see the module doc)."""

  nest_name = "step_current_generator"
  defaults = {**WINDOW, "amplitude_times": (), "amplitude_values": (),
              "allow_offgrid_times": False}
  emits = "current"

  def check(self, name, value):
    if name in ("amplitude_times", "amplitude_values"):
      return finite_sequence(value, f"{self.nest_name}: {name}")
    return super().check(name, value)

  def validate(self, p):
    times, values = p["amplitude_times"], p["amplitude_values"]
    if len(times) != len(values):
      raise ValueError(f"{self.nest_name}: amplitude_times and "
                       f"amplitude_values have to be the same size (got "
                       f"{len(times)} and {len(values)}).")
    if len(times) and times.min() <= 0:
      raise ValueError(f"{self.nest_name}: amplitude_times must be > 0 "
                       "(NEST changes the amplitude only at t > 0).")
    if (np.diff(times) <= 0).any():
      raise ValueError(f"{self.nest_name}: amplitude_times must be "
                       "strictly increasing (NEST's BadProperty).")

  def constants(self, dt):
    p = self.params
    times = p["amplitude_times"]
    what = f"{self.nest_name}: amplitude_times"
    steps = (stamp_steps(times, dt, what) if p["allow_offgrid_times"]
             else grid_steps(times, dt, what))
    if (np.diff(steps) <= 0).any():
      raise ValueError(f"{what} must be at strictly increasing steps of "
                       f"dt={dt} ms (NEST's BadProperty).")
    # the amplitude of time s is sent from step s - 1 on
    return {**self.window(dt), "change": (steps - 1).astype(np.int32),
            "values": p["amplitude_values"]}

  def emit(self, c, t, targets, key=None, *, dtype=jnp.float32, spec=None):
    n, hit = slots(targets)
    if c["change"].shape[0] == 0:
      return jnp.zeros((n,), dtype)
    t = jnp.asarray(t, jnp.int32)
    i = jnp.searchsorted(c["change"], t, side="right") - 1
    values = jnp.asarray(c["values"], dtype)
    amp = jnp.where(i >= 0, values[jnp.maximum(i, 0)], 0)
    on = active(c, t) & hit
    return jnp.where(on, amp, jnp.zeros((n,), dtype)).astype(dtype)


def finite_sequence(value: Any, what: str) -> np.ndarray:
  """A 1-D sequence of finite numbers as float64 (empty allowed)."""
  if isinstance(value, (str, bytes)):
    raise TypeError(f"{what} must be a sequence of numbers, got {value!r}.")
  try:
    arr = np.asarray(value)
  except ValueError:  # ragged
    raise TypeError(f"{what} must be a 1-D sequence of numbers.") from None
  if arr.size == 0:
    return np.zeros(0, np.float64)
  if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.number)
                           and not np.issubdtype(arr.dtype, np.bool_)):
    raise TypeError(f"{what} must be a 1-D sequence of numbers, got "
                    f"{arr.dtype} of shape {arr.shape}.")
  if not np.isfinite(arr).all():
    raise ValueError(f"{what} must be finite, got a non-finite entry at "
                     f"index {int(np.argmin(np.isfinite(arr)))}.")
  return arr.astype(np.float64)
