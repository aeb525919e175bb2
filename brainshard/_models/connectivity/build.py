"""The two passes of the counting sort that builds one shard's index.

Pass 1 (``count_pass``) draws only presynaptic ids and targets, counts the
shard's synapses per presynaptic id and returns ``indptr`` (their cumsum).
Pass 2 (``fill_pass``) regenerates the same draws chunk by chunk, with
weights and delays, and writes each synapse in place at ``cursor[pre] +
rank`` (``cursor``: the next free slot of ``pre``, ``indptr[pre]`` plus its
synapses already written; ``rank``: its place among the chunk's synapses
of the same ``pre``, from a sort of the chunk only). Projections that
differ only in numbers (ranges, counts, parameters' numbers) share one
compiled loop (a :class:`Group`, its projections' :class:`Row` s as data);
chunks go in group order, then projection order, then unit order, so the
synapses of one ``pre`` keep a device-independent order. No sort over all
synapses: the index is the only array of its size.

Both run per shard inside ``bs.shard_map``; ``lo``/``hi`` (the shard's
global ids) come from ``lax.axis_index`` and only select targets, never
seed a draw. Where every projection knows each shard's number of synapses
before drawing (:func:`exact_counts`: a fixed in-degree, a total number
into one shard, ...), the fill's capacity is known ahead and the two
passes run as one program (:func:`both_passes`): the same code, one
compile instead of two.

Example: see :func:`brainshard._models.connectivity.connect.connect`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from brainshard._models.delays import to_steps
from brainshard._models.connectivity.parameters import (
    Parameter, sample_encoded)
from brainshard._models.connectivity.rules import Plan, Units

__all__ = ["Spec", "Row", "Group", "groups", "count_pass", "fill_pass",
           "both_passes", "exact_counts"]


@dataclass(frozen=True)
class Spec:
  """One projection as the passes see it (all static)."""

  plan: Plan
  weight: Parameter
  delay: Parameter   # ms, its redraw bound raised to half a step
  receptor: int     # -1: by the weight's sign (0 if >= 0, else 1)
  arrays: int = -1   # first index of its explicit arrays in the args, or -1
  index: int = 0     # its place in the user's list: keys its draws


class Row(NamedTuple):
  """One projection's numbers in its group's compiled loop (Python
  numbers in a :class:`Group`; traced scalars inside the loop)."""

  position: int      # its place among the passes' projections
  pre_start: int
  pre_stop: int
  post_start: int
  post_stop: int
  number: int        # the rule's k or n
  receptor: int      # -1: by the weight's sign
  index: int         # its place in the user's list (keys its draws)
  p: float           # the rule's probability
  weight: tuple      # the weight parameter's four numbers
  delay: tuple       # the delay parameter's four numbers


_FLOATS = ("p", "weight", "delay")


@dataclass(frozen=True)
class Group:
  """Projections that share one compiled loop: the same plan key and the
  same weight and delay families."""

  plan: Plan
  weight_family: str
  delay_family: str
  rows: tuple[Row, ...]
  arrays: int = -1

  @property
  def pre_range(self) -> int:
    """The most presynaptic ids any member draws from (static)."""
    return max(max(r.pre_stop - r.pre_start for r in self.rows), 1)

  def columns(self) -> Row:
    """The rows as arrays, one per field (int32, float32)."""
    cols = zip(*self.rows)
    return Row(*(jnp.asarray(c, jnp.float32 if name in _FLOATS else
                             jnp.int32) for name, c in zip(Row._fields, cols)))


def groups(specs: Sequence[Spec]) -> list[Group]:
  """``specs`` grouped (in order of first appearance); a FixedTotalNumber
  group's tree is as deep as its largest member needs."""
  out: dict = {}
  for position, spec in enumerate(specs):
    plan = spec.plan
    key = (plan.share_key, spec.weight.family, spec.delay.family)
    row = Row(position, *plan.pre, *plan.post, int(plan.number),
              spec.receptor, spec.index, float(plan.p),
              spec.weight.numbers(), spec.delay.numbers())
    g = out.get(key) or Group(plan, spec.weight.family, spec.delay.family,
                              (), spec.arrays)
    # the group's first plan, its tree as deep as its largest member needs
    out[key] = dataclasses.replace(
        g, rows=g.rows + (row,), plan=dataclasses.replace(
            g.plan, n_blocks=max(g.plan.n_blocks, plan.n_blocks)))
  return list(out.values())


class Member(NamedTuple):
  """One projection inside its group's loop: its plan with the row's
  numbers bound, its key, the rule's per-projection data, its number of
  chunks on this shard and its row."""

  plan: Plan
  key: Any
  aux: Any
  n_chunks: Any
  row: Row


