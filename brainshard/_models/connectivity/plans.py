"""How each rule generates its synapses inside one shard, unit by unit.

A rule's synapses come in *units* of ``W`` slots, each unit with a key
derived from device-independent coordinates only (the projection and the
unit's id: a target, a source, a block of slots), never from the shard's
index. A shard visits its units ``G`` at a time (one *chunk*) and gets, per
chunk, ``keys [G]`` and ``pre, post [G, W]`` (global ids) with a mask
``ok``; the builder keeps the slots whose target the shard holds. Pass 1
and pass 2 of the build call the same code, so they see the same draws.

Streams of a unit (``counter.bits``): 0 presynaptic ids, 1 targets,
2 weights, 3 delays.

Example (a shard holding all 4 targets of a population; a chunk has
``G = CHUNK // k`` units, those past the shard's targets masked off):
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._models.connectivity.plans import InDegreePlan
  >>> from brainshard._models.connectivity.rules import FixedInDegree
  >>> plan = InDegreePlan(FixedInDegree(3), (0, 10), (10, 14))
  >>> key = jax.random.key(0)
  >>> keys, pre, post, ok = plan.units(jnp.int32(0), plan.prepare(key), key,
  ...                                  jnp.int32(10), jnp.int32(14))
  >>> pre.shape[1], bool(ok[:4].all()), bool(ok[4:].any()), bool((pre < 10).all())
  (3, True, False, True)
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp

from brainshard._models.connectivity.counter import (
    normal, randint, sub_keys, uniform, unit_keys)

__all__ = ["InDegreePlan", "OutDegreePlan", "BernoulliPlan", "TotalPlan",
           "ExplicitPlan", "CHUNK", "BLOCK", "SLOTS"]

CHUNK = 1 << 16  # slots per chunk (G * W): bounds the chunk's temporaries
BLOCK = 256      # FixedTotalNumber: targets per leaf of the split tree
SLOTS = 1024     # FixedTotalNumber / Explicit: slots per unit


def _excluding(lo, n, keys, width, stream, own, autapses):
  """Uniform draws from ``[lo, lo + n)``; without autapses, skipping each
  unit's own global id ``own`` when it lies in that range."""
  inside = (own >= lo) & (own < lo + n) & (not autapses)
  r = lo + randint(keys, width, stream, n - inside.astype(jnp.int32))
  return jnp.where(inside[:, None] & (r >= own[:, None]), r + 1, r)


