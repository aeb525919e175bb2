"""The rarer numpy.random (and brainstate) samplers, as pure JAX functions of a key.

Each sampler is ``f(key, *params, shape, dtype)``, run by
``random_draw.draw`` (``random_extra_api`` holds the public functions), so
it may use its key only as that draw path allows: jax.random's closed-form
samplers at ``shape`` (after ``split``/``fold_in``), the block-aware count
samplers of ``random_counts``, and ``random_blocks.per_element`` for the
gamma family (jax.random.gamma splits its key per element, which a block
key cannot reproduce). Then inside ``bs.shard_map`` every element depends on
the key and its global index only, and a shard draws its block of the
unsharded draw. Every parameter broadcasts to ``shape``; algorithms follow
NumPy's (``numpy/random/src/distributions``) so the distributions match,
not the streams. Rejection samplers (``zipf``, ``vonmises``) loop with
``lax.while_loop`` until every element is accepted, at most
:data:`MAX_ROUNDS` rounds; each round redraws the whole block from a split
key, so an element's value is its first accepted round's, whatever the
block. Parameters NumPy rejects (``zipf`` with ``a <= 1``) cannot raise on
traced values (the public functions check concrete ones), and leave 0
where never accepted.

Example:
  >>> import jax
  >>> from brainshard._simulation.random import extra as rx
  >>> x = rx.triangular(jax.random.key(0), 0.0, 0.5, 1.0, (4,))
  >>> x.shape, bool(((x >= 0) & (x <= 1)).all())
  ((4,), True)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from brainshard._simulation.random.blocks import per_element
from brainshard._simulation.random.counts import _like
from brainshard._simulation.random.counts import poisson as _poisson

__all__ = [
    "f", "noncentral_chisquare", "noncentral_f", "power", "rayleigh",
    "triangular", "wald", "logseries", "zipf", "vonmises", "random_integers",
    "ranf", "sample", "t", "maxwell", "loggamma", "weibull_min", "orthogonal"]

Shape = tuple[int, ...]
MAX_ROUNDS = 1000


def _gamma(key, a, shape, dtype):
  """Gamma(``a``) with one key per element (block-safe)."""
  return per_element(lambda k, a: jax.random.gamma(k, a, (), dtype), key,
                     (jnp.asarray(a, dtype),), shape)


def _chisquare(key, df, shape, dtype):
  return 2.0 * _gamma(key, df / 2.0, shape, dtype)


def f(key, dfnum, dfden, shape: Shape, dtype=jnp.float32):
  """Fisher's F: ``(chi2(dfnum) / dfnum) / (chi2(dfden) / dfden)``."""
  k1, k2 = jax.random.split(key)
  return ((_chisquare(k1, dfnum, shape, dtype) / dfnum) /
          (_chisquare(k2, dfden, shape, dtype) / dfden))


def noncentral_chisquare(key, df, nonc, shape: Shape, dtype=jnp.float32):
  """``chi2(df + 2 K)`` with ``K ~ Poisson(nonc / 2)``: the Poisson mixture
  form, valid for every ``df > 0`` (NumPy splits ``df > 1`` off)."""
  k1, k2 = jax.random.split(key)
  counts = _poisson(k1, jnp.broadcast_to(nonc / 2.0, shape), shape, jnp.int32)
  return _chisquare(k2, df + 2.0 * counts.astype(dtype), shape, dtype)


def noncentral_f(key, dfnum, dfden, nonc, shape: Shape, dtype=jnp.float32):
  """``(ncchi2(dfnum, nonc) / dfnum) / (chi2(dfden) / dfden)``."""
  k1, k2 = jax.random.split(key)
  num = noncentral_chisquare(k1, dfnum, nonc, shape, dtype) / dfnum
  return num / (_chisquare(k2, dfden, shape, dtype) / dfden)


def power(key, a, shape: Shape, dtype=jnp.float32):
  """On [0, 1] with density ``a x^(a-1)``: ``U^(1/a)``."""
  u = jax.random.uniform(key, shape, dtype)
  return jnp.power(u, 1.0 / a)


