"""Exact count samplers (Poisson, binomial, multinomial, hypergeometric),
one algorithm inside and outside ``bs.shard_map``.

Each loops over draws of a whole block at once: step ``i`` draws from
``fold_in(key, i)`` at the draw's shape, so with a block key
(``random_blocks``) an element's count depends only on the key and its
global index, and a shard's counts are its block of the unsharded counts.
(``jax.random.poisson`` is not: for rates >= 10 it rejects in lockstep over
the whole array, and 0.10.2's loops fail with a per-shard key.) The cost is
a loop of ``lam + O(sqrt(lam))`` steps for Poisson and ``n * min(p, 1-p)``
for binomial, each a draw of the block: cheap for the small rates of
per-step noise, slow for rates in the hundreds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from brainshard._core import compat

__all__ = ["poisson", "binomial", "multinomial", "hypergeometric"]


def _like(x, *others):
  """``x`` varying over every mesh axis one of ``others`` varies over: a
  loop inside ``shard_map`` needs one carry type, and the key or a
  parameter (a per-neuron rate) may vary where the other does not."""
  missing = frozenset().union(*(compat.varying_axes(jax.typeof(o))
                                for o in others))
  missing -= compat.varying_axes(jax.typeof(x))
  return jax.lax.pcast(x, tuple(sorted(missing)), to="varying") if missing else x


def _arrivals(key, gap, limit, shape, *params):
  """How many partial sums of i.i.d. ``gap(key_i)`` draws are <= ``limit``.

  With exponential gaps that is Poisson(limit) (the arrivals of a unit-rate
  Poisson process up to ``limit``); with geometric(p) gaps it is
  binomial(limit, p) (the successes among ``limit`` trials). The loop runs
  until every element has passed its limit. ``params`` are the arrays
  ``gap`` closes over (the carry varies wherever they do).
  """
  limit = _like(jnp.broadcast_to(limit, shape).astype(jnp.float32), key,
                *params)
  total = _like(jnp.zeros(shape, jnp.float32), limit)
  count = _like(jnp.zeros(shape, jnp.int32), limit)
  i = _like(jnp.zeros((), jnp.uint32), key)

  def cond(carry):
    return (carry[2] <= limit).any()

  def body(carry):
    i, count, total = carry
    total = total + gap(jax.random.fold_in(key, i))
    return i + 1, count + (total <= limit), total

  return jax.lax.while_loop(cond, body, (i, count, total))[1]


def poisson(key, lam, shape, dtype):
  """Poisson(``lam``) counts (exact; ``lam + O(sqrt(lam))`` loop steps)."""
  count = _arrivals(key, lambda k: jax.random.exponential(k, shape), lam, shape)
  return count.astype(dtype)


def binomial(key, n, p, shape, dtype):
  """Binomial(``n``, ``p``) counts (exact; ``n * min(p, 1-p)`` steps)."""
  p = jnp.broadcast_to(jnp.asarray(p, jnp.float32), shape)
  n = jnp.broadcast_to(jnp.asarray(n, jnp.float32), shape)
  q = jnp.minimum(p, 1 - p)
  log_fail = jnp.log1p(-q)

  def gap(k):  # trials up to and including the next success
    u = jax.random.uniform(k, shape, minval=jnp.finfo(jnp.float32).tiny)
    return jnp.where(q > 0, jnp.ceil(jnp.log(u) / log_fail), jnp.inf)

  count = _arrivals(key, gap, n, shape, q)
  return jnp.where(p > 0.5, n - count, count).astype(dtype)


def multinomial(key, n, pvals, shape, dtype):
  """Multinomial counts, shape ``shape`` (last axis: the ``k`` outcomes),
  as successive conditional binomials."""
  batch, k = shape[:-1], shape[-1]
  pvals = jnp.broadcast_to(pvals, shape).astype(jnp.float32)
  left = jnp.broadcast_to(jnp.asarray(n, jnp.float32), batch)
  mass = jnp.ones(batch, jnp.float32)
  out = []
  for j, kj in enumerate(jax.random.split(key, k)):
    pj = jnp.clip(pvals[..., j] / jnp.maximum(mass, 1e-30), 0.0, 1.0)
    xj = left if j == k - 1 else binomial(kj, left, pj, batch, jnp.float32)
    out.append(xj)
    left, mass = left - xj, mass - pvals[..., j]
  return jnp.stack(out, -1).astype(dtype)


def hypergeometric(key, ngood, nbad, nsample, shape, dtype):
  """Good items among ``nsample`` drawn one at a time without replacement
  (exact; ``max(nsample)`` steps)."""
  good, bad, n = (jnp.broadcast_to(jnp.asarray(x, jnp.int32), shape)
                  for x in (ngood, nbad, nsample))
  good, bad, n = (_like(x, key, good, bad, n) for x in (good, bad, n))

  def step(i, carry):
    good, bad, got = carry
    u = jax.random.uniform(jax.random.fold_in(key, i), shape)
    active = i < n
    hit = active & (u * (good + bad) < good)
    return good - hit, bad - (active & ~hit), got + hit

  got = _like(jnp.zeros(shape, jnp.int32), good)
  steps = jnp.max(n, initial=0)
  _, _, got = jax.lax.fori_loop(0, steps, step, (good, bad, got))
  return got.astype(dtype)
