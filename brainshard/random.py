"""NumPy-style random draws that work under brainshard transforms.

Draws come from a default :class:`~brainshard.RandomState` unless ``key=``
is given (a RandomState, which advances, or a key array, used as is). Every
function is also a method of :class:`~brainshard.RandomState`
(``rng.gamma(2.0)``).

Inside ``bs.shard_map`` a draw is this shard's block of the unsharded draw:
``size`` is the per-shard shape and ``spec=`` (a PartitionSpec over the
global shape; default: the leading axis split over all manual mesh axes)
says which block, so the same seed gives the same numbers on any mesh.
Elementwise samplers (all but the ones below) work with any spec;
:func:`permutation`, :func:`shuffle` and ``choice(replace=False)`` need the
permuted axis whole, :func:`multinomial`, :func:`dirichlet` and
:func:`multivariate_normal` their event (last) axis (a spec splitting it
raises). Samplers that reject (gamma, beta, chisquare, standard_t,
dirichlet, negative_binomial) give each element its own key; the count
samplers (poisson, binomial, multinomial, hypergeometric) run exact loops
whose steps draw whole blocks, or, for poisson and binomial at small rates
known at trace time, invert one uniform per element against a table
(:func:`poisson_table`, :func:`from_table`).

Names and argument order are ``numpy.random``'s (``size=`` is the output
shape; ``None`` gives the parameters' broadcast shape, a scalar for scalar
parameters); brainstate's ``None`` defaults (``normal(loc=None)``) are
accepted. Differences from NumPy: :func:`shuffle` returns the shuffled
array (JAX arrays are immutable); integer draws default to ``int32``.
:func:`pareto` is NumPy's Pareto II (Lomax, on ``[0, inf)``), where
brainstate's follows ``jax.random.pareto`` on ``[1, inf)``.
:func:`negative_binomial` is an exact gamma-Poisson mixture and
:func:`hypergeometric` an exact sequential draw (``jax.random`` has neither).

Example:
  >>> import brainshard as bs
  >>> bs.random.seed(0)
  >>> x = bs.random.normal(size=(2, 3))
  >>> x.shape
  (2, 3)
  >>> bs.random.gamma(2.0, size=None).shape   # numpy: a scalar
  ()
"""

from brainshard._simulation.random.state import (
    DEFAULT_SEED, RandomState, default_state, seed, split_key)
from brainshard._simulation.random.draw import (
    bernoulli, from_table, normal, poisson, randint, uniform)
from brainshard._simulation.random.small import binomial_table, poisson_table
from brainshard._simulation.random.samplers import (
    beta, chisquare, dirichlet, exponential, gamma, gumbel, laplace,
    logistic, lognormal, multivariate_normal, pareto, standard_cauchy,
    standard_exponential, standard_gamma, standard_normal, standard_t,
    truncated_normal, weibull)
from brainshard._simulation.random.discrete import (
    binomial, categorical, choice, geometric, hypergeometric, multinomial,
    negative_binomial, permutation, rand, rand_like, randint_like, randn,
    randn_like, random, random_sample, shuffle)
from brainshard._simulation.random.extra_api import (
    f, loggamma, logseries, maxwell, noncentral_chisquare, noncentral_f,
    orthogonal, power, random_integers, ranf, rayleigh, sample, t,
    triangular, vonmises, wald, weibull_min, zipf)

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
    "randint_like", "f", "noncentral_chisquare", "noncentral_f", "power",
    "rayleigh", "triangular", "wald", "logseries", "zipf", "vonmises",
    "random_integers", "ranf", "sample",
    # exact small-rate counts from a table built once on the host
    "poisson_table", "binomial_table", "from_table",
    # brainstate's names beyond numpy.random
    "t", "maxwell", "loggamma", "weibull_min", "orthogonal",
]
