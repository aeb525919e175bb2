"""The two passes of the counting sort that builds one shard's index.

Pass 1 (``count_pass``) draws only presynaptic ids and targets, counts the
shard's synapses per presynaptic id and returns ``indptr`` (their cumsum).
Pass 2 (``fill_pass``) regenerates the same draws chunk by chunk, with
weights and delays, and writes each synapse in place at ``cursor[pre] +
rank`` (``cursor``: the next free slot of ``pre``, ``indptr[pre]`` plus its
synapses already written; ``rank``: its place among the chunk's synapses
of the same ``pre``, from a sort of the chunk only). Projections that
differ only in numbers (ranges, counts, distribution parameters) share one
compiled loop (a :class:`Group`);
chunks go in group order, then projection order, then unit order, so the
synapses of one ``pre`` keep a device-independent order. No sort over all
synapses: the index is the only array of its size.

Both run per shard inside ``bs.shard_map``; ``lo``/``hi`` (the shard's
global ids) come from ``lax.axis_index`` and only select targets, never
seed a draw.

Example: see :func:`brainshard._models.connectivity.connect.connect`.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from brainshard._models.connectivity.parameters import encode, sample_encoded

__all__ = ["Spec", "Group", "groups", "count_pass", "fill_pass"]


@dataclass(frozen=True)
class Spec:
  """One projection as the passes see it (all static)."""

  plan: Any
  weight: Any       # number or distribution
  delay: Any        # ms: number or distribution (redraw bound applied)
  receptor: int
  arrays: int = -1  # first index of its explicit arrays in the args, or -1
  index: int = 0    # its place in the user's list: keys its draws


@dataclass(frozen=True)
class Group:
  """Projections that share one compiled loop: the same plan key and the
  same weight and delay families. Their numbers are rows of ``ints``
  (spec, pre start/stop, post start/stop, rule count, receptor, index) and
  ``floats`` (rule probability, weight and delay parameters)."""

  plan: Any
  families: tuple[str, str]
  ints: tuple
  floats: tuple
  arrays: int = -1

  @property
  def pre_range(self) -> int:
    """The most presynaptic ids any member draws from (static)."""
    return max(max(r[2] - r[1] for r in self.ints), 1)


def groups(specs: Sequence[Spec]) -> list[Group]:
  """``specs`` grouped (in order of first appearance); a TotalPlan group's
  tree is as deep as its largest member needs."""
  out: dict = {}
  for p, spec in enumerate(specs):
    (wf, wp), (df, dp) = encode(spec.weight), encode(spec.delay)
    plan = spec.plan
    key = (plan.key, wf, df)
    row_i = (p, *plan.pre, *plan.post, int(plan.n), spec.receptor,
             spec.index)
    row_f = (float(plan.p), *wp, *dp)
    if key not in out:
      out[key] = [copy.copy(plan), (wf, df), [], [], spec.arrays]
    g = out[key]
    if hasattr(plan, "n_blocks"):
      g[0].n_blocks = max(g[0].n_blocks, plan.n_blocks)
    g[2].append(row_i)
    g[3].append(row_f)
  return [Group(g[0], g[1], tuple(g[2]), tuple(g[3]), g[4])
          for g in out.values()]


def _varying(x, axis):
  # Loop carries start invariant; the bodies make them vary over the axis.
  return jax.lax.pcast(x, (axis,), to="varying")


def _shard(axis: str, n_local: int):
  lo = jax.lax.axis_index(axis).astype(jnp.int32) * n_local
  return lo, lo + n_local


def _members(group: Group, args: Sequence, seed_key, lo, hi, carry, body):
  """Runs ``body(member, carry) -> carry`` for each projection of
  ``group`` in order (one compiled loop); a member has the bound plan, its
  key, aux, number of chunks, float row and projection index."""
  ints = jnp.asarray(group.ints, jnp.int32)
  floats = jnp.asarray(group.floats, jnp.float32)
  arrays = None
  if group.arrays >= 0:
    arrays = tuple(args[group.arrays:group.arrays + 4])

  def one(m, carry):
    r, f = ints[m], floats[m]
    plan = group.plan.bind((r[1], r[2]), (r[3], r[4]), r[5], f[0])
    key = jax.random.fold_in(seed_key, r[7])
    aux = plan.prepare(key, arrays)
    n_chunks = (plan.n_units(aux, lo, hi) + plan.G - 1) // plan.G
    return body(dict(plan=plan, key=key, aux=aux, n_chunks=n_chunks,
                     floats=f, ints=r), carry)
  return jax.lax.fori_loop(0, len(group.ints), one, carry)


def _local(m, i, lo, hi, n_pre):
  """The chunk's draws; ``pre`` is ``n_pre`` (dropped) where the slot is
  unused or its target lives on another shard."""
  keys, pre, post, ok = m["plan"].units(i, m["aux"], m["key"], lo, hi)
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
    for group in groups(specs):
      def member(m, counts):
        def chunk(i, counts):
          _, pre, _, _ = _local(m, i, lo, hi, n_pre)
          return counts.at[pre.ravel()].add(1, mode="drop")
        return jax.lax.fori_loop(0, m["n_chunks"], chunk, counts)
      counts = _members(group, args, seed_key, lo, hi, counts, member)
    indptr = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts)])
    return indptr, indptr[-1:], counts.max(keepdims=True)
  return run


def _sort_order(rel, n_bits):
  """The stable order of ``rel`` (non-negative int32 ``[N]``, below
  ``2**n_bits``): an LSD radix over single-operand uint32 sorts of keys
  ``digit << b | position`` (``b`` bits hold a position). XLA:CPU sorts one
  operand with a plain comparison 6-8x faster than it sorts two (an
  argsort's keys and iota); the keys are distinct, so no sort need be
  stable, and each pass keeps the previous passes' order among equal
  digits. One pass when ``n_bits + b <= 32`` (e.g. a population below 65,536
  neurons in a chunk of 65,536)."""
  n = rel.shape[0]
  b = max(1, (n - 1).bit_length())
  if b >= 32:
    raise ValueError(f"a chunk of {n} synapses is too large to rank")
  digit_bits = 32 - b
  mask = jnp.uint32((1 << b) - 1)
  pos = jnp.arange(n, dtype=jnp.uint32)
  rel = rel.astype(jnp.uint32)
  order = None
  for shift in range(0, max(n_bits, 1), digit_bits):
    digit = (rel >> shift) & jnp.uint32((1 << digit_bits) - 1)
    if order is not None:
      digit = digit[order]
    # The keys are distinct: any sort is stable; XLA:CPU's merge sort
    # (is_stable=True) measured faster than its default one.
    keys = jax.lax.sort(jnp.left_shift(digit, b) | pos, is_stable=True)
    step = (keys & mask).astype(jnp.int32)
    order = step if order is None else order[step]
  return order


def _rank(pre, first, n_range):
  """Sorts the chunk by ``pre`` (stable) and gives each entry's place among
  the equal ones before it: ``(order, sorted pre, rank)``. Kept entries
  have ``pre`` in ``[first, first + n_range)`` (``n_range`` static); the
  others (``pre = n_pre``) sort last."""
  rel = jnp.where((pre >= first) & (pre < first + n_range), pre - first,
                  n_range)
  order = _sort_order(rel, int(n_range).bit_length())
  sp = pre[order]
  idx = jnp.arange(sp.shape[0], dtype=jnp.int32)
  head = jnp.concatenate([jnp.ones(1, bool), sp[1:] != sp[:-1]])
  # lax.cummax lowers to a reduce-window on XLA:CPU: ~2.7x slower here
  # than the log-depth scan of elementwise maxima.
  run_start = jax.lax.associative_scan(jnp.maximum, jnp.where(head, idx, 0))
  return order, sp, idx - run_start


def _values(group, m, i, keys):
  """Weights (float32) and delays (steps, int32) of a chunk, ``[G, W]``."""
  plan, f = m["plan"], m["floats"]
  given = plan.values(i, m["aux"]) if group.arrays >= 0 else (None, None)
  w, d = given
  if w is None:
    w = sample_encoded(group.families[0], f[1:5], keys, plan.W, stream=2)
  if d is None:
    ms = sample_encoded(group.families[1], f[5:9], keys, plan.W, stream=3)
    # NEST's rounding (ld_round): floor(d * (1 / dt) + 0.5), half steps up.
    d = jnp.floor(ms * f[9] + 0.5).astype(jnp.int32)
  return w, d


def _write(out, m, i, lo, hi, n_pre, capacity, group):
  """Writes one chunk in place: ``out`` = (post, weight, delay, receptor,
  dmin, dmax, cursor); values are cast to the fields' dtypes (``receptor``
  None: one receptor, nothing to write). A delay too large for its field
  wraps, but ``dmax`` holds the true value (the caller checks it)."""
  post_a, w_a, d_a, r_a, dmin, dmax, cursor = out
  keys, pre, post, ok = _local(m, i, lo, hi, n_pre)
  w, d = _values(group, m, i, keys)
  order, sp, rank = _rank(pre.ravel(), m["ints"][1], group.pre_range)
  j = jnp.minimum(sp, n_pre - 1)
  pos = jnp.where(sp < n_pre, cursor[j] + rank, capacity)
  put = lambda a, v: a.at[pos].set(v.ravel()[order].astype(a.dtype),
                                   mode="drop")
  p = m["ints"][0]
  big = jnp.iinfo(jnp.int32).max
  if r_a is not None:
    r_a = r_a.at[pos].set(m["ints"][6].astype(r_a.dtype), mode="drop")
  return (put(post_a, post), put(w_a, w), put(d_a, d), r_a,
          dmin.at[p].min(jnp.where(ok, d, big).min()),
          dmax.at[p].max(jnp.where(ok, d, -1).max()),
          cursor.at[pre.ravel()].add(1, mode="drop"))


def fill_pass(specs: Sequence[Spec], *, seed: int, axis: str, n_local: int,
              n_pre: int, capacity: int, dt: float, dtypes: dict):
  """The per-shard function of pass 2: ``(indptr, *explicit arrays) ->
  (post, weight, delay, receptor [capacity], dmin, dmax [n_projections])``
  (``dmin``/``dmax``: the projection's shortest and longest delay on this
  shard, in steps; ``int32 max`` / -1 where it has none). ``dtypes``: the
  dtypes of ``post``, ``delay`` and ``receptor`` (``index.field_dtypes``;
  receptor None: not written, returned as None)."""
  n_proj = len(specs)

  def run(indptr, *args):
    lo, hi = _shard(axis, n_local)
    seed_key = jax.random.key(seed)
    rec = dtypes["receptor"]
    out = (jnp.full(capacity, n_local, dtypes["post"]),
           jnp.zeros(capacity, jnp.float32),
           jnp.zeros(capacity, dtypes["delay"]),
           None if rec is None else jnp.zeros(capacity, rec),
           jnp.full(n_proj, jnp.iinfo(jnp.int32).max, jnp.int32),
           jnp.full(n_proj, -1, jnp.int32))
    out = _varying(out, axis) + (indptr[:n_pre],)
    for group in groups(specs):
      group = dataclasses.replace(group, floats=tuple(
          (*row, 1.0 / dt) for row in group.floats))
      def member(m, out, group=group):
        return jax.lax.fori_loop(0, m["n_chunks"], lambda i, out: _write(
            out, m, i, lo, hi, n_pre, capacity, group), out)
      out = _members(group, args, seed_key, lo, hi, out, member)
    return out[:6]
  return run
