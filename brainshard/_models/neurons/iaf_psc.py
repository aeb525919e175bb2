"""NEST's current-based leaky integrate-and-fire neurons, exactly integrated.

``iaf_psc_delta``, ``iaf_psc_exp`` and ``iaf_psc_alpha``: NEST's
parameters (ms, mV, pA, pF), state names and one step of its ``update``
with the propagators of ``propagators.py``. Every step, as NEST's:

1. unless refractory, the membrane potential moves on exactly with the
   currents of the step before (synaptic, ``I_e``, and ``I_stim``: what the
   current devices delivered in the step before); if refractory, the
   counter ``r`` counts down and ``V_m`` stays at ``V_reset``;
2. the synaptic currents decay, and this step's spike input is added;
3. ``V_m >= V_th`` fires: ``V_m = V_reset``, ``r = t_ref`` in steps;
4. this step's current input is kept in ``I_stim`` for the next step.

NEST keeps ``V_m`` relative to ``E_L`` inside; the state holds ``V_m`` in
mV as NEST reports it, and each step works relative to ``E_L`` as NEST
does. That round trip, and the multiply-adds XLA fuses (``rounding.py``),
move the last bit of a float64 step; exact integration damps such errors,
so ``V_m`` stays within ~5e-13 mV of NEST's. NEST's stochastic threshold
(``iaf_psc_exp``'s ``delta``, ``rho``), ``ignore_and_spike`` and
``iaf_psc_exp``'s current receptor 1 are not implemented.

Example:
  >>> from brainshard._models.neurons.iaf_psc import IafPscExp
  >>> _, spikes = IafPscExp(I_e=[0.0, 376.0, 1000.0]).simulate(1000)
  >>> spikes.sum(axis=0).tolist()                  # in 100 ms
  [0, 1, 15]
"""

from __future__ import annotations

from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from brainshard._models.neurons.base import (
    NeuronModel, cast_constants, lower_bound)
from brainshard._models.neurons.propagators import (
    alpha_propagators, exp_propagator, refractory_steps)

__all__ = ["IafPscDelta", "IafPscExp", "IafPscAlpha"]

# NEST's defaults shared by the three models.
_IAF = {"E_L": -70.0, "V_th": -55.0, "V_reset": -70.0, "C_m": 250.0,
        "tau_m": 10.0, "t_ref": 2.0, "I_e": 0.0}
_SYN = {"tau_syn_ex": 2.0, "tau_syn_in": 2.0}


def _refuse(name: str, what: str, bad: Any) -> None:
  if np.any(bad):
    raise ValueError(f"{name}: {what} (NEST's BadProperty).")


def _validate_iaf(name: str, p: Mapping[str, Any],
                  taus: tuple[str, ...]) -> None:
  """What NEST's ``Parameters_::set`` of the iaf models refuses."""
  _refuse(name, "V_reset must be smaller than V_th",
          np.asarray(p["V_reset"]) >= np.asarray(p["V_th"]))
  _refuse(name, "C_m must be > 0", np.asarray(p["C_m"]) <= 0)
  for tau in ("tau_m",) + taus:
    _refuse(name, f"{tau} must be > 0", np.asarray(p[tau]) <= 0)
  _refuse(name, "t_ref must not be negative", np.asarray(p["t_ref"]) < 0)


def _relative(p: Mapping[str, Any], dt: float) -> dict:
  """The constants every iaf model shares: thresholds relative to E_L, as
  NEST stores them, and the refractory period in steps."""
  e_l = np.asarray(p["E_L"], np.float64)
  return {"E_L": e_l, "Theta": p["V_th"] - e_l, "V_reset": p["V_reset"] - e_l,
          "I_e": np.asarray(p["I_e"], np.float64),
          "RefractoryCounts": refractory_steps(p["t_ref"], dt)}


def _kept(currents: Any, v: Any):
  """This step's current input, kept for the next step (NEST's ``i_0_``,
  ``y0_``) in the state's dtype and shape (a scalar 0 broadcasts)."""
  return jnp.broadcast_to(jnp.asarray(currents, v.dtype), v.shape)


def _fire(c: Mapping[str, Any], v: Any, r: Any):
  """Threshold, reset and refractory counter: ``(v, r, spikes)``."""
  spikes = v >= c["Theta"]
  return (jnp.where(spikes, c["V_reset"], v),
          jnp.where(spikes, c["RefractoryCounts"], r), spikes)


