"""NumPy-style random draws that work under brainshard transforms.

Draws come from a default :class:`~brainshard.RandomState` unless ``key=``
is given (a RandomState, which advances, or a key array, used as is). Inside
``bs.shard_map`` draws from a RandomState differ on every shard; a key
array passed as ``key=`` is used unchanged on every shard. Every function is
also a method of :class:`~brainshard.RandomState` (``rng.gamma(2.0)``).

Names and argument order are ``numpy.random``'s (``size=`` is the output
shape; ``None`` gives the parameters' broadcast shape, a scalar for scalar
parameters); brainstate's ``None`` defaults (``normal(loc=None)``) are
accepted. Differences from NumPy: :func:`shuffle` returns the shuffled
array (JAX arrays are immutable); integer draws default to ``int32``.
:func:`pareto` is NumPy's Pareto II (Lomax, on ``[0, inf)``), where
brainstate's follows ``jax.random.pareto`` on ``[1, inf)``.
:func:`negative_binomial` is an exact gamma-Poisson mixture and
:func:`hypergeometric` an exact sequential draw (``jax.random`` has neither).
Inside ``bs.shard_map`` the count samplers (poisson, binomial, multinomial,
negative_binomial) run exact loops of their own, because ``jax.random``'s
loops fail with a per-shard key. No sampler of the list in issue 15 is
missing.

Example:
  >>> import brainshard as bs
  >>> bs.random.seed(0)
  >>> x = bs.random.normal(size=(2, 3))
  >>> x.shape
  (2, 3)
  >>> bs.random.gamma(2.0, size=None).shape   # numpy: a scalar
  ()
"""

from brainshard._simulation.random import (
    DEFAULT_SEED, RandomState, bernoulli, default_state, normal, poisson,
    randint, seed, split_key, uniform)
from brainshard._simulation.random_samplers import (
    beta, chisquare, dirichlet, exponential, gamma, gumbel, laplace,
    logistic, lognormal, multivariate_normal, pareto, standard_cauchy,
    standard_exponential, standard_gamma, standard_normal, standard_t,
    truncated_normal, weibull)
from brainshard._simulation.random_discrete import (
    binomial, categorical, choice, geometric, hypergeometric, multinomial,
    negative_binomial, permutation, rand, rand_like, randint_like, randn,
    randn_like, random, random_sample, shuffle)

__all__ = [
    "RandomState", "default_state", "seed", "split_key", "normal", "uniform",
    "bernoulli", "poisson", "randint", "DEFAULT_SEED",
    # numpy.random's surface
    "rand", "randn", "random", "random_sample", "choice", "permutation",
    "shuffle", "exponential", "gamma", "beta", "binomial", "multinomial",
    "categorical", "truncated_normal", "lognormal", "laplace", "logistic",
    "gumbel", "pareto", "weibull", "chisquare", "standard_normal",
    "standard_exponential", "standard_gamma", "standard_cauchy",
    "standard_t", "multivariate_normal", "dirichlet", "geometric",
    "negative_binomial", "hypergeometric", "rand_like", "randn_like",
    "randint_like",
]