class _Plan:
  """Shared by the plans: ``pre``/``post`` (global id ranges), ``n`` (the
  rule's count) and ``p`` may be Python numbers or traced scalars
  (:meth:`bind`), so projections that differ only in them share one
  compiled loop; ``W``, ``G``, ``autapses`` and ``key`` are static."""

  def __init__(self, rule, pre, post, width):
    self.pre, self.post, self.W = pre, post, width
    self.G = max(1, CHUNK // max(width, 1))
    self.autapses = getattr(rule, "autapses", True)
    self.n = getattr(rule, "n", getattr(rule, "k", 0))
    self.p = getattr(rule, "p", 0.0)

  @property
  def key(self):
    """Plans with equal keys can share one compiled loop."""
    return (type(self), self.W, self.autapses)

  def bind(self, pre, post, n, p):
    out = copy.copy(self)
    out.pre, out.post, out.n, out.p = pre, post, n, p
    return out

  def prepare(self, key, arrays=None):
    return None


class _TargetUnits(_Plan):
  """Units are the shard's targets in ``post`` (one unit per target)."""

  def n_units(self, aux, lo, hi):
    return jnp.maximum(jnp.minimum(self.post[1], hi) -
                       jnp.maximum(self.post[0], lo), 0)

  def _targets(self, i, lo, hi):
    t0 = jnp.maximum(self.post[0], lo)
    t = t0 + i * self.G + jnp.arange(self.G, dtype=jnp.int32)
    ok = t < jnp.minimum(self.post[1], hi)
    return jnp.where(ok, t, self.post[0]), ok


class InDegreePlan(_TargetUnits):
  """FixedInDegree: unit = target, ``k`` uniform sources."""

  def __init__(self, rule, pre, post):
    super().__init__(rule, pre, post, rule.k)

  def units(self, i, aux, key, lo, hi):
    t, okt = self._targets(i, lo, hi)
    keys = unit_keys(key, t - self.post[0])
    n = self.pre[1] - self.pre[0]
    pre = _excluding(self.pre[0], n, keys, self.W, 0, t, self.autapses)
    post = jnp.broadcast_to(t[:, None], pre.shape)
    return keys, pre, post, jnp.broadcast_to(okt[:, None], pre.shape)


class BernoulliPlan(_TargetUnits):
  """PairwiseBernoulli: unit = target, one draw per source (dense)."""

  def __init__(self, rule, pre, post):
    super().__init__(rule, pre, post, pre[1] - pre[0])

  def units(self, i, aux, key, lo, hi):
    t, okt = self._targets(i, lo, hi)
    keys = unit_keys(key, t - self.post[0])
    u = uniform(keys, self.W, 0)
    pre = self.pre[0] + jnp.broadcast_to(
        jnp.arange(self.W, dtype=jnp.int32), u.shape)
    ok = okt[:, None] & (u < self.p)
    if not self.autapses:
      ok = ok & (pre != t[:, None])
    return keys, pre, jnp.broadcast_to(t[:, None], pre.shape), ok


class OutDegreePlan(_Plan):
  """FixedOutDegree: unit = source, ``k`` uniform targets. Every shard
  visits every source (it cannot know in advance which reach it)."""

  def __init__(self, rule, pre, post):
    super().__init__(rule, pre, post, rule.k)

  def n_units(self, aux, lo, hi):
    return jnp.asarray(self.pre[1] - self.pre[0], jnp.int32)

  def units(self, i, aux, key, lo, hi):
    j = self.pre[0] + i * self.G + jnp.arange(self.G, dtype=jnp.int32)
    okj = j < self.pre[1]
    j = jnp.where(okj, j, self.pre[0])
    keys = unit_keys(key, j - self.pre[0])
    n = self.post[1] - self.post[0]
    post = _excluding(self.post[0], n, keys, self.W, 1, j, self.autapses)
    pre = jnp.broadcast_to(j[:, None], post.shape)
    return keys, pre, post, jnp.broadcast_to(okj[:, None], post.shape)


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


class TotalPlan(_Plan):
  """FixedTotalNumber: the total is split over a binary tree of target
  ranges (leaves: blocks of ``BLOCK`` targets) by binomial draws keyed on
  the node (:func:`_split`), so every shard computes the same per-block
  counts; a block's
  ``m`` synapses come in units of ``SLOTS`` (uniform target in the block,
  uniform source). A shard generates only the blocks that touch it."""

  def __init__(self, rule, pre, post):
    super().__init__(rule, pre, post, SLOTS)
    self.n_blocks = max(1, -(-(post[1] - post[0]) // BLOCK))

  @property
  def depth(self):
    return (self.n_blocks - 1).bit_length()

  def _size(self, first_block, n_blocks):
    """Real targets in blocks ``[first, first + n)``."""
    n_post = self.post[1] - self.post[0]
    lo = jnp.minimum(first_block * BLOCK, n_post)
    return jnp.minimum((first_block + n_blocks) * BLOCK, n_post) - lo

  def prepare(self, key, arrays=None):
    """Per-block counts [n_blocks] and their exclusive/inclusive cumsums
    of units. The same arithmetic on every shard and any mesh: one loop
    over the tree's levels on a fixed array of ``2**depth`` leaves, where
    a node's count sits at its first leaf."""
    tree = jax.random.key_data(jax.random.fold_in(key, 0xFFFFFFFF))
    leaves = 1 << self.depth
    j = jnp.arange(leaves, dtype=jnp.int32)

    def level(lv, m):
      span = jnp.right_shift(leaves, lv)
      half = span // 2
      p = (self._size(j, half).astype(jnp.float32) /
           jnp.maximum(self._size(j, span), 1).astype(jnp.float32))
      keys = sub_keys(tree, jnp.left_shift(1, lv) + j // span, 0)
      left = _split(m, p, keys)
      m_new = jnp.where(j % span == 0, left, m)
      right = (m - left)[jnp.maximum(j - half, 0)]
      return jnp.where(j % span == half, right, m_new)

    m = jnp.zeros(leaves, jnp.int32).at[0].set(self.n)
    m = jax.lax.fori_loop(0, self.depth, level, m)
    counts = m[:self.n_blocks]
    units = -(-counts // SLOTS)
    incl = jnp.cumsum(units)
    return counts, incl - units, incl

  def _span(self, aux, lo, hi):
    _, excl, incl = aux
    t0 = jnp.maximum(self.post[0], lo) - self.post[0]
    t1 = jnp.minimum(self.post[1], hi) - self.post[0]
    b0 = jnp.clip(t0 // BLOCK, 0, self.n_blocks - 1)
    b1 = jnp.clip((t1 - 1) // BLOCK, 0, self.n_blocks - 1)
    start = excl[b0]
    return start, jnp.where(t1 > t0, incl[b1] - start, 0)

  def n_units(self, aux, lo, hi):
    return self._span(aux, lo, hi)[1]

  def units(self, i, aux, key, lo, hi):
    counts, excl, incl = aux
    start, n = self._span(aux, lo, hi)
    g = start + i * self.G + jnp.arange(self.G, dtype=jnp.int32)
    okg = g < start + n
    block = jnp.clip(jnp.searchsorted(incl, g, side="right"), 0,
                     self.n_blocks - 1).astype(jnp.int32)
    c = g - excl[block]
    keys = unit_keys(key, g)  # g: the unit's place in the projection
    slot = c[:, None] * SLOTS + jnp.arange(SLOTS, dtype=jnp.int32)
    ok = okg[:, None] & (slot < counts[block][:, None])
    size = self._size(block, 1)
    post = self.post[0] + block[:, None] * BLOCK + randint(
        keys, SLOTS, 1, jnp.maximum(size, 1))
    pre = self.pre[0] + randint(keys, SLOTS, 0,
                                jnp.full_like(block, self.pre[1] - self.pre[0]))
    return keys, pre, post, ok


class ExplicitPlan(_Plan):
  """Explicit arrays: unit = ``SLOTS`` consecutive entries. The arrays
  (population-relative ids, and optional weights and delay steps) are
  replicated arguments of the shard function, handed to ``prepare``."""

  def __init__(self, rule, pre, post):
    super().__init__(rule, pre, post, SLOTS)
    self.length = int(rule.pre.size)
    self.padded = -(-max(self.length, 1) // (SLOTS * self.G)) * SLOTS * self.G

  @property
  def key(self):
    return (type(self), id(self))  # its own arrays: never shared

  def prepare(self, key, arrays=None):
    return arrays  # (pre, post, weight or None, delay steps or None)

  def n_units(self, aux, lo, hi):
    return jnp.int32(-(-self.length // SLOTS))

  def _slice(self, arr, i):
    size = self.G * SLOTS
    return jax.lax.dynamic_slice(arr, (i * size,), (size,)).reshape(
        self.G, SLOTS)

  def units(self, i, aux, key, lo, hi):
    g = i * self.G + jnp.arange(self.G, dtype=jnp.int32)
    idx = g[:, None] * SLOTS + jnp.arange(SLOTS, dtype=jnp.int32)
    pre = self.pre[0] + self._slice(aux[0], i)
    post = self.post[0] + self._slice(aux[1], i)
    return unit_keys(key, g), pre, post, idx < self.length

  def values(self, i, aux):
    """Given (weight, delay steps) for chunk ``i``; None where not given."""
    w, d = aux[2], aux[3]
    return (None if w is None else self._slice(w, i),
            None if d is None else self._slice(d, i))
