"""Delays in ms as whole steps, as NEST converts them, and the ring buffer
that holds a network's future input.

NEST rounds ``delay * steps_per_ms`` half up (``ld_round``). It multiplies
by steps per ms rather than dividing by ``dt``: 0.15 ms at ``dt = 0.1`` is
exactly 1.5 steps and rounds to 2, while ``0.15 / 0.1 = 1.4999...`` would
round to 1. A delay that rounds to less than one step is an error.

Example:
  >>> from brainshard._models.delays import delay_steps, ring_length
  >>> delay_steps([0.1, 0.15, 1.5], 0.1).tolist()
  [1, 2, 15]
  >>> ring_length(15, block=4)
  16
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["to_steps", "delay_steps", "too_short", "check_dt", "ring_length"]


def to_steps(ms: Any, per_ms: Any) -> Any:
  """``floor(ms * per_ms + 0.5)``, NEST's rounding, for a Python float, a
  NumPy array or a JAX array (delays drawn on the device); ``per_ms`` is
  ``1 / dt``. Floats in, floats out: the caller picks the integer type."""
  if isinstance(ms, jax.Array):
    return jnp.floor(ms * per_ms + 0.5)
  if isinstance(ms, np.ndarray):
    return np.floor(ms * per_ms + 0.5)
  return math.floor(ms * per_ms + 0.5)


def check_dt(dt: Any, where: str) -> float:
  """``dt`` as a positive finite float (NumPy scalars too), or an error
  naming ``where``."""
  if isinstance(dt, (bool, np.bool_)) or not isinstance(
      dt, (int, float, np.integer, np.floating)) or not (
          math.isfinite(dt) and dt > 0):
    raise ValueError(f"{where}: dt must be a positive number (ms), got "
                     f"{dt!r}.")
  return float(dt)


def too_short(where: str, ms: Any, steps: int, dt: float,
              which: str = "delay") -> ValueError:
  """The one error for a delay below the step (``ms`` None: not known)."""
  which = "a delay" if ms is None else f"{which} {ms} ms"
  return ValueError(
      f"{where}: {which} rounds to {steps} steps of dt={dt} ms; delays must "
      "be >= dt (NEST: 'Delay must be greater than or equal to resolution').")


def delay_steps(delay_ms: Any, dt: float, where: str = "delay_steps"
                ) -> np.ndarray:
  """Delays in ms (a number or an array) as int64 steps, NEST's rounding;
  a delay that rounds to less than one step raises (naming ``where``).

  >>> delay_steps([0.1, 0.06, 1.5], 0.1).tolist()
  [1, 1, 15]
  """
  dt = check_dt(dt, where)
  d = np.asarray(delay_ms, np.float64)
  steps = to_steps(d, 1.0 / dt).astype(np.int64)
  if steps.size and steps.min() < 1:
    bad = int(np.argmin(steps.ravel()))
    which = f"delay[{bad}] =" if d.ndim else "delay"
    raise too_short(where, d.ravel()[bad], int(steps.ravel()[bad]), dt, which)
  return steps


def ring_length(max_delay: int, block: int = 1) -> int:
  """Slots of the ring buffer: the largest delay rounded up to whole blocks
  of ``block`` steps (the steps between spike exchanges), so a block's
  slots are contiguous. A call clears the ``block`` slots it consumes before
  adding its spikes to slots ``t + 1 .. t + max_delay``: no collision."""
  return -(-max(1, int(max_delay)) // block) * block
