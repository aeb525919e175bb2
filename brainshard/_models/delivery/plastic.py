"""Plastic synapses' own delivery: one projection's index, weights and rule
state as sharded States, updated on the rows its fired neurons visit and
pushed into the network's ring buffer.

A plastic projection keeps its synapses apart from the static index (whose
delivery kernel stays as fast as it is): :class:`PlasticSynapses` holds

* ``index``: its own :class:`~brainshard._models.delivery.index.
  SynapseIndex` (targets, delays, receptors; CSR over global presynaptic
  ids, sharded by target), a ``ParamState``;
* ``weight [S * capacity]``: the weights, in the network's dtype, where
  the synapses live (the target's shard), a ``LongTermState``;
* ``pre``: the rule's per-presynaptic-neuron state (``kplus``, ``t_last``
  for a pair rule; ``u``, ``x``, ``t_last`` for ``tsodyks2_synapse``),
  ``[S * n_pre]``: every shard keeps a copy of ``[n_pre]`` and updates it
  with the same arithmetic from the same spikes: identical bits;
* ``seen [S * capacity]`` (pair rules): per synapse, the post spikes
  its updates have passed (int32, where the synapse lives): an update reads
  only the post spikes since the synapse's previous one, never walking
  back through the post neuron's history;
* ``overflow [S]``: updates that may have missed a post spike (the
  archive's bound ``H`` was too small), an int per shard.

Per step ``t`` of a block, after the static delivery of that step
(:meth:`PlasticSynapses.push`): the fired neurons' rows are visited in
increasing global id, as many rows a pass as their synapses fit in
:data:`LANES` (no lane spent on padding rows to ``max_degree``), updated
with the rule against the post neurons' :class:`~brainshard._models.
delivery.archive.Archive` (spikes stamped ``t + 1``), their weights
written back in place, and the *delivered* values (the new STDP weight;
``x u weight``) scatter-added into the ring buffer at ``(receptor, (t +
delay) % L, target)``, row by row: each target sums its inputs in the same
order on any mesh.

Example: see :class:`~brainshard._models.network.network.Network`
(``synapse_model='stdp_synapse'``) and docs/plasticity.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.state.state import (
    LongTermState, ParamState, ShortTermState)
from brainshard._models.delivery.archive import Archive
from brainshard._models.delivery.events import fired_ids
from brainshard._models.delivery.index import SynapseIndex
from brainshard._models.plasticity.pair_rule import PairRule
from brainshard._models.plasticity.rows import (
    Slots, pair_rows, row_slots, tsodyks2_rows)
from brainshard._models.plasticity.tsodyks2 import Tsodyks2Synapse

__all__ = ["PlasticSynapses", "LANES"]

# Synapses visited per pass (the fired rows' synapses, one row after the
# other): the batch the rules update at once; more take several passes.
LANES = 2048


class PlasticSynapses:
  """One plastic projection on ``mesh`` axis ``axis``.

  Args:
    index: its synapses (``bm.connect`` of the one projection), weights in
      the network's dtype.
    rule: a :class:`PairRule` (``stdp_synapse``'s or a user's) or a
      :class:`Tsodyks2Synapse`.
    archive: the post neurons' history (pair rules; None for tsodyks2).
    kplus: a pair rule's initial pre trace (NEST's ``Kplus``).
    name: prefix of the States' names.
  """

  def __init__(self, index: SynapseIndex, rule: Any, mesh: Any, axis: str, *,
               dt: float, archive: Archive | None = None, kplus: float = 0.0,
               name: str = "plastic"):
    if isinstance(rule, PairRule) and archive is None:
      raise ValueError("PlasticSynapses: a pair rule needs the post "
                       "neurons' archive.")
    self.rule, self.archive, self.dt, self.name = rule, archive, dt, name
    self.axis = axis
    self.min_delay, self.max_delay = index.min_delay, index.max_delay
    self.n_receptors = index.n_receptors
    self.empty = index.max_degree == 0
    self.lanes = max(LANES, index.max_degree)  # synapses a pass visits
    s = index.n_shards
    put = lambda x, spec=P(axis): jax.device_put(  # noqa: E731
        x, NamedSharding(mesh, spec))
    dtype = index.weight.dtype
    self.weight = LongTermState(put(index.weight), name=f"{name}.weight",
                                spec=P(axis))
    # the structure only: the weights live in their own State
    self.index = ParamState(
        jax.tree.map(put, dataclasses.replace(
            index, weight=jnp.zeros((s,), dtype))),
        name=f"{name}.index", spec=P(axis))
    n = s * index.n_pre
    if isinstance(rule, Tsodyks2Synapse):
      p = rule.params
      pre = {"u": jnp.full(n, p["u"], dtype), "x": jnp.full(n, p["x"], dtype),
             "t_last": jnp.full(n, -1, jnp.int32)}  # NEST: -1 ms, none yet
    else:
      pre = {"kplus": jnp.full(n, kplus, dtype),
             "t_last": jnp.zeros(n, jnp.int32)}    # NEST starts it at 0
    self.pre = ShortTermState(jax.tree.map(put, pre), name=f"{name}.pre",
                              spec=P(axis))
    self.overflow = ShortTermState(put(jnp.zeros((s,), jnp.int32)),
                                   name=f"{name}.overflow", spec=P(axis))
    self.seen = None if archive is None else ShortTermState(
        put(jnp.zeros(index.post.shape, jnp.int32)), name=f"{name}.seen",
        spec=P(axis))
    self.recorders: list[Any] = []  # weight recorders (see weights.py)

  def states(self) -> list:
    """The States a run writes (weights, rule state, overflow, recorded
    values); the index is rebuilt by the same script."""
    seen = [] if self.seen is None else [self.seen]
    return [self.weight, self.pre, self.overflow] + seen + [
        r.values for r in self.recorders]

  def read(self) -> tuple[dict, dict]:
    """Per shard, before a block: ``(carried, constants)``: the values a
    block updates, and those it only reads."""
    carried = {"weight": self.weight.value, "pre": self.pre.value,
               "overflow": self.overflow.value,
               "records": [r.values.value for r in self.recorders]}
    if self.seen is not None:
      carried["seen"] = self.seen.value
      # the inexact updates per lane, summed into overflow at the end
      carried["missed"] = jnp.zeros(self.lanes, jnp.int32) + (
          self.overflow.value[0] * 0)  # varies over the mesh as it does
    consts = {"index": self.index.value,
              "records": [r.table.value for r in self.recorders]}
    if self.archive is not None:
      consts["history"] = self.archive.history.value
      consts["tau_minus"] = self.archive.tau_minus.value
    return carried, consts

  def write(self, carried: dict) -> None:
    self.weight.value, self.pre.value = carried["weight"], carried["pre"]
    self.overflow.value = carried["overflow"]
    if self.seen is not None:
      self.seen.value = carried["seen"]
      self.overflow.value = carried["overflow"] + jnp.sum(
          carried["missed"], dtype=jnp.int32)
    for rec, v in zip(self.recorders, carried["records"]):
      rec.values.value = v

  def push(self, carried: dict, consts: dict, buf: jax.Array,
           fired: jax.Array, t: Any, k: Any) -> tuple[dict, jax.Array]:
    """Per shard: the synapses of the neurons ``fired [n_pre]`` (step
    ``t``, the block's ``k``-th) updated and delivered into ``buf [R, L,
    n_local]``. Returns the new ``carried`` and ``buf``."""
    index = consts["index"]
    if self.empty:
      return carried, buf
    n_pre = fired.shape[0]
    lanes = self.lanes
    # rows a pass may take: twice as many as rows of the mean degree fill
    # the lanes (the ids' vector is that long, whatever fired)
    capacity = max(index.post.shape[0], 1)
    cap = min(n_pre, max(16, 2 * lanes * n_pre // capacity))
    ids_of = jnp.arange(n_pre, dtype=jnp.int32)

    def one_pass(c):
      carried, buf, start, left = c
      # one size, not first_fired's chain of sizes: on XLA:CPU each
      # lax.cond costs about as much as the larger top_k it saves
      ids = fired_ids(fired & (ids_of >= start), cap)
      slots = row_slots(index, ids, lanes)  # the whole rows that fit
      carried, buf = self._rows(carried, consts, buf, slots, t)
      # ids holds min(left, cap) fired ones, then n_pre: the next pass
      # starts at the first that did not fit (no reduction over the ids)
      nxt = jnp.where(slots.fit < cap, ids[jnp.minimum(slots.fit, cap - 1)],
                      ids[cap - 1] + 1)
      return carried, buf, nxt, left - jnp.minimum(
          slots.fit, jnp.minimum(left, cap))

    left = jnp.sum(fired, dtype=jnp.int32)
    carried, buf, _, _ = jax.lax.while_loop(
        lambda c: c[3] > 0, one_pass, (carried, buf, left * 0, left))
    if self.recorders:
      carried = dict(carried, records=[
          r.sample(v, tbl, carried, fired, k) for r, v, tbl in zip(
              self.recorders, carried["records"], consts["records"])])
    return carried, buf

  def _rows(self, carried, consts, buf, slots, t):
    """One batch of fired rows (``row_slots``' ``slots``: their synapses
    in lanes) through the rule, their delivered values added into
    ``buf``."""
    index, pre, stamp = consts["index"], carried["pre"], t + 1
    if isinstance(self.rule, Tsodyks2Synapse):
      out = tsodyks2_rows(self.rule, slots.ids, stamp, index,
                          carried["weight"], pre["u"], pre["x"],
                          pre["t_last"], self.dt, slots=slots)
      carried = dict(carried, pre={"u": out.u, "x": out.x,
                                   "t_last": out.t_last})
    else:
      out = pair_rows(self.rule, slots.ids, stamp, index, carried["weight"],
                      pre["kplus"], pre["t_last"], consts["history"],
                      consts["tau_minus"], self.dt, seen=carried["seen"],
                      slots=slots)
      carried = dict(carried, weight=out.weight, seen=out.seen,
                     pre={"kplus": out.kplus, "t_last": out.t_last},
                     missed=carried["missed"] + out.missed)
    return carried, _add(buf, index, slots, t, out.delivered)


def _add(buf: jax.Array, index: SynapseIndex, slots: Slots, t,
         values: jax.Array) -> jax.Array:
  """``values`` (in ``slots``' lanes: the rows one after the other) added
  into ``buf`` at receptor, slot ``(t + delay) % L``, target; in lane
  order (global presynaptic order), unused lanes dropped."""
  _, length, n_local = buf.shape
  pos, ok = slots.pos, slots.ok
  i32 = lambda a: a.astype(jnp.int32)  # noqa: E731
  slot = (jnp.asarray(t, jnp.int32) + i32(index.delay[pos])) % length
  rec = 0 if index.receptor is None else i32(index.receptor[pos])
  flat = (rec * length + slot) * n_local + i32(index.post[pos])
  flat = jnp.where(ok, flat, buf.size)
  out = buf.reshape(-1).at[flat.reshape(-1)].add(
      values.reshape(-1).astype(buf.dtype), mode="drop")
  return out.reshape(buf.shape)

