"""Discrete, combinatorial and NumPy-convenience draws of :mod:`brainshard.random`.

All go through ``random_draw.draw`` (the one draw path), so inside
``bs.shard_map`` each draws its block of the unsharded draw (``spec=``);
permutations and choice without replacement need the permuted axis whole.
Integer
results default to ``int32`` (as :func:`~brainshard.random.randint` and
:func:`~brainshard.random.poisson`), where ``jax.random`` returns floats.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._simulation.random import counts
from brainshard._simulation.random import small as random_small
from brainshard._simulation.random.params import (
    Size, _float_dtype, _shape, as_param, check)
from brainshard._simulation.random.blocks import per_element
from brainshard._simulation.random.draw import _from_table, draw, randint
from brainshard._simulation.random.samplers import _loc_scale

SHARED = 64  # the event rank of a parameter every element shares (choice's a)

__all__ = [
    "rand", "randn", "random", "random_sample", "choice", "permutation",
    "shuffle", "binomial", "multinomial", "categorical", "geometric",
    "negative_binomial", "hypergeometric", "rand_like", "randn_like",
    "randint_like",
]


def _int(dtype):
  return jnp.int32 if dtype is None else dtype


# ----------------------------------------------------------------------------
# Raw samplers


def _uniform01(key, *, shape, dtype):
  return jax.random.uniform(key, shape, dtype)


def _binomial(key, n, p, *, shape, dtype):
  return counts.binomial(key, n, p, shape, dtype)


def _multinomial(key, n, p, *, shape, dtype):
  return counts.multinomial(key, n, p, shape + p.shape[-1:], dtype)


def _categorical(key, logits, *, shape, dtype):
  # jax.random.categorical(axis=-1): gumbel noise at shape + (k,), argmax
  g = jax.random.gumbel(key, shape + logits.shape[-1:], logits.dtype)
  return jnp.argmax(g + logits, -1).astype(dtype)


def _geometric(key, p, *, shape, dtype):
  return jax.random.geometric(key, p, shape, dtype)


def _negative_binomial(key, n, p, *, shape, dtype):
  # Exact gamma-Poisson mixture: failures before the n-th success.
  k1, k2 = jax.random.split(key)
  g = per_element(lambda k, n: jax.random.gamma(k, n), k1, (n,), shape)
  return counts.poisson(k2, g * (1 - p) / p, shape, dtype)


def _hypergeometric(key, ngood, nbad, nsample, *, shape, dtype):
  return counts.hypergeometric(key, ngood, nbad, nsample, shape, dtype)


# ----------------------------------------------------------------------------
# NumPy conveniences


def random_sample(size: Size = None, key: Any = None, dtype: Any = None,
                  spec: Any = None):
  """Uniform samples in ``[0, 1)`` (``numpy.random.random_sample``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.random_sample((2, 2)).shape
    (2, 2)
  """
  return draw("random_sample", key, _uniform01, (), _shape(size),
              _float_dtype(dtype), spec=spec)


def random(size: Size = None, key: Any = None, dtype: Any = None,
           spec: Any = None):
  """Uniform samples in ``[0, 1)`` (``numpy.random.random``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.random().shape
    ()
  """
  return draw("random", key, _uniform01, (), _shape(size), _float_dtype(dtype),
              spec=spec)


def rand(*dn: int, key: Any = None, dtype: Any = None, spec: Any = None):
  """Uniform samples in ``[0, 1)`` of shape ``dn`` (``numpy.random.rand``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.rand(2, 3).shape
    (2, 3)
  """
  return draw("rand", key, _uniform01, (), _shape(dn), _float_dtype(dtype),
              spec=spec)


def randn(*dn: int, key: Any = None, dtype: Any = None, spec: Any = None):
  """Standard normal samples of shape ``dn`` (``numpy.random.randn``).

  Example:
    >>> import brainshard as bs
    >>> bs.random.randn(4).shape
    (4,)
  """
  return draw("randn", key, _loc_scale, (0.0, 1.0), _shape(dn),
              _float_dtype(dtype), spec=spec, std=jax.random.normal)


def rand_like(input, *, dtype: Any = None, key: Any = None, spec: Any = None):
  """Uniform ``[0, 1)`` samples with ``input``'s shape (and float dtype).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.random.rand_like(jnp.zeros((2, 3))).shape
    (2, 3)
  """
  return draw("rand_like", key, _uniform01, (), np.shape(input),
              _float_dtype(dtype, input), spec=spec)


def randn_like(input, *, dtype: Any = None, key: Any = None, spec: Any = None):
  """Standard normal samples with ``input``'s shape (and float dtype).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.random.randn_like(jnp.zeros(3)).shape
    (3,)
  """
  return draw("randn_like", key, _loc_scale, (0.0, 1.0), np.shape(input),
              _float_dtype(dtype, input), spec=spec, std=jax.random.normal)


def randint_like(input, low=None, high=None, *, dtype: Any = None,
                 key: Any = None, spec: Any = None):
  """Integers in ``[low, high)`` (``[0, low)`` without ``high``; without
  either, brainstate's ``[0, max(input))``) shaped like ``input``, in
  ``input``'s dtype (a float template gets integer values as floats).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.random.randint_like(jnp.zeros((2,)), 5).shape
    (2,)
  """
  if low is None:
    low = 0 if high is not None else jnp.max(jnp.asarray(input))
  dtype = jnp.result_type(input) if dtype is None else jnp.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.integer):
    return randint(low, high, np.shape(input), key=key, dtype=dtype, spec=spec)
  # a float template keeps its dtype (brainstate's): integers, then cast
  out = randint(low, high, np.shape(input), key=key, spec=spec)
  return out.astype(dtype)


def choice(a, size: Size = None, replace: bool = True, p=None, key: Any = None,
           axis: int = 0, spec: Any = None):
  """Samples from ``a`` (an array, or ``arange(a)`` for an int), as numpy's.

  Inside ``bs.shard_map``, ``spec=`` is over the drawn shape ``size``;
  without replacement that shape must be whole on every shard.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> x = bs.random.choice(10, size=5, replace=False)
    >>> x.shape, len(set(x.tolist()))
    ((5,), 5)
  """
  if isinstance(a, (list, tuple, np.ndarray)) and (
      np.asarray(a).dtype.kind not in "biufc"):
    # strings or objects (numpy's choice takes them): draw indices, pick
    # on the host
    items = np.asarray(a)
    picks = choice(len(items), size, replace, p, key, axis, spec)
    return np.take(items, np.asarray(picks), axis)
  rule = {} if replace else dict(
      blocked=False, unsplit=("draws without replacement", None))
  if isinstance(a, (int, np.integer)):  # static: jax.random.choice needs it
    return draw("choice", key, _choice_int, (p,), _shape(size), None,
                spec=spec, ranks=(SHARED,), replace=replace, axis=axis,
                a=int(a), **rule)
  return draw("choice", key, _choice_array, (a, p), _shape(size), None,
              spec=spec, ranks=(SHARED, SHARED), replace=replace, axis=axis,
              **rule)


def _choice_array(key, a, p, *, shape, dtype, replace, axis):
  return jax.random.choice(key, a, shape, replace, p, axis)


def _choice_int(key, p, *, shape, dtype, replace, axis, a):
  return jax.random.choice(key, a, shape, replace, p, axis)


def _sort_keys(key, *, shape, dtype):
  return tuple(jax.random.bits(jax.random.fold_in(key, r), shape)
               for r in range(2))


def permutation(x, axis: int = 0, independent: bool = False, key: Any = None,
                spec: Any = None):
  """A permuted copy of ``x`` (or of ``arange(x)`` for an int).

  Inside ``bs.shard_map`` ``x`` is this shard's block and ``spec=`` its
  layout; the permuted ``axis`` must be whole on every shard (the default
  spec splits axis 0: pass ``spec=P()`` to permute a replicated ``x``).

  Example:
    >>> import brainshard as bs
    >>> sorted(bs.random.permutation(5).tolist())
    [0, 1, 2, 3, 4]
  """
  if isinstance(x, (int, np.integer)):
    x = np.arange(int(x))
  x = jnp.asarray(x)
  axis = axis % max(x.ndim, 1)
  rule = ("permutes", (axis,))
  if not independent:
    return draw("permutation", key, _permutation, (x,), x.shape, None,
                spec=spec, ranks=(SHARED,), unsplit=rule, blocked=False,
                axis=axis)
  # Each slice along ``axis`` its own order: sort keys are bits at x's
  # shape, so every shard's keys are its block of the unsharded ones.
  for bits in draw("permutation", key, _sort_keys, (), x.shape, None,
                   spec=spec, unsplit=rule):
    x = jax.lax.sort_key_val(bits, x, axis)[1]
  return x


def _permutation(key, x, *, shape, dtype, axis):
  return jax.random.permutation(key, x, axis)


def shuffle(x, axis: int = 0, key: Any = None, spec: Any = None):
  """``x`` shuffled along ``axis``, returned (JAX arrays cannot be shuffled
  in place as ``numpy.random.shuffle`` does).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> sorted(bs.random.shuffle(jnp.arange(4)).tolist())
    [0, 1, 2, 3]
  """
  return permutation(x, axis=axis, key=key, spec=spec)


# ----------------------------------------------------------------------------
# Discrete distributions


def binomial(n, p, size: Size = None, key: Any = None, dtype: Any = None,
             check_valid: bool = True, spec: Any = None):
  """Successes in ``n`` trials of probability ``p``, exact: concrete small
  ``n, p`` by inversion against a host-built table (``random_small``),
  otherwise the exact loop of ``random_counts``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.binomial(10, 0.5, size=3).dtype
    dtype('int32')
  """
  if check_valid:
    check("binomial", lambda p: (p >= 0) & (p <= 1), "p must be in [0, 1]", p)
  table = random_small.binomial_plan(as_param(n), as_param(p))
  if table is not None:
    return _from_table("binomial", np.moveaxis(table, 0, -1),
                       _shape(size, n, p), key, dtype, spec)
  return draw("binomial", key, _binomial, (n, p), _shape(size, n, p),
              _int(dtype), spec=spec)


def multinomial(n, pvals, size: Size = None, key: Any = None, dtype: Any = None,
                check_valid: bool = True, spec: Any = None):
  """Counts of shape ``size + (k,)`` over ``k`` outcomes summing to ``n``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> x = bs.random.multinomial(10, jnp.array([0.2, 0.8]), size=3)
    >>> x.shape, x.sum(-1).tolist()
    ((3, 2), [10, 10, 10])
  """
  if check_valid:  # numpy's rule, with room for float32 rounding
    check("multinomial", lambda p: p[..., :-1].sum(-1) <= 1 + 1e-6,
          "sum(pvals[..., :-1]) must be <= 1", pvals)
  k = np.shape(as_param(pvals))[-1]
  batch = (np.broadcast_shapes(np.shape(n), np.shape(pvals)[:-1])
           if size is None else _shape(size))
  return draw("multinomial", key, _multinomial, (n, pvals), batch, _int(dtype),
              spec=spec, ranks=(0, 1), event=(k,))


def categorical(logits, axis: int = -1, size: Size = None, key: Any = None,
                spec: Any = None):
  """Indices drawn with probabilities ``softmax(logits)`` along ``axis``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.random.categorical(jnp.zeros((4, 3))).shape
    (4,)
  """
  logits = jnp.moveaxis(jnp.asarray(logits), axis, -1)
  shape = logits.shape[:-1] if size is None else _shape(size)
  return draw("categorical", key, _categorical, (logits,), tuple(shape),
              jnp.int32, spec=spec, ranks=(1,), bits_event=logits.shape[-1:])


def geometric(p, size: Size = None, key: Any = None, dtype: Any = None,
              spec: Any = None):
  """Trials up to and including the first success (support 1, 2, ...).

  Example:
    >>> import brainshard as bs
    >>> bool(bs.random.geometric(0.5, size=5).min() >= 1)
    True
  """
  check("geometric", lambda p: (p > 0) & (p <= 1), "p must be in (0, 1]", p)
  return draw("geometric", key, _geometric, (p,), _shape(size, p), _int(dtype),
              spec=spec)


def negative_binomial(n, p, size: Size = None, key: Any = None,
                      dtype: Any = None, spec: Any = None):
  """Failures before the ``n``-th success (numpy's convention), drawn
  exactly as a gamma-Poisson mixture.

  Example:
    >>> import brainshard as bs
    >>> bs.random.negative_binomial(3, 0.5, size=2).shape
    (2,)
  """
  return draw("negative_binomial", key, _negative_binomial, (n, p),
              _shape(size, n, p), _int(dtype), spec=spec)


def hypergeometric(ngood, nbad, nsample, size: Size = None, key: Any = None,
                   dtype: Any = None, spec: Any = None):
  """Good items among ``nsample`` drawn without replacement from ``ngood``
  good and ``nbad`` bad ones (exact; the draw loops ``max(nsample)`` steps).

  Example:
    >>> import brainshard as bs
    >>> x = bs.random.hypergeometric(5, 5, 3, size=4)
    >>> bool((x >= 0).all() and (x <= 3).all())
    True
  """
  return draw("hypergeometric", key, _hypergeometric, (ngood, nbad, nsample),
              _shape(size, ngood, nbad, nsample), _int(dtype), spec=spec)
