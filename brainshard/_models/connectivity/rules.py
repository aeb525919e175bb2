"""Connection rules: each class is what to connect (its fields) and how one
shard generates it (its methods), registered under NEST's name.

The rules are NEST's ``conn_spec`` rules: ``FixedInDegree``
(``fixed_indegree``), ``FixedOutDegree`` (``fixed_outdegree``),
``PairwiseBernoulli`` (``pairwise_bernoulli``), ``FixedTotalNumber``
(``fixed_total_number``), ``AllToAll`` (``all_to_all``), ``OneToOne``
(``one_to_one``) and ``Explicit`` arrays. :meth:`Rule.from_nest` reads a
NEST ``conn_spec`` dict; adding a rule is one class here (plus its test).

How a rule generates: its synapses come in *units* of ``width`` slots, each
unit with a key derived from device-independent coordinates only (the
projection and the unit's id: a target, a source, a block of slots), never
from the shard's index. A shard visits its units ``G`` at a time (one
*chunk*) and gets, per chunk, :class:`Units` (``keys [G]``, ``pre, post
[G, W]`` global ids and a mask ``ok``); the builder keeps the slots whose
target the shard holds. Both passes of the build call the same code, so
they see the same draws. Streams of a unit (``counter.bits``): 0
presynaptic ids, 1 targets, 2 weights, 3 delays.

Example (a shard holding all 4 targets of a population; a chunk has
``G = CHUNK // k`` units, those past the shard's targets masked off):
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._models.connectivity.rules import FixedInDegree, Rule
  >>> rule = Rule.from_nest({'rule': 'fixed_indegree', 'indegree': 3})
  >>> plan = rule.plan((0, 10), (10, 14))
  >>> key = jax.random.key(0)
  >>> u = rule.units(plan, jnp.int32(0), None, key, jnp.int32(10), jnp.int32(14))
  >>> u.pre.shape[1], bool(u.ok[:4].all()), bool(u.ok[4:].any())
  (3, True, False)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Hashable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.connectivity.counter import (
    normal, randint, sub_keys, uniform, unit_keys)

__all__ = ["Rule", "FixedInDegree", "FixedOutDegree", "PairwiseBernoulli",
           "FixedTotalNumber", "AllToAll", "OneToOne", "Explicit", "Plan",
           "Units", "CHUNK"]

CHUNK = 1 << 16  # slots per chunk (G * W): bounds the chunk's temporaries
BLOCK = 256      # FixedTotalNumber: targets per leaf of the split tree
SLOTS = 1024     # FixedTotalNumber / Explicit: slots per unit


class Units(NamedTuple):
  """One chunk of a projection's draws: ``keys`` uint32 ``[G, 2]`` (one per
  unit), ``pre``/``post`` int32 ``[G, W]`` global ids, ``ok`` bool
  ``[G, W]`` (the slot is a synapse)."""

  keys: jax.Array
  pre: jax.Array
  post: jax.Array
  ok: jax.Array


@dataclass(frozen=True)
class Plan:
  """One projection's generation as a compiled loop sees it. ``rule`` and
  the shapes are static; ``pre``/``post`` (global id ranges), ``number``
  and ``p`` may be traced scalars (:meth:`bind`), so projections that
  differ only in them share one loop (:attr:`share_key`)."""

  rule: Rule
  pre: tuple
  post: tuple
  number: Any = 0      # k (degrees) or n (total), per the rule
  p: Any = 0.0         # the pair probability (PairwiseBernoulli)
  width: int = 1       # W: slots per unit
  n_blocks: int = 1    # FixedTotalNumber: leaves of the split tree

  @property
  def units_per_chunk(self) -> int:
    """G: units visited per chunk."""
    return max(1, CHUNK // max(self.width, 1))

  @property
  def share_key(self) -> Hashable:
    """Plans with equal keys share one compiled loop."""
    return self.rule.share_key(self)

  def bind(self, pre, post, number, p) -> Plan:
    return dataclasses.replace(self, pre=pre, post=post, number=number, p=p)


def _size(value: Any, what: str) -> int:
  """A non-negative count (NumPy integers too)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, (int, np.integer)) or value < 0:
    raise ValueError(f"{what} must be a non-negative int, got {value!r}.")
  return int(value)


def _flag(value: Any, what: str) -> bool:
  # 'no' is truthy: a flag that is not a bool would silently mean True.
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{what} must be True or False, got {value!r}.")
  return bool(value)


