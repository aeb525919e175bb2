"""NEST's adaptive exponential integrate-and-fire neuron with exponential
conductances, ``aeif_cond_exp`` (Brette & Gerstner 2005).

``C_m dV/dt = -g_L (V - E_L) + g_L Delta_T exp((V - V_th) / Delta_T)
- g_ex (V - E_ex) - g_in (V - E_in) - w + I_e + I_stim`` and
``tau_w dw/dt = a (V - E_L) - w``; an input spike of weight ``w`` nS adds
to ``g_ex`` (``w > 0``) or ``-w`` to ``g_in`` (``w < 0``, ``sign_routed``),
both decaying with ``tau_syn_ex``/``tau_syn_in``.

One step, as NEST's ``update()``: GSL's RKF45 over the step with NEST's
``control_yp(gsl_error_tol, gsl_error_tol)``, and after every accepted
substep the spike test inside the step: ``V_m >= V_peak`` (``V_th`` when
``Delta_T == 0``) resets ``V_m`` to ``V_reset``, adds ``b`` to ``w`` and
starts ``t_ref`` (during which ``V_m`` stays at ``V_reset``); the rest of
the step goes on from there. Then this step's spike input is added. Two
spikes in one step are possible in NEST; here the step reports one.

Example:
  >>> from brainshard._models.neurons.aeif import AeifCondExp
  >>> state, spikes = AeifCondExp(I_e=1000.0).simulate(1000)  # 100 ms
  >>> int(spikes.sum()), float(state['w'][0]) > 0   # adapted: +b each spike
  (6, True)
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from brainshard._models.neurons.ode_neuron import OdeNeuron
from brainshard._models.neurons.odeint import rkf45

__all__ = ["aeif_cond_exp"]

# NEST refuses (V_peak - V_th) / Delta_T this large: exp() would overflow
# at the spike (a margin of 1e20 below DBL_MAX).
_MAX_EXP_ARG = math.log(sys.float_info.max / 1e20)


class AeifCondExp(OdeNeuron):
  """NEST's ``aeif_cond_exp`` (see the module)."""

  nest_name = "aeif_cond_exp"
  defaults = {
      "V_peak": 0.0, "V_reset": -60.0, "t_ref": 0.0, "g_L": 30.0,
      "C_m": 281.0, "E_ex": 0.0, "E_in": -85.0, "E_L": -70.6,
      "Delta_T": 2.0, "tau_w": 144.0, "a": 4.0, "b": 80.5, "V_th": -50.4,
      "tau_syn_ex": 0.2, "tau_syn_in": 2.0, "I_e": 0.0,
      "gsl_error_tol": 1e-6}
  initial = {"V_m": "E_L", "g_ex": 0.0, "g_in": 0.0, "w": 0.0,
             **OdeNeuron.carried}
  receptors = ("ex", "in")
  sign_routed = True
  recordables = ("V_m", "g_ex", "g_in", "w")
  checks = (
      (lambda p: p["V_peak"] >= p["V_th"], "V_peak >= V_th required."),
      (lambda p: p["Delta_T"] >= 0, "Delta_T must be positive."),
      (lambda p: (p["Delta_T"] == 0) | ((p["V_peak"] - p["V_th"]) < _MAX_EXP_ARG
                                        * p["Delta_T"]),
       "The current combination of V_peak, V_th and Delta_T will lead to "
       "numerical overflow at spike time; try for instance to increase "
       "Delta_T or to reduce V_peak to avoid this problem."),
      (lambda p: p["V_reset"] < p["V_peak"], "Ensure that: V_reset < V_peak."),
      (lambda p: p["C_m"] > 0, "Ensure that C_m > 0."),
      (lambda p: p["t_ref"] >= 0, "Ensure that t_ref >= 0."),
      (lambda p: (p["tau_syn_ex"] > 0) & (p["tau_syn_in"] > 0)
       & (p["tau_w"] > 0), "All time constants must be strictly positive."),
      (lambda p: p["gsl_error_tol"] > 0,
       "The gsl_error_tol must be strictly positive."))

  def constants(self, params: Mapping[str, Any], dt: float) -> dict:
    c = super().constants(params, dt)
    # the spike test: V_peak, or V_th for an iaf neuron (Delta_T == 0)
    c["V_spike"] = np.where(np.asarray(params["Delta_T"]) > 0,
                            params["V_peak"], params["V_th"])
    return c

  def step(self, c, state, inputs, currents):
    i_stim = state["I_stim"]
    # Delta_T == 0 has no exponential; a safe divisor keeps exp() finite
    iaf = c["Delta_T"] == 0
    delta_t = jnp.where(iaf, 1.0, c["Delta_T"])

    def f(y, aux):  # NEST's aeif_cond_exp_dynamics
      refr = aux[0] > 0
      v = jnp.where(refr, c["V_reset"], jnp.minimum(y[0], c["V_peak"]))
      g_ex, g_in, w = y[1], y[2], y[3]
      i_ex = g_ex * (v - c["E_ex"])
      i_in = g_in * (v - c["E_in"])
      i_spike = jnp.where(iaf, 0.0, c["g_L"] * c["Delta_T"]
                          * jnp.exp((v - c["V_th"]) / delta_t))
      dv = (-c["g_L"] * (v - c["E_L"]) + i_spike - i_ex - i_in - w + c["I_e"]
            + i_stim) / c["C_m"]
      dw = (c["a"] * (v - c["E_L"]) - w) / c["tau_w"]
      return (jnp.where(refr, 0.0, dv), -g_ex / c["tau_syn_ex"],
              -g_in / c["tau_syn_in"], dw)

    def event(y, aux, accepted):
      """NEST's test after each substep: clamp, or spike, reset, adapt."""
      r, count = aux
      v, w = y[0], y[3]
      refr = accepted & (r > 0)
      fire = accepted & (r <= 0) & (v >= c["V_spike"])
      v = jnp.where(refr | fire, c["V_reset"], v)
      w = jnp.where(fire, w + c["b"], w)
      # +1: the count-down right after the loop; none at all if t_ref is 0
      r = jnp.where(fire, jnp.where(c["ref_steps"] > 0, c["ref_steps"] + 1, 0),
                    r)
      return (v, y[1], y[2], w), (r, count + fire.astype(count.dtype))

    y = tuple(state[k] for k in ("V_m", "g_ex", "g_in", "w"))
    h = self.first_step(state["IntegrationStep"], c["dt"])
    count = jnp.zeros_like(state["r"])  # spikes in this step
    tol = c["gsl_error_tol"]
    (v, g_ex, g_in, w), h, (r, count) = rkf45(
        f, y, h, c["dt"], (state["r"], count), eps_abs=tol, eps_rel=tol,
        a_y=0.0, a_dydt=1.0, event=event)
    r = jnp.where(r > 0, r - 1, r)
    return {"V_m": v, "g_ex": g_ex + inputs[0], "g_in": g_in - inputs[1],
            "w": w, "r": r, "IntegrationStep": h,
            "I_stim": currents}, count > 0