class IafPscDelta(NeuronModel):
  """NEST's ``iaf_psc_delta``: a spike's weight (mV) jumps ``V_m``.

  One receptor, either sign. Input arriving while refractory is dropped,
  or, with ``refractory_input=True``, summed (decayed by
  ``exp(-r h / tau_m)``) into ``refr_spikes_buffer`` and added when the
  neuron leaves its refractory period. ``V_min`` bounds ``V_m`` below.

  Example:
    >>> import jax, numpy as np
    >>> model = IafPscDelta()
    >>> c = model.constants(model.params, 0.1)
    >>> state, spikes = jax.jit(model.update)(
    ...     c, model.init_state(2), np.array([[16.0, 2.0]]), np.zeros(2))
    >>> spikes.tolist(), np.asarray(state['V_m']).tolist()
    ([True, False], [-70.0, -68.0])
  """

  nest_name = "iaf_psc_delta"
  defaults = {**_IAF, "V_min": -np.finfo(np.float64).max,
              "refractory_input": False}
  initial = {"V_m": -70.0, "I_stim": 0.0, "refr_spikes_buffer": 0.0, "r": 0}
  receptors = ("ex",)
  recordables = ("V_m",)
  counters = ("r",)

  def validate(self, p):
    _validate_iaf(self.nest_name, p, ())

  def constants(self, p, dt):
    p33 = np.exp(-dt / np.asarray(p["tau_m"], np.float64))
    return {**_relative(p, dt), "P33": p33,
            "P30": 1 / np.asarray(p["C_m"]) * (1 - p33) * p["tau_m"],
            "V_min": lower_bound(p["V_min"] - np.asarray(p["E_L"])),
            "h": np.float64(dt), "tau_m": np.asarray(p["tau_m"], np.float64)}

  def update(self, c, state, inputs, currents):
    dtype = state["V_m"].dtype
    c, inputs = cast_constants(c, dtype), jnp.asarray(inputs, dtype)
    v, r = state["V_m"] - c["E_L"], state["r"]
    buffered = state["refr_spikes_buffer"]
    free = r == 0
    moved = c["P30"] * (state["I_stim"] + c["I_e"]) + c["P33"] * v + inputs[0]
    if self.params["refractory_input"]:
      # NEST adds what arrived while refractory once the neuron is free,
      # decayed over the steps it still had to wait.
      moved = moved + buffered
      late = inputs[0] * jnp.exp(-r.astype(dtype) * c["h"] / c["tau_m"])
      buffered = jnp.where(free, 0.0, buffered + late)
    moved = jnp.where(moved < c["V_min"], c["V_min"], moved)
    v = jnp.where(free, moved, v)
    r = jnp.where(free, r, r - 1)
    v, r, spikes = _fire(c, v, r)
    return {"V_m": v + c["E_L"], "I_stim": _kept(currents, v),
            "refr_spikes_buffer": buffered, "r": r}, spikes


class _TwoCurrents(NeuronModel):
  """What ``iaf_psc_exp`` and ``iaf_psc_alpha`` share: an excitatory and an
  inhibitory current, fed by the weight's sign as NEST does."""

  receptors = ("ex", "in")
  sign_routed = True
  recordables = ("I_syn_ex", "I_syn_in", "V_m")
  counters = ("r",)

  def validate(self, p):
    _validate_iaf(self.nest_name, p, tuple(_SYN))


class IafPscExp(_TwoCurrents):
  """NEST's ``iaf_psc_exp``: exponentially decaying synaptic currents.

  Receptors ``('ex', 'in')``, routed by the weight's sign as in NEST; a
  spike of weight w (pA) steps ``I_syn_ex`` (w > 0) or ``I_syn_in`` by w.

  Example:
    >>> model = IafPscExp(tau_syn_ex=0.5)
    >>> model.receptors, model.sign_routed, model.recordable()
    (('ex', 'in'), True, ('I_syn_ex', 'I_syn_in', 'V_m'))
  """

  nest_name = "iaf_psc_exp"
  defaults = {**_IAF, **_SYN}
  initial = {"V_m": -70.0, "I_syn_ex": 0.0, "I_syn_in": 0.0, "I_stim": 0.0,
             "r": 0}

  def constants(self, p, dt):
    tau_m, c_m = p["tau_m"], p["C_m"]
    p22 = np.exp(-dt / np.asarray(tau_m, np.float64))
    return {**_relative(p, dt), "P22": p22,
            "P11ex": np.exp(-dt / np.asarray(p["tau_syn_ex"], np.float64)),
            "P11in": np.exp(-dt / np.asarray(p["tau_syn_in"], np.float64)),
            "P21ex": exp_propagator(p["tau_syn_ex"], tau_m, c_m, dt),
            "P21in": exp_propagator(p["tau_syn_in"], tau_m, c_m, dt),
            "P20": np.asarray(tau_m) / c_m * (1.0 - p22)}

  def update(self, c, state, inputs, currents):
    dtype = state["V_m"].dtype
    c, inputs = cast_constants(c, dtype), jnp.asarray(inputs, dtype)
    v, r = state["V_m"] - c["E_L"], state["r"]
    i_ex, i_in = state["I_syn_ex"], state["I_syn_in"]
    free = r == 0
    moved = (v * c["P22"] + i_ex * c["P21ex"] + i_in * c["P21in"]
             + (c["I_e"] + state["I_stim"]) * c["P20"])
    v = jnp.where(free, moved, v)
    r = jnp.where(free, r, r - 1)
    i_ex = i_ex * c["P11ex"] + inputs[0]
    i_in = i_in * c["P11in"] + inputs[1]
    v, r, spikes = _fire(c, v, r)
    return {"V_m": v + c["E_L"], "I_syn_ex": i_ex, "I_syn_in": i_in,
            "I_stim": _kept(currents, v), "r": r}, spikes


