"""NEST's leaky integrate-and-fire neurons with conductance synapses:
``iaf_cond_exp`` and ``iaf_cond_alpha``.

The membrane integrates ``C_m dV/dt = -g_L (V - E_L) - g_ex (V - E_ex)
- g_in (V - E_in) + I_stim + I_e``; an input spike of weight ``w`` nS adds
``w`` to ``g_ex`` (``w > 0``) or ``-w`` to ``g_in`` (``w < 0``,
``sign_routed``), directly for ``iaf_cond_exp`` (exponential conductances,
``tau_syn_ex``/``tau_syn_in``) or as ``e / tau`` to ``dg_ex``/``dg_in`` for
``iaf_cond_alpha`` (alpha-shaped conductances peaking at ``w``). Inside
the ODE, ``V`` is capped at ``V_th`` and held at ``V_reset`` while the
neuron is refractory, as in NEST's dynamics function.

One step, as NEST's ``update()``: GSL's RKF45 over the step (absolute
error 1e-3, relative 0; :mod:`~brainshard._models.neurons.odeint`), then
``iaf_cond_exp`` adds this step's spike input before the refractory and
threshold test, ``iaf_cond_alpha`` after it; ``V_m >= V_th`` spikes,
resets to ``V_reset`` and holds there for ``t_ref``.

Example:
  >>> from brainshard._models.neurons.iaf_cond import IafCondExp
  >>> state, spikes = IafCondExp(I_e=400.0).simulate(1000)  # regular firing
  >>> int(spikes.sum()), float(state['V_m'][0]) < -55.0   # in 100 ms
  (10, True)
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax.numpy as jnp

from brainshard._models.neurons.ode_neuron import OdeNeuron
from brainshard._models.neurons.odeint import rkf45

__all__ = ["iaf_cond_exp", "iaf_cond_alpha"]

# NEST 3.10's defaults (nest.GetDefaults; the header's V_reset is stale).
_DEFAULTS = {
    "V_th": -55.0, "V_reset": -60.0, "t_ref": 2.0, "g_L": 16.6667,
    "C_m": 250.0, "E_ex": 0.0, "E_in": -85.0, "E_L": -70.0,
    "tau_syn_ex": 0.2, "tau_syn_in": 2.0, "I_e": 0.0}
# NEST's BadProperty checks, shared by both models.
_CHECKS = (
    (lambda p: p["V_reset"] < p["V_th"],
     "Reset potential must be smaller than threshold (V_reset < V_th)."),
    (lambda p: p["C_m"] > 0, "Capacitance must be strictly positive (C_m)."),
    (lambda p: p["t_ref"] >= 0, "Refractory time cannot be negative (t_ref)."),
    (lambda p: (p["tau_syn_ex"] > 0) & (p["tau_syn_in"] > 0),
     "All time constants must be strictly positive (tau_syn_ex, "
     "tau_syn_in)."))
# GSL control for both: gsl_odeiv_control_y_new(1e-3, 0.0).
_TOL = {"eps_abs": 1e-3, "eps_rel": 0.0}


class _IafCond(OdeNeuron):
  """What both models share: parameters, checks, constants."""

  defaults = _DEFAULTS
  receptors = ("ex", "in")
  sign_routed = True
  recordables = ("V_m", "g_ex", "g_in")
  checks = _CHECKS

  def constants(self, params: Mapping[str, Any], dt: float) -> dict:
    c = super().constants(params, dt)
    c["ge_init"] = math.e / params["tau_syn_ex"]  # alpha only: PSConInit_E
    c["gi_init"] = math.e / params["tau_syn_in"]
    return c

  @staticmethod
  def _dv(c, refr, i_stim, v, g_ex, g_in):
    """NEST's ``dV_m/dt`` of both models: ``V_m`` read as ``V_reset`` while
    refractory (where it does not move) and as at most ``V_th``."""
    v = jnp.where(refr, c["V_reset"], jnp.minimum(v, c["V_th"]))
    i_ex = g_ex * (v - c["E_ex"])
    i_in = g_in * (v - c["E_in"])
    i_l = c["g_L"] * (v - c["E_L"])
    dv = (-i_l + i_stim + c["I_e"] - i_ex - i_in) / c["C_m"]
    return jnp.where(refr, 0.0, dv)

  def _refractory(self, c, state, v):
    """NEST's refractory/threshold block: ``(V_m, r, spikes)``."""
    refr = state["r"] > 0
    spikes = ~refr & (v >= c["V_th"])
    r = jnp.where(refr, state["r"] - 1,
                  jnp.where(spikes, c["ref_steps"], state["r"]))
    return jnp.where(refr | spikes, c["V_reset"], v), r, spikes


class IafCondExp(_IafCond):
  """NEST's ``iaf_cond_exp``: exponential conductances (see the module)."""

  nest_name = "iaf_cond_exp"
  initial = {"V_m": "E_L", "g_ex": 0.0, "g_in": 0.0, **OdeNeuron.carried}

  def step(self, c, state, inputs, currents):
    refr = state["r"] > 0
    i_stim = state["I_stim"]

    def f(y, aux):  # NEST's iaf_cond_exp_dynamics
      return (self._dv(c, refr, i_stim, *y), -y[1] / c["tau_syn_ex"],
              -y[2] / c["tau_syn_in"])

    y = (state["V_m"], state["g_ex"], state["g_in"])
    h = self.first_step(state["IntegrationStep"], c["dt"])
    (v, g_ex, g_in), h, _ = rkf45(f, y, h, c["dt"], **_TOL)
    g_ex = g_ex + inputs[0]
    g_in = g_in - inputs[1]  # inputs[1] sums negative weights: NEST adds -w
    v, r, spikes = self._refractory(c, state, v)
    return {"V_m": v, "g_ex": g_ex, "g_in": g_in, "r": r, "IntegrationStep": h,
            "I_stim": currents}, spikes


class IafCondAlpha(_IafCond):
  """NEST's ``iaf_cond_alpha``: alpha-shaped conductances (see the
  module); ``dg_ex``/``dg_in`` are their derivatives (nS/ms)."""

  nest_name = "iaf_cond_alpha"
  initial = {"V_m": "E_L", "dg_ex": 0.0, "g_ex": 0.0, "dg_in": 0.0,
             "g_in": 0.0, **OdeNeuron.carried}

  def step(self, c, state, inputs, currents):
    refr = state["r"] > 0
    i_stim = state["I_stim"]

    def f(y, aux):  # NEST's iaf_cond_alpha_dynamics
      return (self._dv(c, refr, i_stim, y[0], y[2], y[4]),
              -y[1] / c["tau_syn_ex"], y[1] - y[2] / c["tau_syn_ex"],
              -y[3] / c["tau_syn_in"], y[3] - y[4] / c["tau_syn_in"])

    y = tuple(state[k] for k in ("V_m", "dg_ex", "g_ex", "dg_in", "g_in"))
    h = self.first_step(state["IntegrationStep"], c["dt"])
    (v, dg_ex, g_ex, dg_in, g_in), h, _ = rkf45(f, y, h, c["dt"], **_TOL)
    v, r, spikes = self._refractory(c, state, v)
    dg_ex = dg_ex + inputs[0] * c["ge_init"]
    dg_in = dg_in - inputs[1] * c["gi_init"]
    return {"V_m": v, "dg_ex": dg_ex, "g_ex": g_ex, "dg_in": dg_in,
            "g_in": g_in, "r": r, "IntegrationStep": h,
            "I_stim": currents}, spikes
