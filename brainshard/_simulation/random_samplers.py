"""The NumPy-style samplers of :mod:`brainshard.random`, on one draw path.

Every sampler here is a pure function ``raw(key, *params, shape, dtype,
...)`` of a key and its parameters, and :func:`draw` runs it: it takes the
key exactly as the core draws do (``random._key``: split off the
RandomState under ``SLOT_LOCK``, folded with the shard / vmap-member index)
and calls the sampler through one ``jax.jit`` keyed by the sampler, shape,
dtype and options, so an eager draw compiles once per kind and shape and a
traced draw is inlined. A new sampler is a raw function and a few lines of
argument conventions (``numpy.random``'s names, brainstate's ``None``
defaults).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core import compat
from brainshard._simulation.random import Size, _float_dtype, _key, _shape

__all__ = [
    "draw", "standard_normal", "standard_exponential", "standard_gamma",
    "standard_cauchy", "standard_t", "exponential", "gamma", "beta",
    "chisquare", "lognormal", "laplace", "logistic", "gumbel", "pareto",
    "weibull", "truncated_normal", "multivariate_normal", "dirichlet",
]


@functools.partial(jax.jit, static_argnames=("fn", "shape", "dtype", "opts"))
def _run(key, *params, fn, shape, dtype, opts):
  params = jax.tree.map(functools.partial(_like_key, key, dtype), params)
  return fn(key, *params, shape=shape, dtype=dtype, **dict(opts))


def _like_key(key, dtype, x):
  """A parameter in the draw's float dtype (jax.random refuses to narrow),
  varying over the mesh axes the per-shard key varies over: inside
  ``shard_map`` jax.random's own loops (binomial's) need one carry type."""
  if dtype is not None and jnp.issubdtype(dtype, jnp.floating) and \
      jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(dtype)
  missing = compat.varying_axes(jax.typeof(key)) - compat.varying_axes(
      jax.typeof(x))
  if missing:
    x = jax.lax.pcast(x, tuple(sorted(missing)), to="varying")
  return x


def draw(where: str, key: Any, fn, params: tuple, shape: tuple[int, ...],
         dtype: Any, **opts: Any) -> jax.Array:
  """Runs sampler ``fn`` on the key a draw uses (see the module docstring).

  ``opts`` are static (hashable) options of the sampler.
  """
  dtype = None if dtype is None else jnp.dtype(dtype)
  return _run(_key(key, where), *params, fn=fn, shape=tuple(shape),
              dtype=dtype, opts=tuple(sorted(opts.items())))


def _or(x, default):
  """brainstate spells a default parameter ``None``."""
  return default if x is None else x


def _fdraw(where, key, fn, params, size: Size, dtype, **opts):
  """A float draw whose shape (``size=None``) broadcasts ``params``."""
  return draw(where, key, fn, params, _shape(size, *params),
              _float_dtype(dtype, *params), **opts)


# ----------------------------------------------------------------------------
# Raw samplers: pure functions of a key (shape and dtype static)


def _loc_scale(key, loc, scale, *, shape, dtype, std):
  return (loc + scale * std(key, shape, dtype)).astype(dtype)


def _gamma(key, a, scale, *, shape, dtype):
  return (jax.random.gamma(key, a, shape, dtype) * scale).astype(dtype)


def _beta(key, a, b, *, shape, dtype):
  return jax.random.beta(key, a, b, shape, dtype)


def _chisquare(key, df, *, shape, dtype):
  return jax.random.chisquare(key, df, shape, dtype)


def _t(key, df, *, shape, dtype):
  return jax.random.t(key, df, shape, dtype)


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
  return jax.random.dirichlet(key, alpha, shape, dtype)


def _cauchy(key, shape, dtype):
  return jax.random.cauchy(key, shape, dtype)


# ----------------------------------------------------------------------------
# Continuous distributions (numpy.random's names and argument order)


def standard_normal(size: Size = None, key: Any = None, dtype: Any = None):
  """Standard normal samples (``numpy.random.standard_normal``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_normal(size=(2, 3)).shape
    (2, 3)
  """
  return _fdraw("standard_normal", key, _loc_scale, (0.0, 1.0), size, dtype,
                std=jax.random.normal)


def standard_exponential(size: Size = None, key: Any = None, dtype: Any = None):
  """Exponential samples with scale 1.

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.standard_exponential(size=4).min() >= 0)
    True
  """
  return _fdraw("standard_exponential", key, _loc_scale, (0.0, 1.0), size,
                dtype, std=jax.random.exponential)


def standard_cauchy(size: Size = None, key: Any = None, dtype: Any = None):
  """Cauchy samples with location 0 and scale 1.

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_cauchy(size=3).shape
    (3,)
  """
  return _fdraw("standard_cauchy", key, _loc_scale, (0.0, 1.0), size, dtype,
                std=_cauchy)


def exponential(scale=1.0, size: Size = None, key: Any = None, dtype: Any = None):
  """Exponential samples with mean ``scale`` (numpy's parameter, not a rate).

  Example:
    >>> import brainshard as bs
    >>> bs.random.exponential(2.0, size=(3,)).shape
    (3,)
  """
  return _fdraw("exponential", key, _loc_scale, (0.0, _or(scale, 1.0)), size,
                dtype, std=jax.random.exponential)


def laplace(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
            dtype: Any = None):
  """Laplace (double exponential) samples.

  Example:
    >>> import brainshard as bs
    >>> bs.random.laplace(1.0, 2.0, size=2).shape
    (2,)
  """
  return _fdraw("laplace", key, _loc_scale, (_or(loc, 0.0), _or(scale, 1.0)),
                size, dtype, std=jax.random.laplace)


def logistic(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
             dtype: Any = None):
  """Logistic samples.

  Example:
    >>> import brainshard as bs
    >>> bs.random.logistic(size=2).shape
    (2,)
  """
  return _fdraw("logistic", key, _loc_scale, (_or(loc, 0.0), _or(scale, 1.0)),
                size, dtype, std=jax.random.logistic)


def gumbel(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
           dtype: Any = None):
  """Gumbel (type I extreme value) samples.

  Example:
    >>> import brainshard as bs
    >>> bs.random.gumbel(size=2).shape
    (2,)
  """
  return _fdraw("gumbel", key, _loc_scale, (_or(loc, 0.0), _or(scale, 1.0)),
                size, dtype, std=jax.random.gumbel)


def gamma(shape, scale=1.0, size: Size = None, key: Any = None,
          dtype: Any = None):
  """Gamma samples with shape ``shape`` and scale ``scale`` (numpy's order).

  Example:
    >>> import brainshard as bs
    >>> bs.random.gamma(2.0, 0.5, size=(2, 2)).shape
    (2, 2)
  """
  return _fdraw("gamma", key, _gamma, (shape, _or(scale, 1.0)), size, dtype)


def standard_gamma(shape, size: Size = None, key: Any = None, dtype: Any = None):
  """Gamma samples with scale 1.

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_gamma(3.0, size=2).shape
    (2,)
  """
  return _fdraw("standard_gamma", key, _gamma, (shape, 1.0), size, dtype)


def beta(a, b, size: Size = None, key: Any = None, dtype: Any = None):
  """Beta samples on ``[0, 1]``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.beta(2.0, 3.0, size=3).shape
    (3,)
  """
  return _fdraw("beta", key, _beta, (a, b), size, dtype)


def chisquare(df, size: Size = None, key: Any = None, dtype: Any = None):
  """Chi-square samples with ``df`` degrees of freedom.

  Example:
    >>> import brainshard as bs
    >>> bs.random.chisquare(4.0, size=2).shape
    (2,)
  """
  return _fdraw("chisquare", key, _chisquare, (df,), size, dtype)


def standard_t(df, size: Size = None, key: Any = None, dtype: Any = None):
  """Student's t samples with ``df`` degrees of freedom.

  Example:
    >>> import brainshard as bs
    >>> bs.random.standard_t(5.0, size=2).shape
    (2,)
  """
  return _fdraw("standard_t", key, _t, (df,), size, dtype)


def lognormal(mean=0.0, sigma=1.0, size: Size = None, key: Any = None,
              dtype: Any = None):
  """``exp`` of normal samples with mean ``mean`` and std ``sigma``.

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.lognormal(size=3).min() > 0)
    True
  """
  return _fdraw("lognormal", key, _lognormal, (_or(mean, 0.0), _or(sigma, 1.0)),
                size, dtype)


def pareto(a, size: Size = None, key: Any = None, dtype: Any = None):
  """Pareto II (Lomax) samples on ``[0, inf)``, as ``numpy.random.pareto``.

  (``jax.random.pareto`` and brainstate's ``pareto`` are on ``[1, inf)``:
  add 1 for theirs.)

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.pareto(3.0, size=4).min() >= 0)
    True
  """
  return _fdraw("pareto", key, _lomax, (a,), size, dtype)


def weibull(a, size: Size = None, key: Any = None, dtype: Any = None):
  """Weibull samples with shape ``a`` and scale 1.

  Example:
    >>> import brainshard as bs
    >>> bs.random.weibull(1.5, size=2).shape
    (2,)
  """
  return _fdraw("weibull", key, _weibull, (a,), size, dtype)


def truncated_normal(lower, upper, size: Size = None, loc=0.0, scale=1.0,
                     key: Any = None, dtype: Any = None):
  """Normal(``loc``, ``scale``) samples conditioned on ``[lower, upper]``.

  ``lower`` and ``upper`` are in the samples' units (brainstate's order).

  Example:
    >>> import brainshard as bs
    >>> x = bs.random.truncated_normal(-1.0, 2.0, size=100)
    >>> bool((x >= -1).all() and (x <= 2).all())
    True
  """
  return _fdraw("truncated_normal", key, _truncated_normal,
                (lower, upper, _or(loc, 0.0), _or(scale, 1.0)), size, dtype)


def multivariate_normal(mean, cov, size: Size = None, method: str = "cholesky",
                        key: Any = None, dtype: Any = None):
  """Samples of shape ``size + (d,)`` from N(``mean``, ``cov``).

  ``method``: ``'cholesky'``, ``'eigh'`` or ``'svd'`` (as jax.random's).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.random.multivariate_normal(jnp.zeros(2), jnp.eye(2), size=5).shape
    (5, 2)
  """
  if size is None:
    batch = np.broadcast_shapes(np.shape(mean)[:-1], np.shape(cov)[:-2])
  else:
    batch = _shape(size)
  return draw("multivariate_normal", key, _mvn, (mean, cov), batch,
              _float_dtype(dtype, mean, cov), method=method)


def dirichlet(alpha, size: Size = None, key: Any = None, dtype: Any = None):
  """Samples of shape ``size + (k,)`` on the simplex, for ``k`` weights.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> x = bs.random.dirichlet(jnp.ones(3), size=4)
    >>> x.shape, bool(jnp.allclose(x.sum(-1), 1.0))
    ((4, 3), True)
  """
  batch = np.shape(alpha)[:-1] if size is None else _shape(size)
  return draw("dirichlet", key, _dirichlet, (alpha,), batch,
              _float_dtype(dtype, alpha))