def _no_multapses(rule: str, multapses: bool) -> None:
  if not multapses:
    raise NotImplementedError(
        f"{rule}(multapses=False) is not supported: drawing without "
        "replacement needs per-target state the counter-based build avoids. "
        "Use PairwiseBernoulli (never repeats a pair) or allow multapses.")


def _excluding(lo, n, keys, width, stream, own, autapses):
  """Uniform draws from ``[lo, lo + n)``; without autapses, skipping each
  unit's own global id ``own`` when it lies in that range."""
  inside = (own >= lo) & (own < lo + n) & (not autapses)
  r = lo + randint(keys, width, stream, n - inside.astype(jnp.int32))
  return jnp.where(inside[:, None] & (r >= own[:, None]), r + 1, r)


class Rule:
  """The base of the connection rules (frozen dataclasses).

  A rule sets ``nest_name`` (its NEST ``conn_spec`` name, the registry's
  key) and ``nest_params`` (NEST's parameter names -> its fields), and
  implements :meth:`units` and :meth:`n_units` (and, if it needs them,
  :meth:`width`, :meth:`prepare`, :meth:`given`, :meth:`check`).
  """

  nest_name: ClassVar[str] = ""
  nest_params: ClassVar[dict[str, str]] = {}
  registry: ClassVar[dict[str, type[Rule]]] = {}
  autapses: bool = True

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    if cls.nest_name:
      Rule.registry[cls.nest_name] = cls

  @classmethod
  def from_nest(cls, conn_spec: dict) -> Rule:
    """The rule of a NEST ``conn_spec`` (``{'rule': 'fixed_indegree',
    'indegree': 10, 'allow_autapses': False}``)."""
    spec = dict(conn_spec)
    name = spec.pop("rule", None)
    if name not in Rule.registry:
      raise ValueError(f"conn_spec: unknown rule {name!r}; the rules are "
                       f"{sorted(Rule.registry)}.")
    rule = Rule.registry[name]
    names = {**rule.nest_params, "allow_autapses": "autapses",
             "allow_multapses": "multapses"}
    unknown = sorted(set(spec) - set(names))
    if unknown:
      raise ValueError(f"conn_spec: {name!r} takes {sorted(names)}, not "
                       f"{unknown}.")
    return rule(**{names[k]: v for k, v in spec.items()})

  # -- what a projection of this rule is, statically ----------------------
  @property
  def number(self) -> int:
    """The rule's count (k or n) as the compiled loop carries it."""
    return 0

  @property
  def probability(self) -> float:
    return 0.0

  def width(self, pre: tuple, post: tuple) -> int:
    """W: slots per unit."""
    return SLOTS

  def plan(self, pre: tuple, post: tuple) -> Plan:
    return Plan(self, pre, post, self.number, self.probability,
                self.width(pre, post))

  def share_key(self, plan: Plan) -> Hashable:
    return (type(self), plan.width, self.autapses)

  def check(self, pre: tuple, post: tuple, where: str) -> None:
    """Raises where this rule cannot connect these populations."""

  def resolve(self, pre: tuple, post: tuple) -> Rule:
    """The rule that generates the synapses (a rule that is another's
    special case, once the populations are known, returns that one)."""
    return self

  # -- how a shard generates it (numbers in ``plan`` may be traced) ------
  def prepare(self, plan: Plan, key, arrays=None) -> Any:
    """Per-projection data shared by its chunks (``aux``)."""
    return None

  def n_units(self, plan: Plan, aux, lo, hi):
    """How many units this shard (targets ``[lo, hi)``) visits."""
    raise NotImplementedError

  def units(self, plan: Plan, i, aux, key, lo, hi) -> Units:
    """Chunk ``i``'s draws."""
    raise NotImplementedError

  def given(self, plan: Plan, i, aux) -> tuple[Any, Any]:
    """Chunk ``i``'s given (weights, delay steps) ``[G, W]``; None where
    the projection draws them."""
    return None, None

  def exact_count(self, plan: Plan, lo: int, hi: int) -> int | None:
    """The synapses a shard holding targets ``[lo, hi)`` gets, where that
    is known before drawing (``plan``'s numbers as Python numbers); else
    None."""
    return None


def _overlap(span: tuple, lo: int, hi: int) -> int:
  """How many ids of ``span`` lie in ``[lo, hi)``."""
  return max(0, min(span[1], hi) - max(span[0], lo))


