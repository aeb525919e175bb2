"""NEST's ``noise_generator``: a piecewise constant Gaussian current, a new
amplitude per target every ``dt`` ms.

A current generator (``base.py``): active in step ``t`` when ``origin +
start < t + 2 <= origin + stop``. As NEST's ``update``, it draws new
amplitudes in its first active step ``t0`` and every ``dt`` ms (``D``
steps) after, so step ``t`` sends the amplitudes of interval ``m = (t -
t0) // D``: ``mean + sqrt(std**2 + std_mod**2 * sin(omega h (m D + 1) +
phase)) * N``, with ``N`` standard normal, independent per target and per
interval, and ``omega = 2 pi frequency``. Those ``N`` are ``bs.random``'s
normal draw from the connection's key folded with ``m``: a pure function
of ``(key, m)``, the same on any mesh. What step ``t`` sends reaches a
target over ``d`` steps in ``currents[t + d]``.

NEST's sine modulation restarts at each ``Simulate`` call (from the
kernel's time then); here it runs as one ``Simulate`` from time 0 does.

Example:
  >>> import jax
  >>> from brainshard._models.devices.noise import NoiseGenerator
  >>> noise = NoiseGenerator(mean=10.0, std=5.0, dt=0.5, start=1.0)
  >>> c = noise.constants(0.1)
  >>> int(c['t0']), int(c['interval'])   # first active step, steps per draw
  (9, 5)
  >>> key = jax.random.key(0)
  >>> a, b, z = (noise.emit(c, t, 3, key) for t in (9, 13, 14))
  >>> bool((a == b).all()), bool((a != z).all())
  (True, True)
  >>> noise.emit(c, 8, 3, key).tolist()  # not active yet
  [0.0, 0.0, 0.0]
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.devices.base import (
    WINDOW, Device, active, base_key, number, slots)
from brainshard._models.devices.times import grid_steps
from brainshard._simulation.random.draw import normal

__all__ = ["NoiseGenerator"]


class NoiseGenerator(Device):
  """NEST's ``noise_generator``: ``mean``, ``std``, ``std_mod`` (pA),
  ``dt`` (ms, default ``10 * resolution``), ``frequency`` (Hz), ``phase``
  (degrees); see the module doc."""

  nest_name = "noise_generator"
  defaults = {**WINDOW, "mean": 0.0, "std": 0.0, "dt": None,
              "std_mod": 0.0, "frequency": 0.0, "phase": 0.0}
  emits = "current"
  random = True

  def check(self, name, value):
    if name == "dt":
      return None if value is None else number(
          value, f"{self.nest_name}: dt")
    return super().check(name, value)

  def validate(self, p):
    for name in ("std", "std_mod"):
      if p[name] < 0:
        raise ValueError(f"{self.nest_name}: {name}: the standard deviation "
                         f"cannot be negative (got {p[name]}).")
    if p["std_mod"] > p["std"]:
      raise ValueError(f"{self.nest_name}: std_mod must be <= std (got "
                       f"std_mod={p['std_mod']}, std={p['std']}).")
    if p["dt"] is not None and p["dt"] <= 0:
      raise ValueError(f"{self.nest_name}: dt must be > 0 (got {p['dt']}).")

  def constants(self, dt):
    p = self.params
    window = self.window(dt)
    interval = 10 if p["dt"] is None else int(
        grid_steps(p["dt"], dt, f"{self.nest_name}: dt"))
    if interval < 1:
      raise ValueError(f"{self.nest_name}: dt={p['dt']} ms is below the "
                       f"resolution {dt} ms.")
    omega = 2.0 * math.pi * p["frequency"] / 1000.0
    return {**window, "t0": window["first"],
            "interval": np.int32(interval),
            "mean": np.float64(p["mean"]), "std": np.float64(p["std"]),
            "std_mod": np.float64(p["std_mod"]),
            "omega_h": np.float64(omega * dt),
            "phase": np.float64(p["phase"] * 2.0 * math.pi / 360.0)}

  def emit(self, c, t, targets, key=None, *, dtype=jnp.float32, spec=None):
    n, hit = slots(targets)
    t = jnp.asarray(t, jnp.int32)
    mean = jnp.asarray(c["mean"], dtype)
    if self.params["std"] == 0:  # nothing to draw
      amp = jnp.broadcast_to(mean, (n,))
    else:
      m = jnp.maximum(t - c["t0"], 0) // c["interval"]
      z = normal(size=n, key=jax.random.fold_in(base_key(
          key, self.nest_name), m), dtype=dtype, spec=spec)
      std = jnp.asarray(c["std"], dtype)
      if self.params["std_mod"] != 0:
        # NEST's y_1 after the rotations of steps t0 .. t0 + m D
        y1 = jnp.sin(jnp.asarray(c["omega_h"], dtype)
                     * (m * c["interval"] + 1).astype(dtype)
                     + jnp.asarray(c["phase"], dtype))
        std = jnp.sqrt(std * std + y1 * jnp.asarray(c["std_mod"], dtype) ** 2)
      amp = mean + std * z
    on = active(c, t) & hit
    return jnp.where(on, amp, jnp.zeros((n,), dtype)).astype(dtype)