def rayleigh(key, scale, shape: Shape, dtype=jnp.float32):
  """``scale * sqrt(2 E)``, E standard exponential."""
  return scale * jnp.sqrt(2.0 * jax.random.exponential(key, shape, dtype))


def triangular(key, left, mode, right, shape: Shape, dtype=jnp.float32):
  """Inverse CDF of the triangular distribution (NumPy's)."""
  u = jax.random.uniform(key, shape, dtype)
  base = right - left
  left_base = mode - left
  lower = left + jnp.sqrt(u * left_base * base)
  upper = right - jnp.sqrt((1.0 - u) * (right - mode) * base)
  return jnp.where(u <= left_base / base, lower, upper)


def wald(key, mean, scale, shape: Shape, dtype=jnp.float32):
  """Inverse Gaussian (Michael, Schucany and Haas; NumPy's)."""
  k1, k2 = jax.random.split(key)
  y = mean * jnp.square(jax.random.normal(k1, shape, dtype))
  x = mean + (mean / (2.0 * scale)) * (y - jnp.sqrt(4.0 * scale * y + y * y))
  u = jax.random.uniform(k2, shape, dtype)
  return jnp.where(u <= mean / (mean + x), x, mean * mean / x)


def logseries(key, p, shape: Shape, dtype=jnp.int32):
  """Logarithmic series on {1, 2, ...} (Kemp's second algorithm, NumPy's)."""
  k1, k2 = jax.random.split(key)
  v = jax.random.uniform(k1, shape, minval=jnp.finfo(jnp.float32).tiny)
  u = jax.random.uniform(k2, shape)
  q = -jnp.expm1(jnp.log1p(-p) * u)
  tail = jnp.floor(1.0 + jnp.log(v) / jnp.log(q))
  out = jnp.where(v <= q * q, jnp.maximum(tail, 1.0),
                  jnp.where(v <= q, 2.0, 1.0))
  return jnp.where(v >= p, 1.0, out).astype(dtype)


def _until_accepted(key, shape, draw, dtype):
  """Rejection sampling: ``draw(key) -> (value, accepted)`` per element,
  redrawn where not yet accepted."""
  def cond(carry):
    return ~jnp.all(carry[2]) & (carry[3] < MAX_ROUNDS)


  def body(carry):
    key, value, done, rounds = carry
    key, sub = jax.random.split(key)
    new, ok = draw(sub)
    take = ~done & ok
    return key, jnp.where(take, new, value), done | ok, rounds + 1

  # the carry varies over the mesh axes the (block) key varies over
  init = (key, _like(jnp.zeros(shape, dtype), key),
          _like(jnp.zeros(shape, bool), key), _like(jnp.int32(0), key))
  return lax.while_loop(cond, body, init)[1]


def zipf(key, a, shape: Shape, dtype=jnp.int32):
  """Zipf on {1, 2, ...} for ``a > 1`` (Devroye's rejection, NumPy's)."""
  am1 = a - 1.0
  b = jnp.power(2.0, am1)
  limit = float(jnp.iinfo(dtype).max)

  def draw(k):
    k1, k2 = jax.random.split(k)
    u = 1.0 - jax.random.uniform(k1, shape)
    v = jax.random.uniform(k2, shape)
    x = jnp.floor(jnp.power(u, -1.0 / am1))
    t_ = jnp.power(1.0 + 1.0 / x, am1)
    ok = (x >= 1) & (x <= limit) & (v * x * (t_ - 1.0) / (b - 1.0) <= t_ / b)
    return jnp.clip(x, 1.0, limit).astype(dtype), ok

  return _until_accepted(key, shape, draw, dtype)


