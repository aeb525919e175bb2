"""bs.random's numpy.random surface: each sampler's distribution (KS tests
against scipy, or exact pmfs), numpy's shape conventions, reproducibility,
independent numbers on every shard and vmap member, and every transform."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from conftest import make_mesh

stats = pytest.importorskip("scipy.stats")

N = 40_000
R = bs.random

# name -> (draw(size, key), scipy frozen distribution)
CONTINUOUS = {
    "standard_normal": (lambda s, k: R.standard_normal(s, key=k), stats.norm()),
    "randn": (lambda s, k: R.randn(s, key=k), stats.norm()),
    "random": (lambda s, k: R.random(s, key=k), stats.uniform()),
    "random_sample": (lambda s, k: R.random_sample(s, key=k), stats.uniform()),
    "rand": (lambda s, k: R.rand(s, key=k), stats.uniform()),
    "standard_exponential": (lambda s, k: R.standard_exponential(s, key=k),
                             stats.expon()),
    "standard_cauchy": (lambda s, k: R.standard_cauchy(s, key=k), stats.cauchy()),
    "exponential": (lambda s, k: R.exponential(2.0, s, key=k),
                    stats.expon(scale=2.0)),
    "laplace": (lambda s, k: R.laplace(1.0, 2.0, s, key=k), stats.laplace(1, 2)),
    "logistic": (lambda s, k: R.logistic(1.0, 2.0, s, key=k),
                 stats.logistic(1, 2)),
    "gumbel": (lambda s, k: R.gumbel(1.0, 2.0, s, key=k), stats.gumbel_r(1, 2)),
    "gamma": (lambda s, k: R.gamma(2.5, 0.5, s, key=k),
              stats.gamma(2.5, scale=0.5)),
    "standard_gamma": (lambda s, k: R.standard_gamma(3.0, s, key=k),
                       stats.gamma(3.0)),
    "beta": (lambda s, k: R.beta(2.0, 3.0, s, key=k), stats.beta(2, 3)),
    "chisquare": (lambda s, k: R.chisquare(4.0, s, key=k), stats.chi2(4)),
    "standard_t": (lambda s, k: R.standard_t(5.0, s, key=k), stats.t(5)),
    "lognormal": (lambda s, k: R.lognormal(0.5, 0.7, s, key=k),
                  stats.lognorm(0.7, scale=np.exp(0.5))),
    "pareto": (lambda s, k: R.pareto(3.0, s, key=k), stats.lomax(3.0)),
    "weibull": (lambda s, k: R.weibull(1.5, s, key=k), stats.weibull_min(1.5)),
    "truncated_normal": (
        lambda s, k: R.truncated_normal(-1.0, 2.0, s, loc=0.5, scale=2.0, key=k),
        stats.truncnorm(-0.75, 0.75, loc=0.5, scale=2.0)),
    "normal": (lambda s, k: R.normal(None, None, s, key=k), stats.norm()),
}

# name -> (draw(size, key), scipy frozen discrete distribution)
DISCRETE = {
    "binomial": (lambda s, k: R.binomial(10, 0.3, s, key=k), stats.binom(10, 0.3)),
    "geometric": (lambda s, k: R.geometric(0.3, s, key=k), stats.geom(0.3)),
    "negative_binomial": (lambda s, k: R.negative_binomial(3, 0.4, s, key=k),
                          stats.nbinom(3, 0.4)),
    "hypergeometric": (lambda s, k: R.hypergeometric(7, 5, 4, s, key=k),
                       stats.hypergeom(12, 7, 4)),
    "poisson": (lambda s, k: R.poisson(3.0, s, key=k, dtype=None),
                stats.poisson(3.0)),
    "randint": (lambda s, k: R.randint(2, 7, s, key=k), stats.randint(2, 7)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_samplers_follow_their_distribution(name):
  draw, dist = CONTINUOUS[name]
  x = np.asarray(draw(N, bs.RandomState(123)), np.float64)
  assert x.shape == (N,)
  assert stats.kstest(x, dist.cdf).pvalue > 1e-3
  assert x.std() > 0
  # the same seed gives the same numbers
  np.testing.assert_array_equal(draw(N, bs.RandomState(123)), x.astype(np.float32))


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_discrete_samplers_follow_their_pmf(name):
  draw, dist = DISCRETE[name]
  x = np.asarray(draw(N, bs.RandomState(7)))
  assert x.dtype == np.int32
  support = np.arange(x.min(), x.max() + 1)
  freq = (x[:, None] == support).mean(0)
  # sd of a frequency is at most 0.5 / sqrt(N) = 0.0025
  np.testing.assert_allclose(freq, dist.pmf(support), atol=0.012)
  assert dist.pmf(support).sum() > 0.99  # the draws cover the support
  np.testing.assert_array_equal(draw(N, bs.RandomState(7)), x)


@pytest.mark.slow
def test_multivariate_samplers():
  rng = bs.RandomState(3)
  pvals = jnp.array([0.2, 0.3, 0.5])
  m = np.asarray(R.multinomial(10, pvals, size=N, key=rng))
  assert m.shape == (N, 3) and (m.sum(1) == 10).all()
  np.testing.assert_allclose(m.mean(0), 10 * pvals, atol=0.05)
  c = np.asarray(R.categorical(jnp.log(pvals), size=N, key=rng))
  np.testing.assert_allclose(np.bincount(c) / N, pvals, atol=0.01)
  ch = np.asarray(R.choice(jnp.array([5, 6, 7]), size=N, p=pvals, key=rng))
  np.testing.assert_allclose([(ch == v).mean() for v in (5, 6, 7)], pvals,
                             atol=0.01)
  alpha = jnp.array([1.0, 2.0, 5.0])
  d = np.asarray(R.dirichlet(alpha, size=N, key=rng))
  np.testing.assert_allclose(d.sum(1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(d.mean(0), alpha / alpha.sum(), atol=0.005)
  mean = jnp.array([1.0, -2.0])
  cov = jnp.array([[2.0, 0.6], [0.6, 1.0]])
  for method in ("cholesky", "eigh", "svd"):
    v = np.asarray(R.multivariate_normal(mean, cov, size=N, method=method,
                                         key=rng))
    np.testing.assert_allclose(v.mean(0), mean, atol=0.03)
    np.testing.assert_allclose(np.cov(v.T), cov, atol=0.05)


@pytest.mark.slow
def test_permutations_and_choice_without_replacement():
  rng = bs.RandomState(1)
  x = jnp.arange(12).reshape(3, 4)
  for out in (R.permutation(x, key=rng), R.shuffle(x, key=rng)):
    assert sorted(map(tuple, np.asarray(out))) == sorted(map(tuple, np.asarray(x)))
  cols = np.asarray(R.permutation(x, axis=1, independent=True, key=rng))
  assert (np.sort(cols, 1) == np.asarray(x)).all()
  # over many draws, where 0 lands is uniform
  firsts = np.asarray(bs.vmap(lambda: R.permutation(5, key=rng),
                              axis_size=5000)())
  assert firsts.shape == (5000, 5)
  np.testing.assert_allclose(np.bincount(np.argmax(firsts == 0, 1)) / 5000,
                             0.2, atol=0.025)
  picks = np.asarray(R.choice(10, size=10, replace=False, key=rng))
  assert sorted(picks.tolist()) == list(range(10))


# ----------------------------------------------------------------------------
# numpy's shape conventions, dtypes and the *_like draws


SHAPED = {**{n: d for n, (d, _) in CONTINUOUS.items()},
          **{n: d for n, (d, _) in DISCRETE.items()}}
SHAPED.pop("rand")
SHAPED.pop("randn")


@pytest.mark.parametrize("size,shape", [(None, ()), (3, (3,)), ((2, 3), (2, 3))])
def test_size_none_int_and_tuple(size, shape):
  # abstract evaluation: the shapes of the very draws, without compiling
  def sh(draw):
    return jax.eval_shape(draw, jax.random.key(0)).shape
  for name, draw in SHAPED.items():
    assert sh(lambda k: draw(size, k)) == shape, name
  assert sh(lambda k: R.rand(key=k)) == () and sh(lambda k: R.randn(2, 3, key=k)) == (2, 3)
  assert sh(lambda k: R.multinomial(5, jnp.ones(4) / 4, size, key=k)) == shape + (4,)
  assert sh(lambda k: R.dirichlet(jnp.ones(4), size, key=k)) == shape + (4,)
  assert sh(lambda k: R.multivariate_normal(jnp.zeros(4), jnp.eye(4), size,
                                            key=k)) == shape + (4,)
  assert sh(lambda k: R.categorical(jnp.zeros(4), size=size, key=k)) == shape
  assert sh(lambda k: R.choice(4, size, key=k)) == shape


@pytest.mark.slow
def test_parameters_broadcast_without_size_and_dtypes():
  key = jax.random.key(0)
  assert R.gamma(jnp.ones((2, 3)), key=key).shape == (2, 3)
  assert R.binomial(jnp.full((4,), 5), 0.5, key=key).shape == (4,)
  assert R.beta(jnp.ones(3), 2.0, dtype=jnp.float16, key=key).dtype == jnp.float16
  assert R.multinomial(5, jnp.ones((2, 3)) / 3, key=key).shape == (2, 3)
  like = jnp.zeros((2, 3), jnp.bfloat16)
  assert R.rand_like(like, key=key).dtype == jnp.bfloat16
  assert R.randn_like(like, key=key).shape == (2, 3)
  r = R.randint_like(jnp.zeros((500,), jnp.int16), 3, 6, key=key)
  assert r.dtype == jnp.int16 and set(np.unique(r).tolist()) == {3, 4, 5}
  # a float template keeps its dtype (brainstate's), the values integers
  f = R.randint_like(jnp.zeros(4), 5, key=key)
  assert f.dtype == jnp.float32 and (np.asarray(f) == np.round(f)).all()
  # without bounds: brainstate's [0, max(input))
  m = np.asarray(R.randint_like(jnp.array([[3, 7], [2, 9]]), key=key))
  assert m.dtype == np.int32 and m.min() >= 0 and m.max() < 9


def test_hypergeometric_with_array_parameters_is_exact_at_the_edges():
  key = jax.random.key(2)
  good = jnp.array([0, 5, 5, 3])
  bad = jnp.array([4, 0, 5, 3])
  n = jnp.array([3, 4, 10, 0])
  x = np.asarray(R.hypergeometric(good, bad, n, key=key))
  np.testing.assert_array_equal(x, [0, 4, 5, 0])


# ----------------------------------------------------------------------------
# seeds, methods, transforms


def test_methods_match_functions():
  rng = bs.RandomState(9)
  np.testing.assert_array_equal(rng.gamma(2.0, size=4),
                                R.gamma(2.0, size=4, key=bs.RandomState(9)))
  # key= draws from that key and leaves the state alone (brainstate's)
  before = np.asarray(jax.random.key_data(rng.value))
  k = jax.random.key(0)
  np.testing.assert_array_equal(rng.beta(1.0, 1.0, key=k),
                                R.beta(1.0, 1.0, key=k))
  np.testing.assert_array_equal(jax.random.key_data(rng.value), before)


def test_seed_without_argument_is_fresh():
  bs.random.seed()
  a = R.rand(4)
  bs.random.seed()
  b = R.rand(4)
  assert not np.array_equal(a, b)
  rng = bs.RandomState(None)
  rng2 = bs.RandomState(None)
  assert not np.array_equal(rng.rand(4), rng2.rand(4))
  bs.random.seed(0)


@pytest.mark.slow
def test_draws_under_jit_loop_vmap_grad_and_jax_jit():
  rng = bs.RandomState(5)
  eager = [rng.gamma(2.0, size=3), rng.binomial(5, 0.5, size=3)]
  rng.seed(5)
  traces = []

  @bs.jit
  def both():
    traces.append(1)
    return rng.gamma(2.0, size=3), rng.binomial(5, 0.5, size=3)

  for a, b in zip(eager, both()):
    np.testing.assert_array_equal(a, b)
  both(), both()
  assert len(traces) <= 2
  # a loop draws what successive eager draws do
  rng.seed(6)
  xs = bs.for_loop(lambda: rng.standard_t(3.0, size=2), length=4)
  rng.seed(6)
  for row in xs:
    np.testing.assert_array_equal(row, rng.standard_t(3.0, size=2))
  # vmap members differ
  rows = np.asarray(bs.vmap(lambda: rng.dirichlet(jnp.ones(3)), axis_size=6)())
  assert len({r.tobytes() for r in rows}) == 6
  # grad through the draw's parameter; the key still advances
  before = jax.random.key_data(rng.value)
  g = bs.grad(lambda s: (s * rng.standard_normal(size=8)).sum(),
              argnums=0)(2.0)
  assert np.isfinite(g)
  assert not np.array_equal(before, jax.random.key_data(rng.value))
  # plain jax.jit with an explicit key array
  k = jax.random.key(3)
  f = jax.jit(lambda k: R.weibull(1.5, size=3, key=k))
  np.testing.assert_array_equal(f(k), R.weibull(1.5, size=3, key=k))


@pytest.mark.slow
def test_shards_draw_independent_reproducible_numbers():
  mesh = make_mesh((8,), ("x",))
  rng = bs.RandomState(0)
  draws = {"gamma": lambda: rng.gamma(2.0, size=(1, 256)),
           "binomial": lambda: rng.binomial(20, 0.5, size=(1, 256)),
           "choice": lambda: rng.choice(1000, size=(1, 256)),
           "hypergeometric": lambda: rng.hypergeometric(30, 30, 20, size=(1, 256))}
  for name, body in draws.items():
    f = bs.shard_map(body, mesh=mesh, in_specs=(), out_specs=P("x"))
    rng.seed(1)
    out = np.asarray(f())
    assert out.shape == (8, 256)
    assert len({r.tobytes() for r in out}) == 8, name
    corr = np.corrcoef(out.astype(np.float64))
    assert np.abs(corr[~np.eye(8, dtype=bool)]).max() < 0.35, name
    rng.seed(1)
    np.testing.assert_array_equal(f(), out, err_msg=name)


def test_threads_drawing_new_samplers_share_no_key():
  import threading
  rng = bs.RandomState(0)
  out = []
  barrier = threading.Barrier(4)

  def worker():
    barrier.wait()
    for _ in range(20):
      out.append(np.asarray(rng.exponential(1.0, size=4)).tobytes())

  threads = [threading.Thread(target=worker) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len(set(out)) == 80
  ref = bs.RandomState(0)
  expected = {np.asarray(ref.exponential(1.0, size=4)).tobytes()
              for _ in range(80)}
  assert set(out) == expected


# name -> (per-shard draw(size, rng), scipy distribution): the exact loops
# of random_counts, whose steps draw whole blocks
SHARD_COUNTS = {
    "poisson": (lambda s, r: r.poisson(3.0, s), stats.poisson(3.0)),
    "binomial": (lambda s, r: r.binomial(10, 0.3, s), stats.binom(10, 0.3)),
    "binomial_high_p": (lambda s, r: r.binomial(12, 0.8, s), stats.binom(12, 0.8)),
    "negative_binomial": (lambda s, r: r.negative_binomial(3, 0.4, s),
                          stats.nbinom(3, 0.4)),
    "hypergeometric": (lambda s, r: r.hypergeometric(7, 5, 4, s),
                       stats.hypergeom(12, 7, 4)),
    "multinomial_first": (
        lambda s, r: r.multinomial(10, jnp.array([0.2, 0.3, 0.5]), s)[..., 0],
        stats.binom(10, 0.2)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHARD_COUNTS))
def test_count_samplers_inside_shard_map_follow_their_pmf(name):
  draw, dist = SHARD_COUNTS[name]
  mesh = make_mesh((8,), ("x",))
  rng = bs.RandomState(11)
  f = bs.shard_map(lambda: draw((1, N // 8), rng), mesh=mesh, in_specs=(),
                   out_specs=P("x"))
  out = np.asarray(f())
  assert out.shape == (8, N // 8)
  assert len({r.tobytes() for r in out}) == 8
  x = out.ravel()
  support = np.arange(x.min(), x.max() + 1)
  freq = (x[:, None] == support).mean(0)
  np.testing.assert_allclose(freq, dist.pmf(support), atol=0.012)
  assert dist.pmf(support).sum() > 0.99


def test_multinomial_inside_shard_map_sums_to_n():
  mesh = make_mesh((4,), ("x",))
  rng = bs.RandomState(0)
  p = jnp.array([0.1, 0.6, 0.3])
  out = np.asarray(bs.shard_map(lambda: rng.multinomial(7, p, size=(1, 500)),
                                mesh=mesh, in_specs=(), out_specs=P("x"))())
  assert out.shape == (4, 500, 3) and (out.sum(-1) == 7).all()
  np.testing.assert_allclose(out.reshape(-1, 3).mean(0), 7 * p, atol=0.08)