class IafPscAlpha(_TwoCurrents):
  """NEST's ``iaf_psc_alpha``: alpha-shaped synaptic currents.

  Receptors ``('ex', 'in')``, routed by the weight's sign; a spike of
  weight w (pA) gives a current peaking at w after ``tau_syn``. The state
  holds each current and its derivative under NEST's names
  (``I_syn_ex``, ``dI_syn_ex``, ...). ``tau_syn == tau_m`` takes NEST's
  singular propagators. ``V_min`` bounds ``V_m`` below.

  Example:
    >>> model = IafPscAlpha(tau_syn_ex=10.0)  # == tau_m: singular case
    >>> c = model.constants(model.params, 0.1)
    >>> bool(np.isfinite(c['P31ex']) and c['P31ex'] > 0)
    True
  """

  nest_name = "iaf_psc_alpha"
  defaults = {**_IAF, **_SYN, "V_min": -np.inf}
  initial = {"V_m": -70.0, "I_syn_ex": 0.0, "dI_syn_ex": 0.0,
             "I_syn_in": 0.0, "dI_syn_in": 0.0, "I_stim": 0.0, "r": 0}

  def constants(self, p, dt):
    tau_m, c_m = np.asarray(p["tau_m"], np.float64), p["C_m"]
    out = {**_relative(p, dt), "expm1_tau_m": np.expm1(-dt / tau_m),
           "P30": -tau_m / c_m * np.expm1(-dt / tau_m),
           "V_min": lower_bound(p["V_min"] - np.asarray(p["E_L"]))}
    for syn in ("ex", "in"):
      tau_syn = np.asarray(p[f"tau_syn_{syn}"], np.float64)
      p11 = np.exp(-dt / tau_syn)
      p31, p32 = alpha_propagators(tau_syn, tau_m, c_m, dt)
      out.update({f"P11{syn}": p11, f"P21{syn}": dt * p11,
                  f"P31{syn}": p31, f"P32{syn}": p32,
                  f"PSCInitialValue{syn}": 1.0 * np.e / tau_syn})
    return out

  def update(self, c, state, inputs, currents):
    dtype = state["V_m"].dtype
    c, inputs = cast_constants(c, dtype), jnp.asarray(inputs, dtype)
    v, r = state["V_m"] - c["E_L"], state["r"]
    free = r == 0
    moved = (c["P30"] * (state["I_stim"] + c["I_e"])
             + c["P31ex"] * state["dI_syn_ex"] + c["P32ex"] * state["I_syn_ex"]
             + c["P31in"] * state["dI_syn_in"] + c["P32in"] * state["I_syn_in"]
             + c["expm1_tau_m"] * v + v)
    moved = jnp.where(moved < c["V_min"], c["V_min"], moved)
    v = jnp.where(free, moved, v)
    r = jnp.where(free, r, r - 1)
    out = {}
    for k, syn in enumerate(("ex", "in")):
      i, di = state[f"I_syn_{syn}"], state[f"dI_syn_{syn}"]
      out[f"I_syn_{syn}"] = c[f"P21{syn}"] * di + c[f"P11{syn}"] * i
      out[f"dI_syn_{syn}"] = (di * c[f"P11{syn}"]
                              + c[f"PSCInitialValue{syn}"] * inputs[k])
    v, r, spikes = _fire(c, v, r)
    return {"V_m": v + c["E_L"], **out,
            "I_stim": _kept(currents, v), "r": r}, spikes
