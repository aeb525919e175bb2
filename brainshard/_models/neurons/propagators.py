"""NEST's exact-integration constants, computed on the host as NEST does.

What NEST's ``pre_run_hook`` computes once for the ``iaf_psc`` models: the
propagators from a synaptic current to the membrane potential
(``libnestutil/iaf_propagator.cpp``: ``IAFPropagatorExp``,
``IAFPropagatorAlpha``, including the singular case ``tau_m == tau_syn``),
and a time in ms as whole steps (``Time(Time::ms(t)).get_steps()``, used
for ``t_ref``). Each is float64 NumPy, operation for operation NEST's
(division or multiplication by an inverse alike), and takes a scalar or
one value per neuron.

Example:
  >>> from brainshard._models.neurons.propagators import (
  ...     exp_propagator, alpha_propagators, refractory_steps)
  >>> round(float(exp_propagator(2.0, 10.0, 250.0, 0.1)), 12)
  0.000388204092
  >>> p31, p32 = alpha_propagators([2.0, 10.0], 10.0, 250.0, 0.1)
  >>> bool(p32[1] == 0.1 / 250.0 * np.exp(-0.1 / 10.0))  # tau_syn == tau_m
  True
  >>> refractory_steps([2.0, 0.0, 0.25], 0.1).tolist()
  [20, 0, 3]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["exp_propagator", "alpha_propagators", "refractory_steps"]

# NEST's IAFPropagator::NUMERICAL_STABILITY_FACTOR_: the regular P31 is used
# only for h > this * tau_m**2 / |tau_m - tau_syn| (cancellation otherwise).
_STABILITY = 1e-7
# NEST's default Time::Range::TICS_PER_MS (the kernel's tics_per_ms).
_TICS_PER_MS = 1000.0


def _p32(tau_syn: Any, tau_m: Any, c_m: Any, h: float):
  """NEST's ``IAFPropagator::evaluate_P32_`` over arrays: ``P32`` and the
  terms ``evaluate`` of the alpha propagator reuses."""
  tau_syn, tau_m, c_m = np.broadcast_arrays(
      *(np.asarray(x, np.float64) for x in (tau_syn, tau_m, c_m)))
  # tau_m == tau_syn makes beta infinite and inv_beta 0: P32 is NaN there
  # and the singular form below takes over, as in NEST.
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    beta = tau_syn * tau_m / (tau_m - tau_syn)
    gamma = beta / c_m
    inv_beta = (tau_m - tau_syn) / (tau_syn * tau_m)
    exp_h_tau_syn = np.exp(-h * (1 / tau_syn))
    expm1_h_tau = np.expm1(h * inv_beta)
    p32 = gamma * exp_h_tau_syn * expm1_h_tau
    # std::isnormal(P32) and P32 > 0
    regular = (np.isfinite(p32) & (p32 >= np.finfo(np.float64).tiny))
    exp_h_tau = np.exp(-h * (1 / tau_m))
    p32 = np.where(regular, p32, h * (1 / c_m) * exp_h_tau)
  return p32, beta, gamma, exp_h_tau_syn, expm1_h_tau, exp_h_tau


def exp_propagator(tau_syn: Any, tau_m: Any, c_m: Any, h: float):
  """``P21``: how much of an exponential synaptic current (pA) enters the
  membrane potential (mV) over one step ``h`` (ms); NEST's
  ``IAFPropagatorExp(tau_syn, tau_m, c_m).evaluate(h)``."""
  return _p32(tau_syn, tau_m, c_m, h)[0]


def alpha_propagators(tau_syn: Any, tau_m: Any, c_m: Any, h: float):
  """``(P31, P32)``: how an alpha current's derivative and the current
  enter the membrane potential over one step ``h``; NEST's
  ``IAFPropagatorAlpha(tau_syn, tau_m, c_m).evaluate(h)``."""
  p32, beta, gamma, exp_h_tau_syn, expm1_h_tau, exp_h_tau = _p32(
      tau_syn, tau_m, c_m, h)
  tau_syn, tau_m, c_m = np.broadcast_arrays(
      *(np.asarray(x, np.float64) for x in (tau_syn, tau_m, c_m)))
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    h_min_regular = _STABILITY * tau_m * tau_m / np.abs(tau_m - tau_syn)
    p31 = gamma * exp_h_tau_syn * (beta * expm1_h_tau - h)
    p31 = np.where(h > h_min_regular, p31,
                   0.5 * h * h * (1 / c_m) * exp_h_tau)
  return p31, p32


def refractory_steps(t_ref: Any, dt: float) -> np.ndarray:
  """A time (ms) as NEST's whole steps of ``dt``: rounded to tics, then up
  to steps (``Time(Time::ms(t_ref)).get_steps()``); int32."""
  tics = np.floor(np.asarray(t_ref, np.float64) * _TICS_PER_MS + 0.5)
  per_step = np.floor(_TICS_PER_MS * dt + 0.5)  # dround
  # (tics + TICS_PER_STEP - 1) * TICS_PER_STEP_INV, truncated to a long
  steps = np.trunc((tics + (per_step - 1)) * (1.0 / per_step))
  return steps.astype(np.int32)
