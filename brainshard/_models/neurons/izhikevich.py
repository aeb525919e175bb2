"""NEST's ``izhikevich`` neuron: Izhikevich (2003), forward Euler as NEST.

``dV/dt = 0.04 V^2 + 5 V + 140 - U + I``, ``dU/dt = a (b V - U)``; on
``V_m >= V_th``: ``V_m = c``, ``U_m += d``. NEST's parameters (``a``,
``b``, ``c``, ``d``, ``I_e``, ``V_th``, ``V_min``) and state (``V_m``,
``U_m``), and one step of its ``update``:

* ``consistent_integration=True`` (NEST's default): one forward-Euler step
  of both variables from their old values, plus this step's spike input
  (mV) added to ``V_m``;
* ``False``: the published scheme (two half steps of ``V_m``, the spike
  input entering as a current, then ``U_m`` from the new ``V_m``), meant
  for a 1 ms resolution.

Then ``V_m`` is bounded below by ``V_min``, the threshold is checked, and
this step's current input is kept in ``I_stim`` for the next step. There is
no refractory period.

Example:
  >>> from brainshard._models.neurons.izhikevich import Izhikevich
  >>> _, spikes = Izhikevich(I_e=[0.0, 10.0]).simulate(1000)
  >>> spikes.sum(axis=0).tolist()                  # in 100 ms
  [0, 3]
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from brainshard._models.neurons.base import (
    NeuronModel, cast_constants, lower_bound)
from brainshard._models.neurons.rounding import rounded

__all__ = ["Izhikevich"]


class Izhikevich(NeuronModel):
  """NEST's ``izhikevich``: one receptor (mV, either sign), no refractory
  period, ``consistent_integration`` a flag for the whole model.

  Example:
    >>> Izhikevich(consistent_integration=False).params['consistent_integration']
    False
  """

  nest_name = "izhikevich"
  defaults = {"a": 0.02, "b": 0.2, "c": -65.0, "d": 8.0, "I_e": 0.0,
              "V_th": 30.0, "V_min": -np.finfo(np.float64).max,
              "consistent_integration": True}
  # NEST's initial U_m is b * V_m for its default b, whatever b is set to.
  initial = {"V_m": -65.0, "U_m": -13.0, "I_stim": 0.0}
  receptors = ("ex",)
  recordables = ("U_m", "V_m")

  def constants(self, p, dt):
    return {name: np.asarray(p[name], np.float64)
            for name in ("a", "b", "c", "d", "I_e", "V_th")} | {
                "V_min": lower_bound(p["V_min"]), "h": np.float64(dt)}

  def update(self, c, state, inputs, currents):
    dtype = state["V_m"].dtype
    c, inputs = cast_constants(c, dtype), jnp.asarray(inputs, dtype)
    h, v, u = c["h"], state["V_m"], state["U_m"]
    a, b = c["a"], c["b"]
    if self.params["consistent_integration"]:
      # Each product rounded before it is summed, as NEST computes: an
      # ulp here grows to mV at a spike's peak (see rounding.py).
      slope = (rounded(0.04 * v * v) + rounded(5.0 * v) + 140.0 - u
               + state["I_stim"] + c["I_e"])
      v_new = v + (rounded(h * slope) + inputs[0])
      u = u + rounded(h * a * (rounded(b * v) - u))
      v = v_new
    else:
      for _ in range(2):  # two half steps of V_m, U_m held
        slope = (rounded(0.04 * v * v) + rounded(5.0 * v) + 140.0 - u
                 + state["I_stim"] + c["I_e"] + inputs[0])
        v = v + rounded(h * 0.5 * slope)
      u = u + rounded(h * a * (rounded(b * v) - u))
    v = jnp.where(v < c["V_min"], c["V_min"], v)
    spikes = v >= c["V_th"]
    return {"V_m": jnp.where(spikes, c["c"], v),
            "U_m": jnp.where(spikes, u + c["d"], u),
            # kept for the next step, a scalar 0 broadcast to the state
            "I_stim": jnp.broadcast_to(jnp.asarray(currents, dtype),
                                       v.shape)}, spikes
