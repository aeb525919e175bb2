"""Plasticity on the rows delivery visits: the synapses of the presynaptic
neurons that fired, updated in place in one shard's CSR.

A shard holds the synapses onto its neurons, a CSR over global
presynaptic ids (:class:`~brainshard._models.delivery.index.SynapseIndex`). When the
neurons ``ids`` fire (stamp ``t``), delivery visits their rows as a batch
of slots (``[k, max_degree]``, or their synapses one after the other in
``lanes``); these functions update those synapses with a rule, write the
new per-synapse values back at their slots, and return the amplitude
each delivers in the same lanes (0 in unused ones), for
the ring buffer at ``(receptor, t - 1 + delay, post)`` as delivery adds
``index.weight``. The rules' per-presynaptic state (``Kplus``, ``t_last``;
``u``, ``x``) is kept per presynaptic neuron, ``[n_pre]`` on every shard:
every shard computes the same values for the same spikes.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> from brainshard._models.plasticity.rows import row_slots
  >>> idx = index_from_arrays([0, 1, 0], [1, 0, 0], [1., 2., 3.], [1, 1, 2],
  ...                         n=2)
  >>> pos, ok, *_ = row_slots(idx, jnp.array([0, 2]))  # neuron 0, none
  >>> pos.tolist(), ok.tolist()
  ([[0, 1], [2, 2]], [[True, True], [False, False]])
  >>> pos, ok, row, ids, _ = row_slots(idx, jnp.array([0, 1]), lanes=4)
  >>> pos.tolist(), ok.tolist(), row.tolist(), ids.tolist()  # flat
  ([0, 1, 2, 2], [True, True, True, False], [0, 0, 1, 1], [0, 1])
  >>> row_slots(idx, jnp.array([0, 1]), lanes=2).ids.tolist()  # 1 next time
  [0, 2]
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from brainshard._models.delivery.index import SynapseIndex
from brainshard._models.delivery.push import row_lanes
from brainshard._models.plasticity.history import PostHistory
from brainshard._models.plasticity.pair_rule import (
    PairRule, pair_update, pre_trace)
from brainshard._models.plasticity.tsodyks2 import (
    Tsodyks2Synapse, tsodyks2_update)

__all__ = ["Slots", "row_slots", "PairRows", "pair_rows", "Tsodyks2Rows",
           "tsodyks2_rows"]


# a ``seen`` past any post spike count: an unused lane's empty window
_PAST = 2 ** 30


class Slots(NamedTuple):
  """Where :func:`row_slots` put the rows: ``pos`` (int32 slots, clipped
  into the index), ``ok`` (the lanes that hold a synapse), ``row`` (each
  lane's place in ``ids``), ``ids``: the ones whose rows the lanes hold
  (the others ``n_pre``) and ``fit``: how many of the given ids that is
  (int32, ``n_pre`` ones counted: they fit anywhere)."""

  pos: jax.Array
  ok: jax.Array
  row: jax.Array
  ids: jax.Array
  fit: jax.Array


def row_slots(index: SynapseIndex, ids: jax.Array,
              lanes: int | None = None) -> Slots:
  """The rows of ``ids`` (global presynaptic ids, increasing; ``n_pre`` =
  none) in this shard's block. Without ``lanes``, ``[k, D]``: the rows
  padded to ``max_degree`` (delivery's :func:`~brainshard._models.
  delivery.push.row_lanes`); with ``lanes``, ``[lanes]``: the rows'
  synapses one after the other, no lane spent on padding, as many whole
  rows as fit (the first always does when ``lanes >= max_degree``)."""
  ids = jnp.asarray(ids, jnp.int32)
  k = ids.shape[0]
  if lanes is None:
    pos, ok = row_lanes(index.indptr, ids, index.max_degree,
                        index.post.shape[0])
    return Slots(pos, ok, jnp.arange(k)[:, None], ids, jnp.int32(k))
  n_pre = index.n_pre
  start = index.indptr[jnp.minimum(ids, n_pre)]
  deg = index.indptr[jnp.minimum(ids + 1, n_pre)] - start
  end = jnp.cumsum(deg)
  fits = end <= lanes  # a prefix: the ends grow
  fit = jnp.sum(fits, dtype=jnp.int32)
  ids = jnp.where(fits, ids, n_pre)
  end = jnp.where(fits, end, lanes)  # the rows that do not fit: no lanes
  lane = jnp.arange(lanes, dtype=jnp.int32)
  # a lane's row: how many rows end at or before it
  row = jnp.cumsum(jnp.zeros(lanes + 1, jnp.int32).at[end].add(1))[:lanes]
  row = jnp.minimum(row, k - 1)
  pos = start[row] + lane - (end[row] - deg[row])
  used = jnp.where(fit > 0, end[jnp.maximum(fit - 1, 0)], 0)
  return Slots(jnp.clip(pos, 0, max(index.post.shape[0] - 1, 0)),
               lane < used, row, ids, fit)


def _put(array: jax.Array, pos, ok, values) -> jax.Array:
  """``array`` with ``values`` at slots ``pos`` where ``ok`` (each slot
  once: no order matters)."""
  return array.at[jnp.where(ok, pos, array.shape[0])].set(
      values.astype(array.dtype), mode="drop")


class PairRows(NamedTuple):
  """After :func:`pair_rows`: the weights ``[capacity]``, ``kplus`` and
  ``t_last`` ``[n_pre]``, the delivered weights (:func:`row_slots`' lanes),
  ``inexact``, the count of synapse updates that may have missed a post
  spike (the post neurons' history was too short), ``seen``
  ``[capacity]`` (None when not given) and ``missed``: the lanes of those
  updates (summed once a block by a network, not once a pass)."""

  weight: jax.Array
  kplus: jax.Array
  t_last: jax.Array
  delivered: jax.Array
  inexact: jax.Array
  seen: jax.Array | None = None
  missed: jax.Array | None = None


def pair_rows(rule: PairRule, ids, t, index: SynapseIndex, weight, kplus,
              t_last, hist: PostHistory, tau_minus, dt: float,
              lanes: int | None = None, seen=None,
              slots: Slots | None = None) -> PairRows:
  """The synapses of the neurons ``ids`` (fired, stamp ``t`` steps)
  updated by ``rule`` (:func:`~brainshard._models.plasticity.pair_rule.
  pair_update`), in this shard's block: ``weight [capacity]`` per slot,
  ``kplus``, ``t_last`` ``[n_pre]`` per presynaptic neuron, ``hist`` the
  shard's post neurons' history (spikes recorded up to at least ``t - 1``),
  ``tau_minus`` a number or ``[n_local]``; ``lanes``: as
  :func:`row_slots` (the delivered values ``[lanes]``); ``seen``: int32
  ``[capacity]``, each synapse's post spikes passed so far (zeros at the
  start), when kept: an update then reads only the post spikes since its
  synapse's last one; ``slots``: :func:`row_slots`' answer, when the caller
  has it (the rows of ``slots.ids`` are updated)."""
  if slots is None:
    slots = row_slots(index, ids, lanes)
  pos, ok, row, ids, _ = slots
  n_pre = kplus.shape[0]
  mine = jnp.minimum(ids, n_pre - 1)
  post = index.post[pos].astype(jnp.int32)
  if jnp.ndim(tau_minus):
    tau_minus = jnp.asarray(tau_minus)[jnp.minimum(post, index.n_local - 1)]
  k_pre, t_pre = kplus[mine][row], t_last[mine][row]
  out = pair_update(rule, weight[pos], k_pre, t_pre, t, index.delay[pos],
                    post, hist, tau_minus, dt,
                    # unused lanes: no window (no turn of the loop for them)
                    None if seen is None else jnp.where(ok, seen[pos], _PAST))
  new_k = pre_trace(kplus[mine], t_last[mine], t, rule.tau_plus, dt)
  stamp = jnp.full(ids.shape, t, jnp.int32)
  missed = ok & ~out.exact
  return PairRows(
      _put(weight, pos, ok, out.weight),
      kplus.at[ids].set(new_k.astype(kplus.dtype), mode="drop"),
      t_last.at[ids].set(stamp, mode="drop"),
      jnp.where(ok, out.weight, 0),
      jnp.sum(missed, dtype=jnp.int32),
      None if seen is None else _put(seen, pos, ok, out.seen), missed)


class Tsodyks2Rows(NamedTuple):
  """After :func:`tsodyks2_rows`: ``u``, ``x``, ``t_last`` ``[n_pre]`` and
  the delivered amplitudes ``x u weight`` (:func:`row_slots`' lanes)."""

  u: jax.Array
  x: jax.Array
  t_last: jax.Array
  delivered: jax.Array


def tsodyks2_rows(model: Tsodyks2Synapse, ids, t, index: SynapseIndex,
                  weight: Any, u, x, t_last, dt: float,
                  lanes: int | None = None,
                  slots: Slots | None = None) -> Tsodyks2Rows:
  """The synapses of the neurons ``ids`` (fired, stamp ``t``) through
  ``tsodyks2_synapse``: ``u``, ``x``, ``t_last`` ``[n_pre]`` per
  presynaptic neuron (its synapses share the model's parameters),
  ``weight [capacity]`` per slot (unchanged); ``lanes``: as
  :func:`row_slots`; ``slots``: as :func:`pair_rows`."""
  if slots is None:
    slots = row_slots(index, ids, lanes)
  pos, ok, row, ids, _ = slots
  mine = jnp.minimum(ids, u.shape[0] - 1)
  out = tsodyks2_update(model, 1.0, u[mine], x[mine], t_last[mine], t, dt)
  amp = out.amplitude[row] * weight[pos]
  drop = dict(mode="drop")
  return Tsodyks2Rows(u.at[ids].set(out.u, **drop),
                      x.at[ids].set(out.x, **drop),
                      t_last.at[ids].set(out.t_last, **drop),
                      jnp.where(ok, amp, 0))