def vonmises(key, mu, kappa, shape: Shape, dtype=jnp.float32):
  """Von Mises on [-pi, pi) (Best and Fisher's rejection, NumPy's); nearly
  uniform for ``kappa < 1e-8``, a wrapped normal for ``kappa > 1e6``."""
  kappa = jnp.broadcast_to(jnp.asarray(kappa, dtype), shape)
  safe = jnp.clip(kappa, 1e-8, 1e6)
  r = 1.0 + jnp.sqrt(1.0 + 4.0 * safe * safe)
  rho = (r - jnp.sqrt(2.0 * r)) / (2.0 * safe)
  # below 1e-5 rho cancels to 0 in float32: NumPy's expansion at kappa = 0
  s = jnp.where(safe < 1e-5, 1.0 / safe + safe,
                (1.0 + rho * rho) / (2.0 * rho))

  def draw(k):
    k1, k2 = jax.random.split(k)
    z = jnp.cos(jnp.pi * jax.random.uniform(k1, shape, dtype))
    w = (1.0 + s * z) / (s + z)
    y = safe * (s - w)
    v = jax.random.uniform(k2, shape, dtype, minval=jnp.finfo(dtype).tiny)
    ok = (y * (2.0 - y) - v >= 0) | (jnp.log(y / v) + 1.0 - y >= 0)
    ok = ok | (kappa < 1e-8) | (kappa > 1e6)  # replaced below anyway
    return jnp.arccos(jnp.clip(w, -1.0, 1.0)), ok

  k_loop, k_sign, k_small, k_big = jax.random.split(key, 4)
  angle = _until_accepted(k_loop, shape, draw, dtype)
  angle = jnp.where(jax.random.uniform(k_sign, shape) < 0.5, -angle, angle)
  uniform = jax.random.uniform(k_small, shape, dtype, -jnp.pi, jnp.pi)
  normal = jax.random.normal(k_big, shape, dtype) / jnp.sqrt(safe)
  angle = jnp.where(kappa < 1e-8, uniform,
                    jnp.where(kappa > 1e6, normal, angle))
  return jnp.mod(angle + mu + jnp.pi, 2.0 * jnp.pi) - jnp.pi


def random_integers(key, low, high, shape: Shape, dtype=jnp.int32):
  """NumPy's deprecated inclusive integers: ``[low, high]``, or ``[1, low]``
  when ``high`` is None."""
  if high is None:
    low, high = 1, low
  return jax.random.randint(key, shape, low, jnp.asarray(high) + 1, dtype)


def ranf(key, shape: Shape, dtype=jnp.float32):
  """NumPy's alias of ``random_sample``: uniform on [0, 1)."""
  return jax.random.uniform(key, shape, dtype)


sample = ranf


def t(key, df, shape: Shape, dtype=jnp.float32):
  """brainstate's ``t``: Student's t (``standard_t``)."""
  return per_element(lambda k, df: jax.random.t(k, df, (), dtype), key,
                     (jnp.asarray(df, dtype),), shape)


def maxwell(key, shape: Shape, dtype=jnp.float32):
  """brainstate's ``maxwell``: the norm of three standard normals (drawn at
  ``shape + (3,)``: the draw path needs ``bits_event=(3,)``)."""
  return jnp.linalg.norm(jax.random.normal(key, (*shape, 3), dtype), axis=-1)


def loggamma(key, a, shape: Shape, dtype=jnp.float32):
  """brainstate's ``loggamma``: ``log(Gamma(a))``, accurate for small ``a``."""
  return per_element(lambda k, a: jax.random.loggamma(k, a, (), dtype), key,
                     (jnp.asarray(a, dtype),), shape)


def orthogonal(key, shape: Shape, dtype=jnp.float32, *, n: int):
  """brainstate's ``orthogonal``: Haar-random ``n x n`` orthogonal matrices
  of batch shape ``shape`` (QR of a normal matrix, signs fixed by ``R``'s
  diagonal; the draw path needs ``bits_event=(n, n)``)."""
  z = jax.random.normal(key, (*shape, n, n), dtype)
  q, r = jnp.linalg.qr(z)
  d = jnp.diagonal(r, 0, -2, -1)
  return q * jnp.expand_dims(jnp.sign(d), -2)


def weibull_min(key, a, scale: Any, shape: Shape, dtype=jnp.float32):
  """brainstate's ``weibull_min(a, scale)``: ``scale * (-log(1-U))^(1/a)``
  (``scale=None``: 1)."""
  u = jax.random.uniform(key, shape, dtype)
  out = jnp.power(-jnp.log1p(-u), 1.0 / a)
  return out if scale is None else out * scale
