"""The two passes of the counting sort that builds one shard's index.

Pass 1 (``count_pass``) draws only presynaptic ids and targets, counts the
shard's synapses per presynaptic id and returns ``indptr`` (their cumsum).
Pass 2 (``fill_pass``) regenerates the same draws chunk by chunk, with
weights and delays, and writes each synapse in place at ``indptr[pre] +
fill[pre] + rank`` (``fill``: synapses of ``pre`` already written; ``rank``:
its place among the chunk's synapses of the same ``pre``, from a sort of
the chunk only). Chunks go in projection order, then unit order, so the
synapses of one ``pre`` keep a device-independent order. No sort over all
synapses: the index is the only array of its size.

Both run per shard inside ``bs.shard_map``; ``lo``/``hi`` (the shard's
global ids) come from ``lax.axis_index`` and only select targets, never
seed a draw.

Example: see :func:`brainshard._models.connectivity.connect`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from brainshard._models.distributions import sample

__all__ = ["Spec", "count_pass", "fill_pass"]


@dataclass(frozen=True)
class Spec:
  """One projection as the passes see it (all static)."""

  plan: Any
  weight: Any       # number or distribution
  delay: Any        # ms: number or distribution (redraw bound applied)
  receptor: int
  arrays: int = -1  # first index of its explicit arrays in the args, or -1


def _varying(x, axis):
  # Loop carries start invariant; the bodies make them vary over the axis.
  return jax.lax.pcast(x, (axis,), to="varying")


def _shard(axis: str, n_local: int):
  lo = jax.lax.axis_index(axis).astype(jnp.int32) * n_local
  return lo, lo + n_local


def _setup(spec: Spec, p: int, seed_key, args: Sequence, lo, hi):
  key = jax.random.fold_in(seed_key, p)
  arrays = None
  if spec.arrays >= 0:
    arrays = tuple(args[spec.arrays:spec.arrays + 4])
  aux = spec.plan.prepare(key, arrays)
  plan = spec.plan
  n_chunks = (plan.n_units(aux, lo, hi) + plan.G - 1) // plan.G
  return key, aux, n_chunks


def _local(spec, i, aux, key, lo, hi, n_pre):
  """The chunk's draws; ``pre`` is ``n_pre`` (dropped) where the slot is
  unused or its target lives on another shard."""
  keys, pre, post, ok = spec.plan.units(i, aux, key, lo, hi)
  ok = ok & (post >= lo) & (post < hi)
  return keys, jnp.where(ok, pre, n_pre), post - lo, ok


def count_pass(specs: Sequence[Spec], *, seed: int, axis: str, n_local: int,
               n_pre: int):
  """The per-shard function of pass 1: ``(*explicit arrays) -> (indptr
  [n_pre + 1], count [1], max_degree [1])``."""
  def run(*args):
    lo, hi = _shard(axis, n_local)
    seed_key = jax.random.key(seed)
    counts = _varying(jnp.zeros(n_pre, jnp.int32), axis)
    for p, spec in enumerate(specs):
      key, aux, n_chunks = _setup(spec, p, seed_key, args, lo, hi)

      def body(i, counts, spec=spec, key=key, aux=aux):
        _, pre, _, _ = _local(spec, i, aux, key, lo, hi, n_pre)
        return counts.at[pre.ravel()].add(1, mode="drop")
      counts = jax.lax.fori_loop(0, n_chunks, body, counts)
    indptr = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts)])
    return indptr, indptr[-1:], counts.max(keepdims=True)
  return run


def _rank(pre):
  """Sorts the chunk by ``pre`` (stable) and gives each entry's place among
  the equal ones before it: ``(order, sorted pre, rank)``."""
  order = jnp.argsort(pre, stable=True)
  sp = pre[order]
  idx = jnp.arange(sp.shape[0], dtype=jnp.int32)
  head = jnp.concatenate([jnp.ones(1, bool), sp[1:] != sp[:-1]])
  return order, sp, idx - jax.lax.cummax(jnp.where(head, idx, 0))


def _values(spec, i, aux, keys, dt):
  """Weights (float32) and delays (steps, int32) of a chunk, ``[G, W]``."""
  width = spec.plan.W
  given = spec.plan.values(i, aux) if spec.arrays >= 0 else (None, None)
  w = given[0]
  if w is None:
    w = sample(spec.weight, keys, width, stream=2)
  d = given[1]
  if d is None:
    ms = sample(spec.delay, keys, width, stream=3)
    # NEST's rounding (ld_round): floor(d * (1 / dt) + 0.5), half steps up.
    d = jnp.floor(ms * jnp.float32(1.0 / dt) + 0.5).astype(jnp.int32)
  return w, d


def fill_pass(specs: Sequence[Spec], *, seed: int, axis: str, n_local: int,
              n_pre: int, capacity: int, dt: float):
  """The per-shard function of pass 2: ``(indptr, *explicit arrays) ->
  (post, weight, delay, receptor [capacity], dmin, dmax [n_projections])``
  (``dmin``/``dmax``: the projection's shortest and longest delay on this
  shard, in steps)."""
  big = jnp.iinfo(jnp.int32).max

  def run(indptr, *args):
    lo, hi = _shard(axis, n_local)
    seed_key = jax.random.key(seed)
    out = (jnp.full(capacity, n_local, jnp.int32),
           jnp.zeros(capacity, jnp.float32), jnp.zeros(capacity, jnp.int32),
           jnp.zeros(capacity, jnp.int32), jnp.zeros(n_pre, jnp.int32))
    out = _varying(out, axis)
    dmin, dmax = [], []
    for p, spec in enumerate(specs):
      key, aux, n_chunks = _setup(spec, p, seed_key, args, lo, hi)

      def body(i, carry, spec=spec, key=key, aux=aux):
        (post_a, w_a, d_a, r_a, fill), (lo_d, hi_d) = carry
        keys, pre, post, ok = _local(spec, i, aux, key, lo, hi, n_pre)
        w, d = _values(spec, i, aux, keys, dt)
        order, sp, rank = _rank(pre.ravel())
        valid = sp < n_pre
        j = jnp.minimum(sp, n_pre - 1)
        pos = jnp.where(valid, indptr[j] + fill[j] + rank, capacity)
        put = lambda a, v: a.at[pos].set(v.ravel()[order], mode="drop")
        out = (put(post_a, post), put(w_a, w), put(d_a, d),
               r_a.at[pos].set(spec.receptor, mode="drop"),
               fill.at[pre.ravel()].add(1, mode="drop"))
        lo_d = jnp.minimum(lo_d, jnp.where(ok, d, big).min())
        hi_d = jnp.maximum(hi_d, jnp.where(ok, d, -1).max())
        return out, (lo_d, hi_d)
      init = (out, _varying((jnp.int32(big), jnp.int32(-1)), axis))
      out, (lo_d, hi_d) = jax.lax.fori_loop(0, n_chunks, body, init)
      dmin.append(lo_d)
      dmax.append(hi_d)
    return (*out[:4], jnp.stack(dmin), jnp.stack(dmax))
  return run
