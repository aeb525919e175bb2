"""A pair-based STDP rule as NEST applies it: lazily, at each presynaptic
spike, from the postsynaptic spikes since the previous one.

:class:`PairRule` holds a rule's two user functions over the weight and a
trace, ``facilitate(w, kplus)`` (a post spike after pre spikes) and
``depress(w, kminus)`` (a pre spike after post spikes), and the pre trace's
``tau_plus``; NEST's ``stdp_synapse`` is one such rule (``stdp.py``).
:func:`pair_update` is ``stdp_synapse::send`` for a batch of synapses
whose presynaptic neurons spiked at stamp ``t`` (steps), each with its
delay ``d`` (steps; NEST takes the whole delay as dendritic):

1. for each post spike in ``(t_last - d, t - d]``, oldest first: ``w <-
   facilitate(w, Kplus exp((t_last - (t_post + d)) / tau_plus))``;
2. ``w <- depress(w, K_minus(t - d))`` (the post trace just before ``t -
   d``, from the post neuron's history);
3. ``Kplus <- Kplus exp((t_last - t) / tau_plus) + 1``, ``t_last <- t``.

The weight this spike delivers is the new ``w``. Every step is elementwise
over the synapses (the window's length varies: the loop runs as many
times as the longest window in the batch), so sharding the synapses never
changes a bit. ``Kplus`` and ``t_last`` only depend on the presynaptic
spike train: pass them per synapse (NEST) or per presynaptic neuron
broadcast over its synapses, when its synapses share ``tau_plus``.

Example (an additive rule of one's own, weights bounded in [0, 1]):
  >>> import jax.numpy as jnp
  >>> from brainshard._models.plasticity.history import post_history, record
  >>> from brainshard._models.plasticity.pair_rule import (
  ...     PairRule, pair_update)
  >>> rule = PairRule(facilitate=lambda w, k: jnp.minimum(w + 0.1 * k, 1.0),
  ...                 depress=lambda w, k: jnp.maximum(w - 0.05 * k, 0.0),
  ...                 tau_plus=20.0)
  >>> h = record(post_history(1, size=8), jnp.array([True]), 25, 20.0, 0.1)
  >>> w, kplus, t_last = jnp.array([0.5]), jnp.array([1.0]), jnp.array([10])
  >>> out = pair_update(rule, w, kplus, t_last, 40, jnp.array([5]),
  ...                   jnp.array([0]), h, 20.0, 0.1)  # stamp 40, delay 5
  >>> # the post spike at 25 (+ 5) after the pre spike at 10: w += 0.1 *
  >>> # exp(-2 ms / 20 ms); then, 1 ms before 40 - 5: w -= 0.05 exp(-1 / 20)
  >>> [round(float(v), 6) for v in (out.weight[0], out.kplus[0])]
  [0.542922, 1.860708]
  >>> bool(out.exact[0]), int(out.t_last[0])
  (True, 40)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from brainshard._models.plasticity.history import (
    PostHistory, entry, k_minus, spike_counts, window)

__all__ = ["PairRule", "PairUpdate", "pair_update", "pre_trace"]


@dataclass(frozen=True, eq=False)  # hashed by identity: a static argument
class PairRule:
  """A pair-based rule: ``facilitate(w, kplus) -> w`` at each post spike
  (``kplus``: the pre trace at that spike), ``depress(w, kminus) -> w`` at
  each pre spike (``kminus``: the post trace), both elementwise and
  jnp-traceable; ``tau_plus`` (ms) is the pre trace's time constant (the
  post trace's, ``tau_minus``, belongs to the post neuron). Make a rule
  once: called eagerly, :func:`pair_update` compiles once per rule object."""

  facilitate: Callable[[Any, Any], Any]
  depress: Callable[[Any, Any], Any]
  tau_plus: Any = 20.0


class PairUpdate(NamedTuple):
  """What :func:`pair_update` returns, per synapse: the new ``weight``
  (the one the spike delivers), the new ``kplus`` and ``t_last``,
  ``exact``: False where the post neuron's ring no longer held an entry the
  update may have needed (raise the history's size), and ``seen``: the
  post spikes the synapse has now passed (stamped ``<= t - d``), where its
  next update starts (its ``first``)."""

  weight: jax.Array
  kplus: jax.Array
  t_last: jax.Array
  exact: jax.Array
  seen: jax.Array


def pre_trace(kplus, t_last, t, tau_plus, dt: float) -> jax.Array:
  """NEST's ``Kplus`` after a pre spike at ``t`` (steps), the last one at
  ``t_last``: ``Kplus exp((t_last - t) / tau_plus) + 1``."""
  kplus = jnp.asarray(kplus)
  gap = (jnp.asarray(t_last, jnp.int32) - t).astype(kplus.dtype) * dt
  return kplus * jnp.exp(gap / tau_plus) + 1


@functools.partial(jax.jit, static_argnums=0)  # one program when eager
def pair_update(rule: PairRule, weight, kplus, t_last, t, delay, post,
                hist: PostHistory, tau_minus, dt: float,
                first=None) -> PairUpdate:
  """The lazy update of synapses whose presynaptic neuron spiked at stamp
  ``t`` (steps; NEST's ``stdp_synapse::send``, see the module doc).

  Args (arrays broadcast together, one entry per synapse):
    rule: the :class:`PairRule`.
    weight, kplus: floats; ``weight.dtype`` is the arithmetic's dtype.
    t_last: int, the previous pre spike's stamp (NEST starts it at 0).
    t: int, this spike's stamp.
    delay: the synapse's delay in steps (any integer dtype, >= 1).
    post: the target's row in ``hist`` (out of range in unused lanes).
    hist: the post neurons' :class:`PostHistory`, holding their spikes up
      to at least ``t - delay``.
    tau_minus: the post neurons' ``tau_minus`` (ms): a number, or per
      synapse (gathered by ``post``).
    dt: the step (ms).
    first: the synapse's previous ``seen`` (int32, 0 before its first
      update), when the caller keeps it: the window then starts there and
      nothing walks back through the post spikes to ``t_last - d``.
  """
  weight = jnp.asarray(weight)
  kplus = jnp.asarray(kplus, weight.dtype)
  t_last = jnp.asarray(t_last, jnp.int32)
  d = jnp.asarray(delay).astype(jnp.int32)
  end = jnp.asarray(t, jnp.int32) - d  # the window: (t_last - d, end]
  if first is None:
    first, _, exact = window(hist, post, t_last - d, end)
  else:
    first, exact = _from_seen(hist, post, first)

  def grow(j, w, on):
    """Facilitation by the window's ``j``-th post spike where ``on``."""
    t_post, _ = entry(hist, post, first + j)
    # NEST: minus_dt = t_lastspike - (t_post + dendritic_delay) < 0.
    minus_dt = (t_last - (t_post + d)).astype(w.dtype) * dt
    grown = rule.facilitate(w, kplus * jnp.exp(minus_dt / rule.tau_plus))
    return jnp.where(on, grown, w)

  w = jnp.broadcast_to(weight, jnp.broadcast_shapes(
      weight.shape, first.shape, kplus.shape))
  w, stop = _facilitate(hist, post, first, end, w, grow)
  w = rule.depress(w, k_minus(hist, post, end, tau_minus, dt, after=stop))
  return PairUpdate(w.astype(weight.dtype),
                    pre_trace(kplus, t_last, t, rule.tau_plus, dt),
                    jnp.broadcast_to(jnp.asarray(t, jnp.int32), t_last.shape),
                    exact, stop)


def _from_seen(hist: PostHistory, post, seen):
  """The window's ``first`` and ``exact`` from the synapses' ``seen``: the
  ring holds entries ``count - H ..``; an update that needs an older one
  is inexact and starts at the oldest held (as :func:`window` would)."""
  c = spike_counts(hist, post)
  seen = jnp.asarray(seen, jnp.int32)
  return (jnp.maximum(seen, c - hist.size),
          (c <= hist.size) | (c - seen < hist.size))


def _facilitate(hist: PostHistory, post, first, end, w, grow):
  """``w`` through ``grow`` for each post spike from ``first`` on stamped
  at most ``end``, oldest first, and where they stop (spike numbers): the
  loop turns once per spike of the longest window, and once more."""
  c = spike_counts(hist, post)

  def on(j):
    """The lanes whose ``j``-th window spike exists (stamped <= end)."""
    t_m, _ = entry(hist, post, first + j)
    return (first + j < c) & (t_m <= end)

  def turn(carry):
    j, w, stop, now = carry
    return j + 1, grow(j, w, now), stop + now, now & on(j + 1)

  _, w, stop, _ = jax.lax.while_loop(
      lambda carry: jnp.any(carry[3]), turn,
      (jnp.int32(0), w, first, on(0)))
  return w, stop