def _varying(x, axis):
  # Loop carries start invariant; the bodies make them vary over the axis.
  return jax.lax.pcast(x, (axis,), to="varying")


def _shard(axis: str, n_local: int):
  lo = jax.lax.axis_index(axis).astype(jnp.int32) * n_local
  return lo, lo + n_local


def _members(group: Group, args: Sequence, seed_key, lo, hi, carry, body):
  """Runs ``body(member, carry) -> carry`` for each projection of
  ``group`` in order (one compiled loop over its rows)."""
  columns = group.columns()
  arrays = None
  if group.arrays >= 0:
    arrays = tuple(args[group.arrays:group.arrays + 4])

  def one(m, carry):
    row = jax.tree.map(lambda c: c[m], columns)
    plan = group.plan.bind((row.pre_start, row.pre_stop),
                           (row.post_start, row.post_stop), row.number, row.p)
    rule = plan.rule
    key = jax.random.fold_in(seed_key, row.index)
    aux = rule.prepare(plan, key, arrays)
    g = plan.units_per_chunk
    n_chunks = (rule.n_units(plan, aux, lo, hi) + g - 1) // g
    return body(Member(plan, key, aux, n_chunks, row), carry)
  return jax.lax.fori_loop(0, len(group.rows), one, carry)


def _local(m: Member, i, lo, hi, n_pre) -> Units:
  """The chunk's draws; ``pre`` is ``n_pre`` (dropped) where the slot is
  unused or its target lives on another shard; ``post`` is local."""
  u = m.plan.rule.units(m.plan, i, m.aux, m.key, lo, hi)
  ok = u.ok & (u.post >= lo) & (u.post < hi)
  return Units(u.keys, jnp.where(ok, u.pre, n_pre), u.post - lo, ok)


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
          pre = _local(m, i, lo, hi, n_pre).pre
          return counts.at[pre.ravel()].add(1, mode="drop")
        return jax.lax.fori_loop(0, m.n_chunks, chunk, counts)
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


# Up to this many synapses in a shard, the fill ranks with lax.cummax: its
# program compiles ~0.5 s faster on a CPU and runs ~1.5x slower, which a
# small network's one fill never makes up.
SMALL_INDEX = 1 << 20


def _rank(pre, first, n_range, small=False):
  """Sorts the chunk by ``pre`` (stable) and gives each entry's place among
  the equal ones before it: ``(order, sorted pre, rank)``. Kept entries
  have ``pre`` in ``[first, first + n_range)`` (``n_range`` static); the
  others (``pre = n_pre``) sort last. ``small``: an index of at most
  ``SMALL_INDEX`` synapses (the same ranks, a quicker compile)."""
  rel = jnp.where((pre >= first) & (pre < first + n_range), pre - first,
                  n_range)
  order = _sort_order(rel, int(n_range).bit_length())
  sp = pre[order]
  idx = jnp.arange(sp.shape[0], dtype=jnp.int32)
  head = jnp.concatenate([jnp.ones(1, bool), sp[1:] != sp[:-1]])
  starts = jnp.where(head, idx, 0)
  if small:
    return order, sp, idx - jax.lax.cummax(starts)
  # lax.cummax lowers to a reduce-window on XLA:CPU: ~2.7x slower here
  # than the log-depth scan of elementwise maxima (whose ~16 levels cost
  # the compile its ~0.5 s).
  run_start = jax.lax.associative_scan(jnp.maximum, starts)
  return order, sp, idx - run_start


def _values(group: Group, m: Member, i, keys, per_ms):
  """Weights (float32) and delays (steps, int32) of a chunk, ``[G, W]``."""
  w, d = m.plan.rule.given(m.plan, i, m.aux)
  if w is None:
    w = sample_encoded(group.weight_family, m.row.weight, keys, m.plan.width,
                       stream=2)
  if d is None:
    ms = sample_encoded(group.delay_family, m.row.delay, keys, m.plan.width,
                        stream=3)
    d = to_steps(ms, per_ms).astype(jnp.int32)
  return w, d


class Filling(NamedTuple):
  """Pass 2's carry: the index fields being filled, each projection's
  shortest and longest delay, and each presynaptic id's next free slot."""

  post: jax.Array
  weight: jax.Array
  delay: jax.Array
  receptor: jax.Array | None
  dmin: jax.Array
  dmax: jax.Array
  cursor: jax.Array