def _all_or_none(plan: Plan, lo: int, hi: int, total: int) -> int | None:
  """``total`` where the shard holds all of ``plan``'s targets, 0 where it
  holds none, else None (how they split is drawn)."""
  inside = _overlap(plan.post, lo, hi)
  if inside == 0:
    return 0
  return total if inside == plan.post[1] - plan.post[0] else None


def _empty(pre: tuple, post: tuple, where: str, rule: str,
           side: str) -> None:
  # NEST raises IllegalConnection: a count that cannot be met is no
  # network, not one without these synapses.
  span = pre if side == "pre" else post
  if span[1] == span[0]:
    what = "source" if side == "pre" else "target"
    raise ValueError(f"{where}: {rule} needs a non-empty {what} population "
                     f"({side} has no neurons).")


class _TargetUnits(Rule):
  """Units are the shard's targets in ``post`` (one unit per target)."""

  def n_units(self, plan, aux, lo, hi):
    return jnp.maximum(jnp.minimum(plan.post[1], hi) -
                       jnp.maximum(plan.post[0], lo), 0)

  @staticmethod
  def _targets(plan, i, lo, hi):
    g = plan.units_per_chunk
    t0 = jnp.maximum(plan.post[0], lo)
    t = t0 + i * g + jnp.arange(g, dtype=jnp.int32)
    ok = t < jnp.minimum(plan.post[1], hi)
    return jnp.where(ok, t, plan.post[0]), ok


@dataclass(frozen=True)
class _Degree(Rule):
  """What the two degree rules share: ``k`` partners for each unit (a
  target or a source), drawn from the other side (``drawn_from``)."""

  drawn_from: ClassVar[str] = "pre"
  k: int
  autapses: bool = True
  multapses: bool = True

  def __post_init__(self):
    name = type(self).__name__
    _size(self.k, f"{name}: k")
    _flag(self.autapses, f"{name}: autapses")
    _no_multapses(name, _flag(self.multapses, f"{name}: multapses"))

  @property
  def number(self):
    return int(self.k)

  def width(self, pre, post):
    return int(self.k)

  def check(self, pre, post, where):
    if self.k:
      _empty(pre, post, where, type(self).__name__, self.drawn_from)
      if not self.autapses and pre == post and pre[1] - pre[0] == 1:
        raise ValueError(f"{where}: autapses=False leaves no partner in a "
                         "population of one neuron.")


@dataclass(frozen=True)
class FixedInDegree(_Degree, _TargetUnits):
  """Each target gets ``k`` sources drawn uniformly (with replacement);
  unit = target."""

  nest_name: ClassVar[str] = "fixed_indegree"
  nest_params: ClassVar[dict] = {"indegree": "k"}

  def exact_count(self, plan, lo, hi):
    return int(plan.number) * _overlap(plan.post, lo, hi)

  def units(self, plan, i, aux, key, lo, hi):
    t, okt = self._targets(plan, i, lo, hi)
    keys = unit_keys(key, t - plan.post[0])
    n = plan.pre[1] - plan.pre[0]
    pre = _excluding(plan.pre[0], n, keys, plan.width, 0, t, self.autapses)
    post = jnp.broadcast_to(t[:, None], pre.shape)
    return Units(keys, pre, post, jnp.broadcast_to(okt[:, None], pre.shape))


@dataclass(frozen=True)
class PairwiseBernoulli(_TargetUnits):
  """Each (source, target) pair is connected with probability ``p``;
  unit = target, one draw per source (dense)."""

  nest_name: ClassVar[str] = "pairwise_bernoulli"
  nest_params: ClassVar[dict] = {"p": "p"}
  p: float
  autapses: bool = True

  def __post_init__(self):
    if isinstance(self.p, (bool, np.bool_)) or not isinstance(
        self.p, (int, float, np.integer, np.floating)):
      raise TypeError(f"PairwiseBernoulli: p must be a number in [0, 1], "
                      f"got {self.p!r}.")
    if not 0.0 <= self.p <= 1.0:
      raise ValueError(f"PairwiseBernoulli: p must be in [0, 1], got {self.p!r}.")
    _flag(self.autapses, "PairwiseBernoulli: autapses")

  @property
  def probability(self):
    return float(self.p)

  def width(self, pre, post):
    return pre[1] - pre[0]

  def exact_count(self, plan, lo, hi):
    # u < p: always for p = 1 (u < 1), never for p = 0
    n = _overlap(plan.post, lo, hi)
    if n == 0 or plan.p == 0.0:
      return 0
    if plan.p != 1.0:
      return None
    targets = (max(plan.post[0], lo), min(plan.post[1], hi))
    own = 0 if self.autapses else _overlap(plan.pre, *targets)
    return (plan.pre[1] - plan.pre[0]) * n - own

  def units(self, plan, i, aux, key, lo, hi):
    t, okt = self._targets(plan, i, lo, hi)
    keys = unit_keys(key, t - plan.post[0])
    u = uniform(keys, plan.width, 0)
    pre = plan.pre[0] + jnp.broadcast_to(
        jnp.arange(plan.width, dtype=jnp.int32), u.shape)
    ok = okt[:, None] & (u < plan.p)
    if not self.autapses:
      ok = ok & (pre != t[:, None])
    return Units(keys, pre, jnp.broadcast_to(t[:, None], pre.shape), ok)


