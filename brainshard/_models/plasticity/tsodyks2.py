"""NEST's ``tsodyks2_synapse``: short-term depression and facilitation.

At each presynaptic spike at ``t`` (steps), the previous one at ``t_last``
(``h = (t - t_last) dt`` ms), NEST's ``tsodyks2_synapse::send`` computes::

  x <- 1 + (x - x u - 1) exp(-h / tau_rec)
  u <- U + u (1 - U) exp(-h / tau_fac)     (the decay is 0 for tau_fac = 0)

skipping both at the synapse's first spike (``t_last < 0``; NEST starts it
at -1 ms), and delivers ``x u weight``; ``weight`` never changes. The state
``(u, x, t_last)`` depends only on the presynaptic spike train: keep it per
synapse (NEST) or per presynaptic neuron when its synapses share ``U``,
``tau_rec``, ``tau_fac`` and the initial ``u``, ``x``.

Example (NEST's defaults: U = u = 0.5, x = 1, tau_rec = 800 ms):
  >>> import jax.numpy as jnp
  >>> from brainshard._models.plasticity.tsodyks2 import (
  ...     Tsodyks2Synapse, tsodyks2_update)
  >>> syn = Tsodyks2Synapse()
  >>> u, x, t_last = jnp.float32(0.5), jnp.float32(1.0), jnp.int32(-1)
  >>> out = tsodyks2_update(syn, 2.0, u, x, t_last, 10, 0.1)  # first spike
  >>> float(out.amplitude)                                     # 1 * 0.5 * 2
  1.0
  >>> out = tsodyks2_update(syn, 2.0, out.u, out.x, out.t_last, 110, 0.1)
  >>> round(float(out.x), 6), round(float(out.amplitude), 6)  # 10 ms later
  (0.506211, 0.506211)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from brainshard._models.plasticity.model import SynapseModel

__all__ = ["Tsodyks2Synapse", "Tsodyks2Update", "tsodyks2_update"]


class Tsodyks2Synapse(SynapseModel):
  """NEST's ``tsodyks2_synapse``; ``u`` and ``x`` are the initial state."""

  nest_name = "tsodyks2_synapse"
  defaults = {"weight": 1.0, "U": 0.5, "u": 0.5, "x": 1.0, "tau_rec": 800.0,
              "tau_fac": 0.0}

  def check(self) -> None:
    p = self.numbers()
    for name in ("U", "u"):
      if not 0.0 <= p.get(name, 0.0) <= 1.0:
        raise ValueError(f"tsodyks2_synapse: {name} must be in [0, 1], got "
                         f"{p[name]}.")
    if not p.get("tau_rec", 1.0) > 0.0:
      raise ValueError("tsodyks2_synapse: tau_rec must be > 0.")
    if not p.get("tau_fac", 0.0) >= 0.0:
      raise ValueError("tsodyks2_synapse: tau_fac must be >= 0.")


class Tsodyks2Update(NamedTuple):
  """After a spike: the new ``u``, ``x`` and ``t_last``, and the
  ``amplitude`` it delivers (``x u weight``)."""

  u: jax.Array
  x: jax.Array
  t_last: jax.Array
  amplitude: jax.Array


def tsodyks2_update(model: Tsodyks2Synapse, weight, u, x, t_last, t,
                    dt: float) -> Tsodyks2Update:
  """One presynaptic spike at stamp ``t`` (steps) through synapses with
  state ``u``, ``x`` (floats; ``x.dtype`` is the arithmetic's) and
  ``t_last`` (int steps, negative before the first spike); arrays
  broadcast together, one entry per synapse."""
  p = model.params
  x = jnp.asarray(x)
  u = jnp.asarray(u, x.dtype)
  t_last = jnp.asarray(t_last, jnp.int32)
  h = (jnp.asarray(t, jnp.int32) - t_last).astype(x.dtype) * dt
  x_decay = jnp.exp(-h / p["tau_rec"])
  tau_fac = jnp.asarray(p["tau_fac"], x.dtype)
  no_fac = tau_fac == 0  # NEST: tau_fac = 0 disables facilitation
  u_decay = jnp.where(no_fac, 0.0, jnp.exp(-h / jnp.where(no_fac, 1.0,
                                                          tau_fac)))
  big_u = p["U"]
  later = t_last >= 0
  x = jnp.where(later, 1.0 + (x - x * u - 1.0) * x_decay, x).astype(x.dtype)
  u = jnp.where(later, big_u + u * (1.0 - big_u) * u_decay, u).astype(x.dtype)
  t_now = jnp.broadcast_to(jnp.asarray(t, jnp.int32), t_last.shape)
  return Tsodyks2Update(u, x, t_now, x * u * weight)
