"""NEST's ``stdp_synapse``: its parameters, and its rule as a
:class:`~brainshard._models.plasticity.pair_rule.PairRule`.

NEST's pair-based rule (Guetig et al. 2003) on weights normalised by
``Wmax``, with NEST's names and defaults::

  facilitate: w/Wmax + lambda (1 - w/Wmax)^mu_plus kplus, clipped to <= 1
  depress:    w/Wmax - alpha lambda (w/Wmax)^mu_minus kminus, clipped to >= 0

(the result times ``Wmax``; ``mu = 0`` additive, ``mu = 1`` multiplicative).
The expressions are written as NEST's ``facilitate_``/``depress_``, operation
for operation, so float64 weights follow NEST's to the last few bits.
``tau_minus`` is the postsynaptic neuron's (its history,
``history.py``). Parameters are numbers shared by the synapses updated
together, or arrays broadcasting against them.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.plasticity.stdp import StdpSynapse
  >>> syn = StdpSynapse(Wmax=10.0, mu_plus=0.0, **{'lambda': 0.1})
  >>> syn
  StdpSynapse(lambda=0.1, mu_plus=0.0, Wmax=10.0)
  >>> rule = syn.rule()
  >>> float(rule.facilitate(jnp.float32(5.0), 1.0))  # 5 + 10 * 0.1 * 1
  6.0
  >>> float(rule.facilitate(jnp.float32(9.5), 1.0))  # clipped at Wmax
  10.0
  >>> float(rule.depress(jnp.float32(5.0), 1.0))     # 5 - 5 * 0.1 * 1
  4.5
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from brainshard._models.plasticity.model import SynapseModel
from brainshard._models.plasticity.pair_rule import PairRule

__all__ = ["StdpSynapse", "power"]


def power(x, mu):
  """NEST's ``std::pow(x, mu)``. A whole ``mu`` given as a number (0 and 1,
  the additive and multiplicative rules) multiplies: C's ``pow`` is exact
  there and XLA's ``pow`` not always (``x ** 2.0``), and it costs nothing."""
  if isinstance(mu, (int, float)) and float(mu).is_integer() and (
      0 <= mu <= 4):
    return jax.lax.integer_pow(jnp.asarray(x), int(mu))
  return jnp.power(x, mu)


class StdpSynapse(SynapseModel):
  """NEST's ``stdp_synapse`` (``weight`` is the initial weight)."""

  nest_name = "stdp_synapse"
  defaults = {"weight": 1.0, "tau_plus": 20.0, "lambda": 0.01, "alpha": 1.0,
              "mu_plus": 1.0, "mu_minus": 1.0, "Wmax": 100.0, "Kplus": 0.0}

  def check(self) -> None:
    p = self.numbers()
    if "weight" in p and "Wmax" in p and (p["weight"] >= 0) != (
        p["Wmax"] >= 0):
      raise ValueError("stdp_synapse: weight and Wmax must have the same "
                       "sign (NEST: 'Weight and Wmax must have same sign.').")
    if p.get("Kplus", 0.0) < 0:
      raise ValueError("stdp_synapse: Kplus must be non-negative.")

  def rule(self) -> PairRule:
    """The rule, as NEST's ``facilitate_`` and ``depress_``."""
    p = self.params
    lam, alpha, wmax = p["lambda"], p["alpha"], p["Wmax"]
    mu_plus, mu_minus = p["mu_plus"], p["mu_minus"]

    def facilitate(w, kplus):
      w = jnp.asarray(w)
      norm = (w / wmax) + (lam * power(1.0 - (w / wmax), mu_plus) * kplus)
      return jnp.where(norm < 1.0, norm * wmax, wmax).astype(w.dtype)

    def depress(w, kminus):
      w = jnp.asarray(w)
      norm = (w / wmax) - (alpha * lam * power(w / wmax, mu_minus) * kminus)
      return jnp.where(norm > 0.0, norm * wmax, 0.0).astype(w.dtype)

    return PairRule(facilitate, depress, p["tau_plus"])