@dataclass(frozen=True)
class AllToAll(PairwiseBernoulli):
  """Every source to every target (NEST's ``all_to_all``): a pairwise
  Bernoulli with ``p = 1`` (its draws never drop a pair)."""

  nest_name: ClassVar[str] = "all_to_all"
  nest_params: ClassVar[dict] = {}
  p: float = 1.0
  autapses: bool = True

  def __post_init__(self):
    if self.p != 1.0:
      raise ValueError("AllToAll connects every pair: p is 1.")
    _flag(self.autapses, "AllToAll: autapses")


@dataclass(frozen=True)
class FixedOutDegree(_Degree):
  """Each source gets ``k`` targets drawn uniformly (with replacement);
  unit = source. Every shard visits every source (it cannot know in
  advance which reach it): O(all synapses of the projection) per shard."""

  nest_name: ClassVar[str] = "fixed_outdegree"
  nest_params: ClassVar[dict] = {"outdegree": "k"}
  drawn_from: ClassVar[str] = "post"

  def n_units(self, plan, aux, lo, hi):
    return jnp.asarray(plan.pre[1] - plan.pre[0], jnp.int32)

  def exact_count(self, plan, lo, hi):
    return _all_or_none(plan, lo, hi,
                        int(plan.number) * (plan.pre[1] - plan.pre[0]))

  def units(self, plan, i, aux, key, lo, hi):
    g = plan.units_per_chunk
    j = plan.pre[0] + i * g + jnp.arange(g, dtype=jnp.int32)
    okj = j < plan.pre[1]
    j = jnp.where(okj, j, plan.pre[0])
    keys = unit_keys(key, j - plan.pre[0])
    n = plan.post[1] - plan.post[0]
    post = _excluding(plan.post[0], n, keys, plan.width, 1, j, self.autapses)
    pre = jnp.broadcast_to(j[:, None], post.shape)
    return Units(keys, pre, post, jnp.broadcast_to(okj[:, None], post.shape))


EXACT = 64  # binomial splits of at most this many synapses are exact


def _split(m, p, keys):
  """Binomial(m, p) per node: exact (a sum of Bernoulli draws) for
  ``m <= EXACT``, else the normal approximation, rounded and clipped to
  ``[0, m]`` (its error is O(1/sqrt(m p (1-p))) in the split's CDF)."""
  u = uniform(keys, EXACT, 0)
  lanes = jnp.arange(EXACT, dtype=jnp.int32)
  small = ((u < p[:, None]) & (lanes < m[:, None])).sum(1, dtype=jnp.int32)
  mf = m.astype(jnp.float32)
  z = normal(keys, 1, 1)[:, 0]
  big = jnp.round(mf * p + jnp.sqrt(mf * p * (1 - p)) * z)
  big = jnp.clip(big, 0, mf).astype(jnp.int32)
  return jnp.where(m <= EXACT, small, big)


class _TotalAux(NamedTuple):
  """FixedTotalNumber's per-projection data: synapses per block, and each
  block's first and last-plus-one unit."""

  counts: jax.Array
  first: jax.Array
  end: jax.Array


