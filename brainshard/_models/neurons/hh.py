"""NEST's Hodgkin-Huxley neuron with alpha-shaped current synapses,
``hh_psc_alpha``.

``C_m dV/dt = -g_Na m^3 h (V - E_Na) - g_K n^4 (V - E_K) - g_L (V - E_L)
+ I_syn_ex + I_syn_in + I_e + I_stim`` with the classic rate functions of ``m``
(``Act_m``), ``h`` (``Inact_h``) and ``n`` (``Act_n``), as NEST writes them
for ``V`` in mV. A spike of weight ``w`` pA adds ``w e / tau_syn_ex`` to
``dI_syn_ex`` (``w > 0``) or ``w e / tau_syn_in`` to ``dI_syn_in`` (``w < 0``,
``sign_routed``; ``I_syn_in`` is negative), so each current peaks at ``w``.

One step, as NEST's ``update()``: GSL's RKF45 over the step (absolute
error 1e-3, relative 0), then this step's spike input, then the spike
test: not refractory, ``V_m >= 0`` mV and ``V_m`` below where the step
began (the peak has passed). A spike starts ``t_ref`` of
pseudo-refractoriness that only blocks the next spike; ``V_m`` is never
reset. NEST starts every neuron at ``V_m = -65`` mV (not ``E_L``) with
the gates at their equilibrium there. The currents carry NEST's
recordables' names, ``I_syn_ex`` and ``I_syn_in``.

Example:
  >>> from brainshard._models.neurons.hh import HhPscAlpha
  >>> _, spikes = HhPscAlpha(I_e=1000.0).simulate(1000)
  >>> int(spikes.sum())                            # in 100 ms
  7
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from brainshard._models.neurons.ode_neuron import OdeNeuron
from brainshard._models.neurons.odeint import rkf45

__all__ = ["hh_psc_alpha", "gate_rates"]


def gate_rates(v, exp=jnp.exp):
  """NEST's opening and closing rates (1/ms) at ``v`` (mV):
  ``(alpha_m, beta_m, alpha_h, beta_h, alpha_n, beta_n)``."""
  alpha_n = (0.01 * (v + 55.0)) / (1.0 - exp(-(v + 55.0) / 10.0))
  beta_n = 0.125 * exp(-(v + 65.0) / 80.0)
  alpha_m = (0.1 * (v + 40.0)) / (1.0 - exp(-(v + 40.0) / 10.0))
  beta_m = 4.0 * exp(-(v + 65.0) / 18.0)
  alpha_h = 0.07 * exp(-(v + 65.0) / 20.0)
  beta_h = 1.0 / (1.0 + exp(-(v + 35.0) / 10.0))
  return alpha_m, beta_m, alpha_h, beta_h, alpha_n, beta_n


def _resting_gates() -> dict:
  """The gates at equilibrium at -65 mV, NEST's initial state (float64)."""
  am, bm, ah, bh, an, bn = gate_rates(-65.0, exp=math.exp)
  return {"Act_m": am / (am + bm), "Inact_h": ah / (ah + bh),
          "Act_n": an / (an + bn)}


class HhPscAlpha(OdeNeuron):
  """NEST's ``hh_psc_alpha`` (see the module)."""

  nest_name = "hh_psc_alpha"
  defaults = {
      "t_ref": 2.0, "g_Na": 12000.0, "g_K": 3600.0, "g_L": 30.0,
      "C_m": 100.0, "E_Na": 50.0, "E_K": -77.0, "E_L": -54.402,
      "tau_syn_ex": 0.2, "tau_syn_in": 2.0, "I_e": 0.0}
  initial = {"V_m": -65.0, **_resting_gates(), "dI_syn_ex": 0.0,
             "I_syn_ex": 0.0, "dI_syn_in": 0.0, "I_syn_in": 0.0,
             **OdeNeuron.carried}
  receptors = ("ex", "in")
  sign_routed = True
  recordables = ("V_m", "Act_m", "Inact_h", "Act_n", "I_syn_ex", "I_syn_in")
  checks = (
      (lambda p: p["C_m"] > 0, "Capacitance must be strictly positive."),
      (lambda p: p["t_ref"] >= 0, "Refractory time cannot be negative."),
      (lambda p: (p["tau_syn_ex"] > 0) & (p["tau_syn_in"] > 0),
       "All time constants must be strictly positive."),
      (lambda p: (p["g_K"] >= 0) & (p["g_Na"] >= 0) & (p["g_L"] >= 0),
       "All conductances must be non-negative."))

  def constants(self, params: Mapping[str, Any], dt: float) -> dict:
    c = super().constants(params, dt)
    c["ex_init"] = math.e / np.asarray(params["tau_syn_ex"])  # PSCurrInit_E
    c["in_init"] = math.e / np.asarray(params["tau_syn_in"])
    return c

  def step(self, c, state, inputs, currents):
    i_stim = state["I_stim"]

    def f(y, aux):  # NEST's hh_psc_alpha_dynamics
      v, m, h, n, di_ex, i_ex, di_in, i_in = y
      am, bm, ah, bh, an, bn = gate_rates(v)
      i_na = c["g_Na"] * m * m * m * h * (v - c["E_Na"])
      i_k = c["g_K"] * n * n * n * n * (v - c["E_K"])
      i_l = c["g_L"] * (v - c["E_L"])
      dv = (-(i_na + i_k + i_l) + i_stim + c["I_e"] + i_ex + i_in) / c["C_m"]
      return (dv, am * (1 - m) - bm * m, ah * (1 - h) - bh * h,
              an * (1 - n) - bn * n,
              -di_ex / c["tau_syn_ex"], di_ex - i_ex / c["tau_syn_ex"],
              -di_in / c["tau_syn_in"], di_in - i_in / c["tau_syn_in"])

    names = ("V_m", "Act_m", "Inact_h", "Act_n", "dI_syn_ex", "I_syn_ex",
             "dI_syn_in", "I_syn_in")
    u_old = state["V_m"]
    h = self.first_step(state["IntegrationStep"], c["dt"])
    y, h, _ = rkf45(f, tuple(state[k] for k in names), h, c["dt"],
                    eps_abs=1e-3, eps_rel=0.0)
    out = dict(zip(names, y))
    out["dI_syn_ex"] = out["dI_syn_ex"] + inputs[0] * c["ex_init"]
    # NEST keeps w < 0
    out["dI_syn_in"] = out["dI_syn_in"] + inputs[1] * c["in_init"]
    # spike: the threshold reached and the peak passed, not refractory
    refr = state["r"] > 0
    v = out["V_m"]
    spikes = ~refr & (v >= 0.0) & (u_old > v)
    out["r"] = jnp.where(refr, state["r"] - 1,
                         jnp.where(spikes, c["ref_steps"], state["r"]))
    out["IntegrationStep"] = h
    out["I_stim"] = currents
    return out, spikes
