"""The NumPy-style samplers of :mod:`brainshard.random`, on one draw path.

Every sampler here is a pure function ``raw(key, *params, shape, dtype,
...)`` of a key and its parameters, and ``random_draw.draw`` runs it, so
that inside ``bs.shard_map`` it draws its block of the unsharded draw
(``spec=``). A raw sampler uses its key only through jax.random's
closed-form samplers at ``shape`` (elementwise in the global index) or
through ``random_blocks.per_element`` (one key per element, for samplers
that reject: gamma, beta, chisquare, t, dirichlet). A new sampler is a raw
function and a few lines of argument conventions (``numpy.random``'s
names, brainstate's ``None`` defaults).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._simulation.random.params import (
    Size, _float_dtype, _shape, as_param, check)
from brainshard._simulation.random.blocks import element_keys, per_element
from brainshard._simulation.random.draw import draw

__all__ = [
    "draw", "standard_normal", "standard_exponential", "standard_gamma",
    "standard_cauchy", "standard_t", "exponential", "gamma", "beta",
    "chisquare", "lognormal", "laplace", "logistic", "gumbel", "pareto",
    "weibull", "truncated_normal", "multivariate_normal", "dirichlet",
]


def _or(x, default):
  """brainstate spells a default parameter ``None``."""
  return default if x is None else x


def _fdraw(where, key, fn, params, size: Size, dtype, spec, **opts):
  """A float draw whose shape (``size=None``) broadcasts ``params``."""
  return draw(where, key, fn, params, _shape(size, *params),
              _float_dtype(dtype, *params), spec=spec, **opts)


# ----------------------------------------------------------------------------
# Raw samplers: pure functions of a key (shape and dtype static)


def _loc_scale(key, loc, scale, *, shape, dtype, std):
  return (loc + scale * std(key, shape, dtype)).astype(dtype)


def _gamma(key, a, scale, *, shape, dtype):
  g = per_element(lambda k, a: jax.random.gamma(k, a, (), dtype), key, (a,),
                  shape)
  return (g * scale).astype(dtype)


def _beta(key, a, b, *, shape, dtype):
  return per_element(lambda k, a, b: jax.random.beta(k, a, b, (), dtype), key,
                     (a, b), shape)


def _chisquare(key, df, *, shape, dtype):
  return per_element(lambda k, df: jax.random.chisquare(k, df, (), dtype), key,
                     (df,), shape)


def _t(key, df, *, shape, dtype):
  return per_element(lambda k, df: jax.random.t(k, df, (), dtype), key, (df,),
                     shape)


def _lognormal(key, mean, sigma, *, shape, dtype):
  return jnp.exp(mean + sigma * jax.random.normal(key, shape, dtype)).astype(dtype)


def _lomax(key, a, *, shape, dtype):
  # numpy's pareto is Pareto II (Lomax): jax's Pareto(a) on [1, inf) minus 1.
  return jax.random.pareto(key, a, shape, dtype) - 1


def _weibull(key, a, *, shape, dtype):
  return jax.random.weibull_min(key, 1.0, a, shape, dtype)


def _truncated_normal(key, lower, upper, loc, scale, *, shape, dtype):
  z = jax.random.truncated_normal(
      key, (lower - loc) / scale, (upper - loc) / scale, shape, dtype)
  return (loc + scale * z).astype(dtype)


def _mvn(key, mean, cov, *, shape, dtype, method):
  return jax.random.multivariate_normal(key, mean, cov, shape, dtype, method)


def _dirichlet(key, alpha, *, shape, dtype):
  keys = element_keys(key, shape)
  alpha = jnp.broadcast_to(alpha, shape + alpha.shape[-1:])
  one = lambda k, a: jax.random.dirichlet(k, a, (), dtype)
  for _ in shape:
    one = jax.vmap(one)
  return one(keys, alpha)


def _cauchy(key, shape, dtype):
  return jax.random.cauchy(key, shape, dtype)


# ----------------------------------------------------------------------------
# Continuous distributions (numpy.random's names and argument order)


def standard_normal(size: Size = None, key: Any = None, dtype: Any = None,
                    spec: Any = None):
  """Standard normal samples (``numpy.random.standard_normal``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_normal(size=(2, 3)).shape
    (2, 3)
  """
  return _fdraw("standard_normal", key, _loc_scale, (0.0, 1.0), size, dtype, spec,
                std=jax.random.normal)


def standard_exponential(size: Size = None, key: Any = None, dtype: Any = None,
                         spec: Any = None):
  """Exponential samples with scale 1.

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.standard_exponential(size=4).min() >= 0)
    True
  """
  return _fdraw("standard_exponential", key, _loc_scale, (0.0, 1.0), size,
                dtype, spec, std=jax.random.exponential)


def standard_cauchy(size: Size = None, key: Any = None, dtype: Any = None,
                    spec: Any = None):
  """Cauchy samples with location 0 and scale 1.

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_cauchy(size=3).shape
    (3,)
  """
  return _fdraw("standard_cauchy", key, _loc_scale, (0.0, 1.0), size, dtype, spec,
                std=_cauchy)


def exponential(scale=1.0, size: Size = None, key: Any = None, dtype: Any = None,
                spec: Any = None):
  """Exponential samples with mean ``scale`` (numpy's parameter, not a rate).

  Example:
    >>> import brainshard as bs
    >>> bs.random.exponential(2.0, size=(3,)).shape
    (3,)
  """
  return _fdraw("exponential", key, _loc_scale, (0.0, _or(scale, 1.0)), size,
                dtype, spec, std=jax.random.exponential)


def laplace(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
            dtype: Any = None, spec: Any = None):
  """Laplace (double exponential) samples.

  Example:
    >>> import brainshard as bs
    >>> bs.random.laplace(1.0, 2.0, size=2).shape
    (2,)
  """
  return _fdraw("laplace", key, _loc_scale, (_or(loc, 0.0), _or(scale, 1.0)),
                size, dtype, spec, std=jax.random.laplace)


def logistic(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
             dtype: Any = None, spec: Any = None):
  """Logistic samples.

  Example:
    >>> import brainshard as bs
    >>> bs.random.logistic(size=2).shape
    (2,)
  """
  return _fdraw("logistic", key, _loc_scale, (_or(loc, 0.0), _or(scale, 1.0)),
                size, dtype, spec, std=jax.random.logistic)


def gumbel(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
           dtype: Any = None, spec: Any = None):
  """Gumbel (type I extreme value) samples.

  Example:
    >>> import brainshard as bs
    >>> bs.random.gumbel(size=2).shape
    (2,)
  """
  return _fdraw("gumbel", key, _loc_scale, (_or(loc, 0.0), _or(scale, 1.0)),
                size, dtype, spec, std=jax.random.gumbel)


def gamma(shape, scale=1.0, size: Size = None, key: Any = None,
          dtype: Any = None, spec: Any = None):
  """Gamma samples with shape ``shape`` and scale ``scale`` (numpy's order).

  Example:
    >>> import brainshard as bs
    >>> bs.random.gamma(2.0, 0.5, size=(2, 2)).shape
    (2, 2)
  """
  return _fdraw("gamma", key, _gamma, (shape, _or(scale, 1.0)), size, dtype, spec)


def standard_gamma(shape, size: Size = None, key: Any = None, dtype: Any = None,
                   spec: Any = None):
  """Gamma samples with scale 1.

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_gamma(3.0, size=2).shape
    (2,)
  """
  return _fdraw("standard_gamma", key, _gamma, (shape, 1.0), size, dtype, spec)


def beta(a, b, size: Size = None, key: Any = None, dtype: Any = None,
         spec: Any = None):
  """Beta samples on ``[0, 1]``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.beta(2.0, 3.0, size=3).shape
    (3,)
  """
  return _fdraw("beta", key, _beta, (a, b), size, dtype, spec)


def chisquare(df, size: Size = None, key: Any = None, dtype: Any = None,
              check_valid: bool = True, spec: Any = None):
  """Chi-square samples with ``df`` degrees of freedom.

  Example:
    >>> import brainshard as bs
    >>> bs.random.chisquare(4.0, size=2).shape
    (2,)
  """
  if check_valid:
    check("chisquare", lambda df: df > 0, "df must be > 0", df)
  return _fdraw("chisquare", key, _chisquare, (df,), size, dtype, spec)


def standard_t(df, size: Size = None, key: Any = None, dtype: Any = None,
               spec: Any = None):
  """Student's t samples with ``df`` degrees of freedom.

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_t(5.0, size=2).shape
    (2,)
  """
  return _fdraw("standard_t", key, _t, (df,), size, dtype, spec)


def lognormal(mean=0.0, sigma=1.0, size: Size = None, key: Any = None,
              dtype: Any = None, spec: Any = None):
  """``exp`` of normal samples with mean ``mean`` and std ``sigma``.

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.lognormal(size=3).min() > 0)
    True
  """
  return _fdraw("lognormal", key, _lognormal, (_or(mean, 0.0), _or(sigma, 1.0)),
                size, dtype, spec)


def pareto(a, size: Size = None, key: Any = None, dtype: Any = None,
           spec: Any = None):
  """Pareto II (Lomax) samples on ``[0, inf)``, as ``numpy.random.pareto``.

  (``jax.random.pareto`` and brainstate's ``pareto`` are on ``[1, inf)``:
  add 1 for theirs.)

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.pareto(3.0, size=4).min() >= 0)
    True
  """
  return _fdraw("pareto", key, _lomax, (a,), size, dtype, spec)


def weibull(a, size: Size = None, key: Any = None, dtype: Any = None,
            spec: Any = None):
  """Weibull samples with shape ``a`` and scale 1.

  Example:
    >>> import brainshard as bs
    >>> bs.random.weibull(1.5, size=2).shape
    (2,)
  """
  return _fdraw("weibull", key, _weibull, (a,), size, dtype, spec)


def truncated_normal(lower, upper, size: Size = None, loc=0.0, scale=1.0,
                     key: Any = None, dtype: Any = None,
                     check_valid: bool = True, spec: Any = None):
  """Normal(``loc``, ``scale``) samples conditioned on ``[lower, upper]``.

  ``lower`` and ``upper`` are in the samples' units (brainstate's order).
  As brainstate's, a concrete ``loc`` more than 2 ``scale`` outside
  ``[lower, upper]`` raises (the draw loses accuracy there) unless
  ``check_valid=False``.

  Example:
    >>> import brainshard as bs
    >>> x = bs.random.truncated_normal(-1.0, 2.0, size=100)
    >>> bool((x >= -1).all() and (x <= 2).all())
    True
  """
  if check_valid:
    check("truncated_normal",
          lambda lo, hi, m, s: (m >= lo - 2 * s) & (m <= hi + 2 * s),
          "loc is more than 2 scale outside [lower, upper]", lower, upper,
          _or(loc, 0.0), _or(scale, 1.0))
  return _fdraw("truncated_normal", key, _truncated_normal,
                (lower, upper, _or(loc, 0.0), _or(scale, 1.0)), size, dtype, spec)


def multivariate_normal(mean, cov, size: Size = None, method: str = "cholesky",
                        key: Any = None, dtype: Any = None, spec: Any = None):
  """Samples of shape ``size + (d,)`` from N(``mean``, ``cov``).

  ``method``: ``'cholesky'``, ``'eigh'`` or ``'svd'`` (as jax.random's).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.random.multivariate_normal(jnp.zeros(2), jnp.eye(2), size=5).shape
    (5, 2)
  """
  if method not in ("cholesky", "eigh", "svd"):
    raise ValueError("bs.random.multivariate_normal: method must be one of "
                     f"'cholesky', 'eigh', 'svd'; got {method!r}.")
  mshape, cshape = np.shape(as_param(mean)), np.shape(as_param(cov))
  if len(mshape) < 1 or len(cshape) < 2 or cshape[-2:] != mshape[-1:] * 2:
    raise ValueError(
        "bs.random.multivariate_normal: mean must have shape (..., d) and cov "
        f"(..., d, d); got {mshape} and {cshape}.")
  if size is None:
    batch = np.broadcast_shapes(np.shape(mean)[:-1], np.shape(cov)[:-2])
  else:
    batch = _shape(size)
  d = np.shape(mean)[-1]
  return draw("multivariate_normal", key, _mvn, (mean, cov), batch,
              _float_dtype(dtype, mean, cov), spec=spec, ranks=(1, 2),
              event=(d,), bits_event=(d,), method=method)


def dirichlet(alpha, size: Size = None, key: Any = None, dtype: Any = None,
              spec: Any = None):
  """Samples of shape ``size + (k,)`` on the simplex, for ``k`` weights.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> x = bs.random.dirichlet(jnp.ones(3), size=4)
    >>> x.shape, bool(jnp.allclose(x.sum(-1), 1.0))
    ((4, 3), True)
  """
  batch = np.shape(alpha)[:-1] if size is None else _shape(size)
  return draw("dirichlet", key, _dirichlet, (alpha,), batch,
              _float_dtype(dtype, alpha), spec=spec, ranks=(1,),
              event=np.shape(alpha)[-1:])