@dataclass(frozen=True)
class FixedTotalNumber(Rule):
  """``n`` synapses, each with a uniform source and a uniform target
  (multapses and autapses allowed, as NEST's microcircuit uses it).

  The total is split over a binary tree of target ranges (leaves: blocks
  of ``BLOCK`` targets) by binomial draws keyed on the node
  (:func:`_split`), so every shard computes the same per-block counts; a
  block's ``m`` synapses come in units of ``SLOTS`` (uniform target in the
  block, uniform source). A shard generates only the blocks that touch it.
  """

  nest_name: ClassVar[str] = "fixed_total_number"
  nest_params: ClassVar[dict] = {"N": "n"}
  n: int
  autapses: bool = True
  multapses: bool = True

  def __post_init__(self):
    _size(self.n, "FixedTotalNumber: n")
    _no_multapses("FixedTotalNumber", _flag(self.multapses,
                                            "FixedTotalNumber: multapses"))
    if not _flag(self.autapses, "FixedTotalNumber: autapses"):
      raise NotImplementedError(
          "FixedTotalNumber(autapses=False) is not supported.")

  @property
  def number(self):
    return int(self.n)

  def plan(self, pre, post):
    return dataclasses.replace(super().plan(pre, post),
                               n_blocks=max(1, -(-(post[1] - post[0]) // BLOCK)))

  def check(self, pre, post, where):
    if self.n:
      _empty(pre, post, where, "FixedTotalNumber", "pre")
      _empty(pre, post, where, "FixedTotalNumber", "post")

  @staticmethod
  def _size(plan, first_block, n_blocks):
    """Real targets in blocks ``[first, first + n)``."""
    n_post = plan.post[1] - plan.post[0]
    lo = jnp.minimum(first_block * BLOCK, n_post)
    return jnp.minimum((first_block + n_blocks) * BLOCK, n_post) - lo

  def prepare(self, plan, key, arrays=None):
    """Per-block counts [n_blocks] and their exclusive/inclusive cumsums
    of units. The same arithmetic on every shard and any mesh: one loop
    over the tree's levels on a fixed array of ``2**depth`` leaves, where
    a node's count sits at its first leaf."""
    depth = (plan.n_blocks - 1).bit_length()
    tree = jax.random.key_data(jax.random.fold_in(key, 0xFFFFFFFF))
    leaves = 1 << depth
    j = jnp.arange(leaves, dtype=jnp.int32)

    def level(lv, m):
      span = jnp.right_shift(leaves, lv)
      half = span // 2
      p = (self._size(plan, j, half).astype(jnp.float32) /
           jnp.maximum(self._size(plan, j, span), 1).astype(jnp.float32))
      keys = sub_keys(tree, jnp.left_shift(1, lv) + j // span, 0)
      left = _split(m, p, keys)
      m_new = jnp.where(j % span == 0, left, m)
      right = (m - left)[jnp.maximum(j - half, 0)]
      return jnp.where(j % span == half, right, m_new)

    m = jnp.zeros(leaves, jnp.int32).at[0].set(plan.number)
    m = jax.lax.fori_loop(0, depth, level, m)
    counts = m[:plan.n_blocks]
    units = -(-counts // SLOTS)
    incl = jnp.cumsum(units)
    return _TotalAux(counts, incl - units, incl)

  @staticmethod
  def _span(plan, aux, lo, hi):
    t0 = jnp.maximum(plan.post[0], lo) - plan.post[0]
    t1 = jnp.minimum(plan.post[1], hi) - plan.post[0]
    b0 = jnp.clip(t0 // BLOCK, 0, plan.n_blocks - 1)
    b1 = jnp.clip((t1 - 1) // BLOCK, 0, plan.n_blocks - 1)
    start = aux.first[b0]
    return start, jnp.where(t1 > t0, aux.end[b1] - start, 0)

  def n_units(self, plan, aux, lo, hi):
    return self._span(plan, aux, lo, hi)[1]

  def exact_count(self, plan, lo, hi):
    return _all_or_none(plan, lo, hi, int(plan.number))

  def units(self, plan, i, aux, key, lo, hi):
    start, n = self._span(plan, aux, lo, hi)
    g = start + i * plan.units_per_chunk + jnp.arange(
        plan.units_per_chunk, dtype=jnp.int32)
    okg = g < start + n
    block = jnp.clip(jnp.searchsorted(aux.end, g, side="right"), 0,
                     plan.n_blocks - 1).astype(jnp.int32)
    c = g - aux.first[block]
    keys = unit_keys(key, g)  # g: the unit's place in the projection
    slot = c[:, None] * SLOTS + jnp.arange(SLOTS, dtype=jnp.int32)
    ok = okg[:, None] & (slot < aux.counts[block][:, None])
    size = self._size(plan, block, 1)
    post = plan.post[0] + block[:, None] * BLOCK + randint(
        keys, SLOTS, 1, jnp.maximum(size, 1))
    pre = plan.pre[0] + randint(
        keys, SLOTS, 0, jnp.full_like(block, plan.pre[1] - plan.pre[0]))
    return Units(keys, pre, post, ok)


class ExplicitArrays(NamedTuple):
  """An Explicit projection's arrays as the build passes them (padded to
  whole chunks): population-relative ``pre``/``post``, and ``weight`` and
  ``delay`` (steps) or None where not given."""

  pre: jax.Array
  post: jax.Array
  weight: jax.Array | None
  delay: jax.Array | None


class Explicit(Rule):
  """Given synapses: ``pre[i] -> post[i]`` (indices *within* the pre and
  post populations), optional per-synapse ``weight`` and ``delay`` (ms)
  arrays that override the projection's. Unit = ``SLOTS`` consecutive
  entries; the arrays are replicated arguments of the shard function."""

  def __init__(self, pre: Any, post: Any, weight: Any = None,
               delay: Any = None):
    self.pre = np.asarray(pre)
    self.post = np.asarray(post)
    n = self.pre.shape
    if self.pre.ndim != 1 or self.post.shape != n:
      raise ValueError(
          f"Explicit: pre and post must be 1-D and equal in length, got "
          f"shapes {self.pre.shape} and {self.post.shape}.")
    for name, arr in (("pre", self.pre), ("post", self.post)):
      if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"Explicit: {name} must hold ints, got {arr.dtype}.")
    # float64 on the host: the index casts it to its weight dtype
    self.weight = None if weight is None else np.asarray(weight, np.float64)
    self.delay = None if delay is None else np.asarray(delay, np.float64)
    for name, arr in (("weight", self.weight), ("delay", self.delay)):
      if arr is not None and arr.shape != n:
        raise ValueError(f"Explicit: {name} has shape {arr.shape}; pre and "
                         f"post have {n}.")
      if arr is not None and not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"Explicit: {name}[{bad}] = {arr[bad]} is not "
                         "finite.")

  def __repr__(self) -> str:
    return f"Explicit(<{self.pre.size} synapses>)"

  @property
  def length(self) -> int:
    return int(self.pre.size)

  def padded(self, plan: Plan) -> int:
    """The arrays' length, padded to whole chunks."""
    step = SLOTS * plan.units_per_chunk
    return -(-max(self.length, 1) // step) * step

  def check(self, pre, post, where):
    for name, ids, n in (("pre", self.pre, pre[1] - pre[0]),
                         ("post", self.post, post[1] - post[0])):
      if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"{where}: Explicit {name} ids must lie in [0, {n})"
                         f" (indices within the population), got "
                         f"[{ids.min()}, {ids.max()}].")

  def share_key(self, plan):
    return (type(self), id(self))  # its own arrays: never shared

  def prepare(self, plan, key, arrays=None):
    return ExplicitArrays(*arrays)

  def n_units(self, plan, aux, lo, hi):
    return jnp.int32(-(-self.length // SLOTS))

  def exact_count(self, plan, lo, hi):
    post = plan.post[0] + self.post
    return int(np.count_nonzero((post >= lo) & (post < hi)))

  @staticmethod
  def _slice(plan, arr, i):
    size = plan.units_per_chunk * SLOTS
    return jax.lax.dynamic_slice(arr, (i * size,), (size,)).reshape(
        plan.units_per_chunk, SLOTS)

  def units(self, plan, i, aux, key, lo, hi):
    g = i * plan.units_per_chunk + jnp.arange(plan.units_per_chunk,
                                              dtype=jnp.int32)
    idx = g[:, None] * SLOTS + jnp.arange(SLOTS, dtype=jnp.int32)
    pre = plan.pre[0] + self._slice(plan, aux.pre, i)
    post = plan.post[0] + self._slice(plan, aux.post, i)
    return Units(unit_keys(key, g), pre, post, idx < self.length)

  def given(self, plan, i, aux):
    return (None if aux.weight is None else self._slice(plan, aux.weight, i),
            None if aux.delay is None else self._slice(plan, aux.delay, i))


@dataclass(frozen=True)
class OneToOne(Rule):
  """Source ``i`` to target ``i`` (NEST's ``one_to_one``), populations of
  one size: :class:`Explicit` arrays once the sizes are known."""

  nest_name: ClassVar[str] = "one_to_one"

  def check(self, pre, post, where):
    if pre[1] - pre[0] != post[1] - post[0]:
      raise ValueError(f"{where}: OneToOne needs populations of one size, "
                       f"got {pre[1] - pre[0]} and {post[1] - post[0]}.")

  def resolve(self, pre: tuple, post: tuple) -> Rule:
    ids = np.arange(pre[1] - pre[0])
    return Explicit(ids, ids)