def _write(out: Filling, m: Member, i, lo, hi, n_pre, capacity, group,
           per_ms) -> Filling:
  """Writes one chunk in place; values are cast to the fields' dtypes
  (``receptor`` None: one receptor, nothing to write). A delay too large
  for its field wraps, but ``dmax`` holds the true value (the caller
  checks it)."""
  u = _local(m, i, lo, hi, n_pre)
  w, d = _values(group, m, i, u.keys, per_ms)
  order, sp, rank = _rank(u.pre.ravel(), m.row.pre_start, group.pre_range,
                          capacity <= SMALL_INDEX)
  j = jnp.minimum(sp, n_pre - 1)
  pos = jnp.where(sp < n_pre, out.cursor[j] + rank, capacity)
  put = lambda a, v: a.at[pos].set(v.ravel()[order].astype(a.dtype),  # noqa: E731
                                   mode="drop")
  p = m.row.position
  big = jnp.iinfo(jnp.int32).max
  rec = out.receptor
  if rec is not None:
    # receptor -1: NEST's routing by the weight's sign (0 excitatory, 1
    # inhibitory), per synapse
    r = jnp.where(m.row.receptor < 0, (w < 0).astype(jnp.int32),
                  m.row.receptor)
    rec = put(rec, jnp.broadcast_to(r, w.shape))
  return Filling(put(out.post, u.post), put(out.weight, w),
                 put(out.delay, d), rec,
                 out.dmin.at[p].min(jnp.where(u.ok, d, big).min()),
                 out.dmax.at[p].max(jnp.where(u.ok, d, -1).max()),
                 out.cursor.at[u.pre.ravel()].add(1, mode="drop"))


def fill_pass(specs: Sequence[Spec], *, seed: int, axis: str, n_local: int,
              n_pre: int, capacity: int, dt: float, dtypes: dict):
  """The per-shard function of pass 2: ``(indptr, *explicit arrays) ->
  (post, weight, delay, receptor [capacity], dmin, dmax [n_projections])``
  (``dmin``/``dmax``: the projection's shortest and longest delay on this
  shard, in steps; ``int32 max`` / -1 where it has none). ``dtypes``: the
  dtypes of ``post``, ``delay`` and ``receptor`` (``index.field_dtypes``;
  receptor None: not written, returned as None) and, optionally,
  ``weight`` (default float32)."""
  n_proj = len(specs)

  def run(indptr, *args):
    lo, hi = _shard(axis, n_local)
    seed_key = jax.random.key(seed)
    per_ms = jnp.float32(1.0 / dt)
    rec = dtypes["receptor"]
    out = _varying((jnp.full(capacity, n_local, dtypes["post"]),
                    jnp.zeros(capacity, dtypes.get("weight", jnp.float32)),
                    jnp.zeros(capacity, dtypes["delay"]),
                    None if rec is None else jnp.zeros(capacity, rec),
                    jnp.full(n_proj, jnp.iinfo(jnp.int32).max, jnp.int32),
                    jnp.full(n_proj, -1, jnp.int32)), axis)
    out = Filling(*out, indptr[:n_pre])
    for group in groups(specs):
      def member(m, out, group=group):
        return jax.lax.fori_loop(0, m.n_chunks, lambda i, out: _write(
            out, m, i, lo, hi, n_pre, capacity, group, per_ms), out)
      out = _members(group, args, seed_key, lo, hi, out, member)
    return tuple(out)[:6]
  return run


def exact_counts(specs: Sequence[Spec], n_local: int, n_shards: int
                 ) -> list[int] | None:
  """Each shard's number of synapses where every projection knows it
  before drawing (``Rule.exact_count``), else None."""
  out = []
  for s in range(n_shards):
    lo, hi, total = s * n_local, (s + 1) * n_local, 0
    for spec in specs:
      n = spec.plan.rule.exact_count(spec.plan, lo, hi)
      if n is None:
        return None
      total += n
    out.append(total)
  return out


def both_passes(specs: Sequence[Spec], *, seed: int, axis: str, n_local: int,
                n_pre: int, capacity: int, dt: float, dtypes: dict):
  """Pass 1 then pass 2 in one per-shard function, for a ``capacity``
  known ahead (:func:`exact_counts`): ``(*explicit arrays) -> (indptr,
  count, max_degree) + pass 2's outputs``."""
  kw = dict(seed=seed, axis=axis, n_local=n_local, n_pre=n_pre)
  count = count_pass(specs, **kw)
  fill = fill_pass(specs, capacity=capacity, dt=dt, dtypes=dtypes, **kw)

  def run(*args):
    indptr, n, degree = count(*args)
    return (indptr, n, degree) + fill(indptr, *args)
  return run
