"""Times in ms as NEST's whole steps: grid times, stamps rounded up.

NEST keeps times in tics (``Time::Range::TICS_PER_MS``, 1000 by default; a
step of ``dt`` is ``round(1000 * dt)`` tics). A device time becomes tics as
``Time::ms`` does, ``trunc(t * 1000 + 0.5)``, and must then be a whole
number of steps (``start``, ``stop``, ``origin``, spike and amplitude
times): 0.15 ms at ``dt = 0.1`` is refused, as NEST refuses it. With
``allow_offgrid_times`` a spike or amplitude time is instead moved to the
end of the step it lies in (``Time::ms_stamp``): 0.15 ms is stamped 0.2.

Example:
  >>> from brainshard._models.devices.times import grid_steps, stamp_steps
  >>> grid_steps([0.0, 0.3, 1e3], 0.1, 'start').tolist()
  [0, 3, 10000]
  >>> grid_steps(0.15, 0.1, 'start')
  Traceback (most recent call last):
  ...
  ValueError: start: 0.15 ms is not a multiple of the resolution dt=0.1 ms (NEST's BadProperty).
  >>> stamp_steps([0.15, 0.2, 0.2001], 0.1).tolist()
  [2, 2, 3]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["TICS_PER_MS", "tics_per_step", "grid_steps", "stamp_steps",
           "INT32_MAX", "INT32_MIN"]

TICS_PER_MS = 1000          # NEST's default kernel tics_per_ms
INT32_MAX = 2**31 - 1       # a step that never comes (NEST's +inf)
INT32_MIN = -2**31 + 1
_MAX_MS = 2.0**62 / TICS_PER_MS   # NEST's Time::LIM_MAX, about


def tics_per_step(dt: float) -> int:
  """Tics in one step of ``dt`` ms; ``dt`` must be a whole number of tics
  (NEST sets its resolution so)."""
  tics = math.floor(dt * TICS_PER_MS + 0.5)
  if tics < 1 or abs(dt * TICS_PER_MS - tics) > 1e-6:
    raise ValueError(f"dt={dt} ms is not a whole number of NEST's tics "
                     f"({1 / TICS_PER_MS} ms).")
  return tics


def _tics(t: np.ndarray, what: str) -> np.ndarray:
  """``Time::ms(t)``: tics rounded half up, truncated toward zero (a C++
  cast), for finite times within int64's tics."""
  big = np.abs(t) > _MAX_MS
  if big.any():
    raise ValueError(f"{what}: {t[big].ravel()[0] if t.ndim else float(t)} "
                     f"ms is beyond NEST's time range ({_MAX_MS:g} ms).")
  return np.trunc(t * TICS_PER_MS + 0.5).astype(np.int64)


def grid_steps(t_ms: Any, dt: float, what: str) -> np.ndarray:
  """Finite times (ms) on the grid as int64 steps; a time that is not a
  whole number of steps raises, naming ``what``."""
  t = np.asarray(t_ms, np.float64)
  tps = tics_per_step(dt)
  tics = _tics(t, what)
  off = tics % tps != 0
  if off.any():
    bad = t[off].ravel()[0] if t.ndim else float(t)
    raise ValueError(f"{what}: {bad} ms is not a multiple of the resolution "
                     f"dt={dt} ms (NEST's BadProperty).")
  return tics // tps


def stamp_steps(t_ms: Any, dt: float, what: str = "time") -> np.ndarray:
  """Finite times (ms) as the int64 step whose end is at or after them
  (``Time::ms_stamp``, operation for operation)."""
  t = np.asarray(t_ms, np.float64)
  tps = tics_per_step(dt)
  _tics(t, what)  # within range
  n = np.trunc(t * TICS_PER_MS).astype(np.int64)
  n = n - np.fmod(n, tps)  # C++'s %: toward zero
  ms = n * (1.0 / tps) * (tps / TICS_PER_MS)
  n = np.where(ms < t, n + tps, n)
  return n // tps
