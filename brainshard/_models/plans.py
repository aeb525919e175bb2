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

Example (a shard holding targets [0, 4) of a 4-neuron population):
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._models.plans import InDegreePlan
  >>> from brainshard._models.rules import FixedInDegree
  >>> plan = InDegreePlan(FixedInDegree(3), (0, 10), (10, 14))
  >>> key = jax.random.key(0)
  >>> keys, pre, post, ok = plan.units(jnp.int32(0), plan.prepare(key), key,
  ...                                  jnp.int32(10), jnp.int32(14))
  >>> pre.shape, bool(ok[:4].all()), bool((pre < 10).all())
  ((4, 3), True, True)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from brainshard._models.counter import randint, uniform, unit_keys

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


class _TargetUnits:
  """Units are the shard's targets in ``post`` (one unit per target)."""

  def __init__(self, pre, post, width):
    self.pre, self.post, self.W = pre, post, width
    self.G = max(1, CHUNK // max(width, 1))

  def prepare(self, key, arrays=None):
    return None

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
    super().__init__(pre, post, rule.k)
    self.rule = rule

  def units(self, i, aux, key, lo, hi):
    t, okt = self._targets(i, lo, hi)
    keys = unit_keys(key, t - self.post[0])
    n = self.pre[1] - self.pre[0]
    pre = _excluding(self.pre[0], n, keys, self.W, 0, t, self.rule.autapses)
    post = jnp.broadcast_to(t[:, None], pre.shape)
    return keys, pre, post, jnp.broadcast_to(okt[:, None], pre.shape)


class BernoulliPlan(_TargetUnits):
  """PairwiseBernoulli: unit = target, one draw per source (dense)."""

  def __init__(self, rule, pre, post):
    super().__init__(pre, post, pre[1] - pre[0])
    self.rule = rule

  def units(self, i, aux, key, lo, hi):
    t, okt = self._targets(i, lo, hi)
    keys = unit_keys(key, t - self.post[0])
    u = uniform(keys, self.W, 0)
    pre = self.pre[0] + jnp.broadcast_to(
        jnp.arange(self.W, dtype=jnp.int32), u.shape)
    ok = okt[:, None] & (u < self.rule.p)
    if not self.rule.autapses:
      ok = ok & (pre != t[:, None])
    return keys, pre, jnp.broadcast_to(t[:, None], pre.shape), ok


class OutDegreePlan:
  """FixedOutDegree: unit = source, ``k`` uniform targets. Every shard
  visits every source (it cannot know in advance which reach it)."""

  def __init__(self, rule, pre, post):
    self.rule, self.pre, self.post, self.W = rule, pre, post, rule.k
    self.G = max(1, CHUNK // max(rule.k, 1))

  def prepare(self, key, arrays=None):
    return None

  def n_units(self, aux, lo, hi):
    return jnp.int32(self.pre[1] - self.pre[0])

  def units(self, i, aux, key, lo, hi):
    j = self.pre[0] + i * self.G + jnp.arange(self.G, dtype=jnp.int32)
    okj = j < self.pre[1]
    j = jnp.where(okj, j, self.pre[0])
    keys = unit_keys(key, j - self.pre[0])
    n = self.post[1] - self.post[0]
    post = _excluding(self.post[0], n, keys, self.W, 1, j, self.rule.autapses)
    pre = jnp.broadcast_to(j[:, None], post.shape)
    return keys, pre, post, jnp.broadcast_to(okj[:, None], post.shape)


class TotalPlan:
  """FixedTotalNumber: the total is split over a binary tree of target
  ranges (leaves: blocks of ``BLOCK`` targets) by binomial draws keyed on
  the node, so every shard computes the same per-block counts; a block's
  ``m`` synapses come in units of ``SLOTS`` (uniform target in the block,
  uniform source). A shard generates only the blocks that touch it."""

  def __init__(self, rule, pre, post):
    self.rule, self.pre, self.post, self.W = rule, pre, post, SLOTS
    self.G = max(1, CHUNK // SLOTS)
    self.n_post = post[1] - post[0]
    self.n_blocks = max(1, -(-self.n_post // BLOCK))
    self.depth = (self.n_blocks - 1).bit_length()

  def _size(self, first_block, n_blocks):
    """Real targets in blocks ``[first, first + n)``."""
    lo = jnp.minimum(first_block * BLOCK, self.n_post)
    return jnp.minimum((first_block + n_blocks) * BLOCK, self.n_post) - lo

  def prepare(self, key, arrays=None):
    """Per-block counts [n_blocks] and their exclusive/inclusive cumsums
    of units. The same arithmetic on every shard and any mesh."""
    tree = jax.random.fold_in(key, 0xFFFFFFFF)  # not a unit id (< 2**31)
    m = jnp.full((1,), self.rule.n, jnp.float32)
    for level in range(self.depth):
      span = 1 << (self.depth - level)
      node = jnp.arange(1 << level, dtype=jnp.int32)
      size = self._size(node * span, span).astype(jnp.float32)
      left = self._size(node * span, span // 2).astype(jnp.float32)
      p = jnp.where(size > 0, left / jnp.maximum(size, 1), 0.0)
      keys = jax.vmap(jax.random.fold_in, (None, 0))(tree, (1 << level) + node)
      draw = jax.vmap(jax.random.binomial)(keys, m, p)
      draw = jnp.where(p >= 1, m, jnp.where(p <= 0, 0.0, draw))
      draw = jnp.clip(jnp.round(draw), 0, m)
      m = jnp.stack([draw, m - draw], axis=1).reshape(-1)
    counts = m[:self.n_blocks].astype(jnp.int32)
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


class ExplicitPlan:
  """Explicit arrays: unit = ``SLOTS`` consecutive entries. The arrays
  (population-relative ids, and optional weights and delay steps) are
  replicated arguments of the shard function, handed to ``prepare``."""

  def __init__(self, rule, pre, post):
    self.rule, self.pre, self.post, self.W = rule, pre, post, SLOTS
    self.G = max(1, CHUNK // SLOTS)
    self.length = int(rule.pre.size)
    self.padded = -(-max(self.length, 1) // (SLOTS * self.G)) * SLOTS * self.G

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
