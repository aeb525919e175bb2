"""A postsynaptic neuron's recent spikes and its trace K_minus, as NEST's
``ArchivingNode`` keeps them for STDP synapses, in a bounded ring.

NEST updates an STDP weight lazily, at a presynaptic spike, from the
postsynaptic spikes since the synapse's previous spike: each post neuron
keeps a history of ``(t, K_minus)`` entries, ``K_minus`` being the trace
just after the spike at ``t`` (``K <- K exp(-(t - t_prev) / tau_minus) +
1``). NEST's deque grows as needed; here each neuron keeps its last ``H``
entries in a ring (entry ``m``, the neuron's ``m``-th spike counted from 0,
in slot ``m % H``), so the state has a fixed shape and lives on the
neuron's shard.

A lookup is exact whenever the entries it needs are still in the ring: the
ones later than the synapse's window start ``t_last - d`` (:func:`window`
says whether they are). ``H`` = :data:`DEFAULT_SIZE` = 128 entries: 1 KiB a
neuron in float32 (an int32 time and a float K an entry), a few percent of
the memory of its ~1,000+ incoming synapses, and for Poisson trains the
chance that an update misses an entry is ``(r_post / (r_pre + r_post)) **
H``: 3e-39 at equal rates, 2e-3 for a post neuron 20 times faster than its
input (then raise ``H``; the rules count such updates).

Times are NEST's spike stamps in steps (int32): a spike emitted in the
update from step ``s`` to ``s + 1`` has stamp ``s + 1``, i.e. ``(s + 1) *
dt`` ms. Comparing integers needs none of NEST's ``stdp_eps``.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.plasticity.history import (
  ...     post_history, record, k_minus, window)
  >>> h = post_history(2, size=4)
  >>> h = record(h, jnp.array([True, False]), 10, tau_minus=20.0, dt=0.1)
  >>> h = record(h, jnp.array([True, True]), 30, tau_minus=20.0, dt=0.1)
  >>> h.count.tolist(), h.times[0, :2].tolist()
  ([2, 1], [10, 30])
  >>> round(float(h.kminus[0, 1]), 6)        # 1 * exp(-2 ms / 20 ms) + 1
  1.904837
  >>> k = k_minus(h, jnp.array([0, 0]), jnp.array([30, 31]), 20.0, 0.1)
  >>> [round(float(v), 5) for v in k]       # strictly before t, as NEST
  [0.90484, 1.89534]
  >>> w = window(h, jnp.array([0]), jnp.array([10]), jnp.array([40]))
  >>> w.first.tolist(), w.stop.tolist(), w.exact.tolist()  # (10, 40]: 30
  ([1], [2], [True])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["DEFAULT_SIZE", "TAU_MINUS", "PostHistory", "post_history", "record",
           "entry", "spike_counts", "Window", "window", "k_minus"]

DEFAULT_SIZE = 128
# NEST's default tau_minus (ms): a parameter of every NEST neuron model (an
# ArchivingNode), set on the post neuron, not on the synapse.
TAU_MINUS = 20.0


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PostHistory:
  """The last ``H`` spikes of ``n`` neurons (a pytree of arrays).

  Attributes:
    times: int32 ``[n, H]``: spike stamps (steps); slot ``m % H`` holds
      spike ``m``.
    kminus: float ``[n, H]``: NEST's ``K_minus`` just after each spike.
    count: int32 ``[n]``: spikes so far (entries ``count - H .. count - 1``
      are held).
    last_time, last_kminus: ``[n]``: the newest entry again, which
      :func:`record` reads: reading it from the ring it writes would make
      XLA:CPU copy the whole ring every step.
  """

  times: jax.Array
  kminus: jax.Array
  count: jax.Array
  last_time: jax.Array
  last_kminus: jax.Array

  @property
  def size(self) -> int:
    """``H``, the entries held per neuron."""
    return self.times.shape[-1]


def post_history(n: int, size: int = DEFAULT_SIZE,
                 dtype: Any = jnp.float32) -> PostHistory:
  """An empty history of ``n`` neurons, ``size`` entries each, ``K_minus``
  in ``dtype`` (float64 for NEST's numbers to 1e-9)."""
  if size < 1:
    raise ValueError(f"post_history: size = {size} must be >= 1.")
  return PostHistory(jnp.zeros((n, size), jnp.int32),
                     jnp.zeros((n, size), dtype), jnp.zeros((n,), jnp.int32),
                     jnp.zeros((n,), jnp.int32), jnp.zeros((n,), dtype))


@jax.jit  # one program when called eagerly, inlined under a trace
def record(hist: PostHistory, spikes: jax.Array, stamp, tau_minus,
           dt: float) -> PostHistory:
  """Appends a spike stamped ``stamp`` (steps) for each neuron with
  ``spikes [n]`` set, as NEST's ``ArchivingNode::set_spiketime``: ``K <-
  K exp((t_prev - t) / tau_minus) + 1`` (``tau_minus`` ms, a number or one
  per neuron). Call it after the neurons' update emitted ``spikes``."""
  h, c = hist.size, hist.count
  n = c.shape[0]
  t_prev, k_prev = hist.last_time, hist.last_kminus
  stamp = jnp.asarray(stamp, jnp.int32)
  # NEST multiplies by 1 / tau_minus (tau_minus_inv_), as here; K starts
  # at 0, so the first spike gives exactly 1.
  gap = (t_prev - stamp).astype(k_prev.dtype) * dt
  k_new = (jnp.where(c > 0, k_prev * jnp.exp(gap * (1.0 / tau_minus)), 0)
           + 1).astype(k_prev.dtype)
  # only the neurons that fired write their slot (the others' dropped)
  at = jnp.where(spikes, jnp.arange(n, dtype=jnp.int32) * h + c % h, n * h)
  put = lambda ring, v: ring.reshape(-1).at[at].set(  # noqa: E731
      v, mode="drop").reshape(ring.shape)
  stamps = jnp.broadcast_to(stamp, (n,))
  return PostHistory(put(hist.times, stamps), put(hist.kminus, k_new),
                     c + spikes.astype(jnp.int32),
                     jnp.where(spikes, stamps, t_prev),
                     jnp.where(spikes, k_new, k_prev))


def _flat(hist: PostHistory, post: jax.Array, m: jax.Array) -> jax.Array:
  """Flat positions of entries ``m`` of neurons ``post`` (clipped: a lane
  with ``post`` out of range, an unused slot, reads some entry)."""
  n, h = hist.times.shape
  return jnp.clip(post.astype(jnp.int32), 0, n - 1) * h + m % h


def entry(hist: PostHistory, post: jax.Array, m: jax.Array):
  """``(time, K_minus)`` of entry ``m`` (spike number) of neurons ``post``;
  meaningful while ``count - H <= m < count``."""
  at = _flat(hist, post, m)
  return hist.times.reshape(-1)[at], hist.kminus.reshape(-1)[at]


class Window(NamedTuple):
  """Where a synapse's window ``(start, end]`` lies in its post neuron's
  spikes: ``first`` and ``stop`` (spike numbers: the window is ``first ..
  stop - 1``) and ``exact``: the ring reached back past ``start`` (or never
  dropped a spike), so no spike the update needs was overwritten."""

  first: jax.Array
  stop: jax.Array
  exact: jax.Array


def spike_counts(hist: PostHistory, post: jax.Array) -> jax.Array:
  """How many spikes each of the neurons ``post`` has fired so far (the
  number its next spike gets; ``post`` clipped to the neurons held)."""
  return hist.count[jnp.clip(post.astype(jnp.int32), 0,
                             hist.count.shape[0] - 1)]


@jax.jit
def window(hist: PostHistory, post: jax.Array, start: jax.Array,
           end: jax.Array) -> Window:
  """The spikes of neurons ``post`` stamped in ``(start, end]``, found by
  walking back from each neuron's newest spike to its first one at or
  before ``start``. The walk takes as many steps as the most spikes any
  lane has after ``start``, plus one: the facilitation loop's length, plus
  the spikes since ``end`` (a delay's worth) and one; 1 when no post neuron
  fired since (the usual case at cortical rates), at most ``H``."""
  start = jnp.asarray(start).astype(jnp.int32)
  end = jnp.asarray(end).astype(jnp.int32)
  c = spike_counts(hist, post)
  held = jnp.minimum(c, hist.size)
  # zeros computed from the inputs: inside a shard_map the loop's carry
  # then varies over the mesh as they do
  zero = (c + start + end) * 0
  times = hist.times.reshape(-1)

  def back(carry):
    j, n_start, n_end, going = carry
    t_m = times[_flat(hist, post, c - 1 - j)]
    going = going & (j < held)
    later = going & (t_m > start)
    return (j + 1, n_start + later, n_end + (going & (t_m > end)), later)

  carry = (jnp.int32(0), zero, zero, held + zero > 0)
  _, n_start, n_end, _ = jax.lax.while_loop(
      lambda carry: jnp.any(carry[3]), back, carry)
  return Window(c - n_start, c - n_end, (c <= hist.size) | (n_start < held))


@jax.jit
def k_minus(hist: PostHistory, post: jax.Array, t: jax.Array, tau_minus,
            dt: float, after: jax.Array | None = None) -> jax.Array:
  """NEST's ``get_K_value(t)``: ``K_minus`` of neurons ``post`` at stamp
  ``t``, from their latest spike strictly before ``t`` (a spike at ``t``
  itself does not count); 0 before the first spike. ``after``: the number
  of the first spike later than ``t``, when the caller has it (a
  :func:`window`'s ``stop``)."""
  t = jnp.asarray(t).astype(jnp.int32)
  after = window(hist, post, t, t).stop if after is None else after
  m = after - 1
  t_m, _ = entry(hist, post, m)
  m = jnp.where((m >= 0) & (t_m >= t), m - 1, m)  # at t: the one before
  t_m, k_m = entry(hist, post, m)
  gap = (t_m - t).astype(k_m.dtype) * dt
  return jnp.where(m >= 0, k_m * jnp.exp(gap * (1.0 / tau_minus)), 0)
