"""The rarer numpy.random samplers of :mod:`brainshard.random` (and
brainstate's ``t``, ``maxwell``, ``loggamma``, ``weibull_min``,
``orthogonal``), on the one draw path.

The raw samplers are in ``random_extra``; these functions add numpy's names
and argument order (``size``, ``key``, ``dtype``; ``spec=`` inside
``bs.shard_map``, as every draw) and refuse parameters numpy refuses when
they are concrete (``random.check``): a traced parameter cannot raise, so
under a transform an invalid one gives what the sampler gives.

Example:
  >>> import brainshard as bs
  >>> bs.random.seed(0)
  >>> x = bs.random.triangular(-1.0, 0.0, 2.0, size=5)
  >>> x.shape, bool(((x >= -1) & (x <= 2)).all())
  ((5,), True)
  >>> bs.random.zipf(2.0, size=3).dtype
  dtype('int32')
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from brainshard._simulation.random import extra as rx
from brainshard._simulation.random.params import Size, _float_dtype, _shape, check
from brainshard._simulation.random.draw import draw

__all__ = [
    "f", "noncentral_chisquare", "noncentral_f", "power", "rayleigh",
    "triangular", "wald", "logseries", "zipf", "vonmises", "random_integers",
    "ranf", "sample", "t", "maxwell", "loggamma", "weibull_min", "orthogonal",
]


def _or(x, default):
  return default if x is None else x


def _float(where, key, fn, params, size, dtype, spec, **kw):
  return draw(where, key, fn, params, _shape(size, *params),
              _float_dtype(dtype, *params), spec=spec, **kw)


def _int(where, key, fn, params, size, dtype, spec):
  return draw(where, key, fn, params, _shape(size, *params),
              jnp.dtype(dtype or jnp.int32), spec=spec)


# ----------------------------------------------------------------------------
# Continuous


def f(dfnum, dfden, size: Size = None, key: Any = None, dtype: Any = None,
      spec: Any = None):
  """Fisher's F with ``dfnum`` and ``dfden`` degrees of freedom.

  Example:
    >>> import brainshard as bs
    >>> bs.random.f(2.0, 5.0, size=3).shape
    (3,)
  """
  check("f", lambda a, b: (a > 0) & (b > 0), "dfnum and dfden must be > 0",
        dfnum, dfden)
  return _float("f", key, rx.f, (dfnum, dfden), size, dtype, spec)


def noncentral_chisquare(df, nonc, size: Size = None, key: Any = None,
                         dtype: Any = None, spec: Any = None):
  """Noncentral chi-square with ``df`` degrees of freedom and
  noncentrality ``nonc`` (a Poisson mixture of chi-squares; its loop is
  ``nonc / 2 + O(sqrt(nonc))`` steps).

  Example:
    >>> import brainshard as bs
    >>> bs.random.noncentral_chisquare(3.0, [1.0, 2.0]).shape
    (2,)
  """
  check("noncentral_chisquare", lambda d, n: (d > 0) & (n >= 0),
        "df must be > 0 and nonc >= 0", df, nonc)
  return _float("noncentral_chisquare", key, rx.noncentral_chisquare,
                (df, nonc), size, dtype, spec)


def noncentral_f(dfnum, dfden, nonc, size: Size = None, key: Any = None,
                 dtype: Any = None, spec: Any = None):
  """Noncentral F (noncentral chi-square over a chi-square).

  Example:
    >>> import brainshard as bs
    >>> bs.random.noncentral_f(3.0, 20.0, 1.5, size=2).shape
    (2,)
  """
  check("noncentral_f", lambda a, b, n: (a > 0) & (b > 0) & (n >= 0),
        "dfnum and dfden must be > 0 and nonc >= 0", dfnum, dfden, nonc)
  return _float("noncentral_f", key, rx.noncentral_f, (dfnum, dfden, nonc),
                size, dtype, spec)


def power(a, size: Size = None, key: Any = None, dtype: Any = None,
          check_valid: bool = True, spec: Any = None):
  """On ``[0, 1]`` with density ``a x^(a-1)`` (``check_valid=False``: no
  ``a > 0`` check, as brainstate's).

  Example:
    >>> import brainshard as bs
    >>> bs.random.power(2.0, size=(2, 2)).shape
    (2, 2)
  """
  if check_valid:
    check("power", lambda a: a > 0, "a must be > 0", a)
  return _float("power", key, rx.power, (a,), size, dtype, spec)


def rayleigh(scale=1.0, size: Size = None, key: Any = None, dtype: Any = None,
             spec: Any = None):
  """Rayleigh with mode ``scale`` (``None``: 1).

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.rayleigh(2.0, size=4).min() >= 0)
    True
  """
  scale = _or(scale, 1.0)
  check("rayleigh", lambda s: s >= 0, "scale must be >= 0", scale)
  return _float("rayleigh", key, rx.rayleigh, (scale,), size, dtype, spec)


def triangular(left=0.0, mode=0.5, right=1.0, size: Size = None,
               key: Any = None, dtype: Any = None, spec: Any = None):
  """Triangular on ``[left, right]`` peaking at ``mode``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.triangular(0.0, 0.5, 1.0).shape
    ()
  """
  check("triangular", lambda l, m, r: (l <= m) & (m <= r) & (l < r),
        "requires left <= mode <= right and left < right", left, mode, right)
  return _float("triangular", key, rx.triangular, (left, mode, right), size,
                dtype, spec)


def wald(mean, scale, size: Size = None, key: Any = None, dtype: Any = None,
         spec: Any = None):
  """Wald (inverse Gaussian) with ``mean`` and shape ``scale``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.wald([2.0, 0.5], 2.0).shape
    (2,)
  """
  check("wald", lambda m, s: (m > 0) & (s > 0), "mean and scale must be > 0",
        mean, scale)
  return _float("wald", key, rx.wald, (mean, scale), size, dtype, spec)


def vonmises(mu, kappa, size: Size = None, key: Any = None, dtype: Any = None,
             spec: Any = None):
  """Von Mises on ``[-pi, pi)`` with mode ``mu`` and concentration ``kappa``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.vonmises(0.0, 2.0, size=3).shape
    (3,)
  """
  check("vonmises", lambda k: k >= 0, "kappa must be >= 0", kappa)
  return _float("vonmises", key, rx.vonmises, (mu, kappa), size, dtype, spec)


def t(df, size: Size = None, key: Any = None, dtype: Any = None,
      spec: Any = None):
  """Student's t (brainstate's name for ``standard_t``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.t([1.0, 4.0]).shape
    (2,)
  """
  check("t", lambda d: d > 0, "df must be > 0", df)
  return _float("t", key, rx.t, (df,), size, dtype, spec)


def maxwell(size: Size = None, key: Any = None, dtype: Any = None,
            spec: Any = None):
  """Maxwell-Boltzmann speeds: the norm of three standard normals.

  Example:
    >>> import brainshard as bs
    >>> bs.random.maxwell(size=(2, 3)).shape
    (2, 3)
  """
  return draw("maxwell", key, rx.maxwell, (), _shape(size),
              _float_dtype(dtype), spec=spec, bits_event=(3,))


def loggamma(a, size: Size = None, key: Any = None, dtype: Any = None,
             spec: Any = None):
  """``log`` of Gamma(``a``) samples, accurate for small ``a``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.loggamma(0.5, size=2).shape
    (2,)
  """
  check("loggamma", lambda a: a > 0, "a must be > 0", a)
  return _float("loggamma", key, rx.loggamma, (a,), size, dtype, spec)


def weibull_min(a, scale=None, size: Size = None, key: Any = None,
                dtype: Any = None, spec: Any = None):
  """Weibull with shape ``a`` and scale ``scale`` (``None``: 1).

  Example:
    >>> import brainshard as bs
    >>> bs.random.weibull_min(2.0, 3.0, size=4).shape
    (4,)
  """
  scale = _or(scale, 1.0)
  check("weibull_min", lambda a, s: (a > 0) & (s > 0),
        "a and scale must be > 0", a, scale)
  return _float("weibull_min", key, rx.weibull_min, (a, scale), size, dtype,
                spec)


def orthogonal(n: int, size: Size = None, key: Any = None, dtype: Any = None,
               spec: Any = None):
  """Haar-random ``n x n`` orthogonal matrices, shape ``size + (n, n)``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> q = bs.random.orthogonal(3)
    >>> bool(jnp.allclose(q @ q.T, jnp.eye(3), atol=1e-5))
    True
  """
  n = int(n)
  return draw("orthogonal", key, rx.orthogonal, (), _shape(size),
              _float_dtype(dtype), spec=spec, event=(n, n),
              bits_event=(n, n), n=n)


def ranf(size: Size = None, key: Any = None, dtype: Any = None,
         spec: Any = None):
  """numpy's alias of ``random_sample``: uniform on ``[0, 1)`` (the same
  numbers for the same key).

  Example:
    >>> import brainshard as bs
    >>> bs.random.ranf((2,)).shape
    (2,)
  """
  return draw("ranf", key, rx.ranf, (), _shape(size), _float_dtype(dtype),
              spec=spec)


def sample(size: Size = None, key: Any = None, dtype: Any = None,
           spec: Any = None):
  """numpy's other alias of ``random_sample``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.sample().shape
    ()
  """
  return draw("sample", key, rx.ranf, (), _shape(size), _float_dtype(dtype),
              spec=spec)


# ----------------------------------------------------------------------------
# Discrete


def logseries(p, size: Size = None, key: Any = None, dtype: Any = None,
              spec: Any = None):
  """Logarithmic series on ``{1, 2, ...}`` for ``0 <= p < 1``.

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.logseries(0.6, size=5).min() >= 1)
    True
  """
  check("logseries", lambda p: (p >= 0) & (p < 1), "p must be in [0, 1)", p)
  return _int("logseries", key, rx.logseries, (p,), size, dtype, spec)


def zipf(a, size: Size = None, key: Any = None, dtype: Any = None,
         spec: Any = None):
  """Zipf on ``{1, 2, ...}`` with exponent ``a > 1``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.zipf([1.5, 2.0]).shape
    (2,)
  """
  check("zipf", lambda a: a > 1, "a must be > 1", a)
  return _int("zipf", key, rx.zipf, (a,), size, dtype, spec)


def random_integers(low, high=None, size: Size = None, key: Any = None,
                    dtype: Any = None, spec: Any = None):
  """numpy's (deprecated) inclusive integers in ``[low, high]``; ``[1, low]``
  without ``high``.

  Example:
    >>> import brainshard as bs
    >>> x = bs.random.random_integers(1, 3, size=50)
    >>> bool(x.min() >= 1 and x.max() <= 3)
    True
  """
  if high is None:
    low, high = 1, low
  check("random_integers", lambda l, h: l <= h, "low must be <= high", low,
        high)
  return _int("random_integers", key, _inclusive, (low, high), size, dtype,
              spec)


def _inclusive(key, low, high, *, shape, dtype):
  return jax.random.randint(key, shape, low, jnp.asarray(high) + 1, dtype)
