"""bs.random's rarer samplers (random_extra, random_extra_api): each checked
against scipy (KS test, or the exact pmf for the discrete ones) through the
public functions, numpy's shape and dtype conventions, the ValueError for
concretely invalid parameters, the RandomState methods, and the same
numbers on 1 and 8 devices inside bs.shard_map."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._simulation.random import extra as rx
from conftest import make_mesh

stats = pytest.importorskip("scipy.stats")

N = 20_000
R = bs.random
KEY = jax.random.key(7)

# name -> (draw(size, key), scipy frozen distribution)
CONTINUOUS = {
    "f": (lambda s, k: R.f(5.0, 7.0, s, key=k), stats.f(5, 7)),
    "noncentral_chisquare": (
        lambda s, k: R.noncentral_chisquare(3.0, 2.0, s, key=k), stats.ncx2(3, 2)),
    "noncentral_chisquare_small_df": (
        lambda s, k: R.noncentral_chisquare(0.5, 1.5, s, key=k),
        stats.ncx2(0.5, 1.5)),
    "noncentral_f": (lambda s, k: R.noncentral_f(4.0, 6.0, 1.5, s, key=k),
                     stats.ncf(4, 6, 1.5)),
    "power": (lambda s, k: R.power(3.0, s, key=k), stats.powerlaw(3)),
    "rayleigh": (lambda s, k: R.rayleigh(2.0, s, key=k), stats.rayleigh(scale=2)),
    "triangular": (lambda s, k: R.triangular(-1.0, 0.5, 2.0, s, key=k),
                   stats.triang(0.5, loc=-1, scale=3)),
    "wald": (lambda s, k: R.wald(1.5, 2.0, s, key=k),
             stats.invgauss(0.75, scale=2)),
    "vonmises": (lambda s, k: R.vonmises(0.5, 2.0, s, key=k),
                 stats.vonmises(2.0, loc=0.5)),
    "vonmises_tiny_kappa": (lambda s, k: R.vonmises(0.0, 1e-9, s, key=k),
                            stats.uniform(-np.pi, 2 * np.pi)),
    "t": (lambda s, k: R.t(4.0, s, key=k), stats.t(4)),
    "maxwell": (lambda s, k: R.maxwell(s, key=k), stats.maxwell()),
    "weibull_min": (lambda s, k: R.weibull_min(1.5, 2.0, s, key=k),
                    stats.weibull_min(1.5, scale=2)),
    "ranf": (lambda s, k: R.ranf(s, key=k), stats.uniform()),
    "sample": (lambda s, k: R.sample(s, key=k), stats.uniform()),
    "loggamma_exp": (lambda s, k: jnp.exp(R.loggamma(0.5, s, key=k)),
                     stats.gamma(0.5)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_matches_scipy(name):
  draw, dist = CONTINUOUS[name]
  x = np.asarray(draw((N,), KEY), np.float64)
  assert x.shape == (N,) and np.isfinite(x).all()
  assert stats.kstest(x, dist.cdf).pvalue > 1e-3, name


def _pmf_close(x, pmf, support):
  freq = np.array([(x == k).mean() for k in support])
  np.testing.assert_allclose(freq, pmf(np.array(support)), atol=0.012)


@pytest.mark.slow
def test_logseries_zipf_and_random_integers_pmfs():
  x = np.asarray(R.logseries(0.6, N, key=KEY))
  assert x.dtype == np.int32 and x.min() >= 1
  _pmf_close(x, stats.logser(0.6).pmf, range(1, 7))
  z = np.asarray(R.zipf(2.5, N, key=KEY))
  assert z.dtype == np.int32 and z.min() >= 1
  _pmf_close(z, stats.zipf(2.5).pmf, range(1, 7))
  r = np.asarray(R.random_integers(2, 5, N, key=KEY))   # inclusive
  _pmf_close(r, lambda k: np.full(k.shape, 0.25), range(2, 6))
  assert set(np.unique(R.random_integers(3, size=500, key=KEY))) == {1, 2, 3}


def test_orthogonal_matrices_are_orthogonal_and_haar_signed():
  q = np.asarray(R.orthogonal(3, (200,), key=KEY), np.float64)
  assert q.shape == (200, 3, 3)
  np.testing.assert_allclose(q @ q.transpose(0, 2, 1),
                             np.broadcast_to(np.eye(3), q.shape), atol=1e-5)
  # Haar: the entries have mean 0 (a QR without the sign fix would not)
  assert abs(q[:, 0, 0].mean()) < 0.15


@pytest.mark.slow
def test_shapes_dtypes_lists_and_aliases():
  bs.random.seed(0)
  assert R.wald([2.0, 0.5], 2.0).shape == (2,)            # a Python list
  assert R.noncentral_chisquare(3, (3.0, 2.0), (4, 2)).shape == (4, 2)
  assert R.triangular(0.0, 0.5, 1.0).shape == ()
  assert R.weibull_min([2.0, 3.0], 2.0).shape == (2,)
  assert R.rayleigh(None, 3).shape == (3,)                 # brainstate's None
  assert R.loggamma(2.0, (4, 3), dtype=jnp.float16).dtype == jnp.float16
  assert R.zipf(2.0, 3, dtype=jnp.int16).dtype == jnp.int16
  assert R.maxwell().shape == ()
  # ranf and sample are random_sample's numbers
  ref = R.random_sample((4,), key=KEY)
  np.testing.assert_array_equal(R.ranf((4,), key=KEY), ref)
  np.testing.assert_array_equal(R.sample((4,), key=KEY), ref)


@pytest.mark.slow
def test_methods_match_functions_and_key_advances():
  a, b = bs.RandomState(5), bs.RandomState(5)
  for name, args in [("f", (2.0, 3.0, 4)), ("zipf", (2.0, 4)), ("t", (3.0, 4)),
                     ("maxwell", (4,)), ("vonmises", (0.0, 1.0, 4)),
                     ("random_integers", (1, 6, 4)), ("orthogonal", (2, 4))]:
    x = getattr(a, name)(*args)
    y = getattr(R, name)(*args, key=b)
    np.testing.assert_array_equal(x, y, err_msg=name)
  np.testing.assert_array_equal(jax.random.key_data(a.value),
                                jax.random.key_data(b.value))


@pytest.mark.parametrize("call", [
    lambda: R.power(0.0, 3), lambda: R.power(-1.0, 3), lambda: R.zipf(1.0, 3),
    lambda: R.zipf([2.0, 0.5]), lambda: R.triangular(1.0, 0.0, 2.0),
    lambda: R.triangular(0.0, 0.0, 0.0), lambda: R.logseries(1.0),
    lambda: R.f(0.0, 1.0), lambda: R.wald(1.0, -1.0),
    lambda: R.random_integers(5, 2)])
def test_concretely_invalid_parameters_raise_and_leave_the_key(call):
  bs.random.seed(3)
  before = np.asarray(jax.random.key_data(bs.random.default_state().value))
  with pytest.raises(ValueError):
    call()
  np.testing.assert_array_equal(
      jax.random.key_data(bs.random.default_state().value), before)


@pytest.mark.slow
def test_check_valid_false_and_traced_parameters_do_not_raise():
  assert R.power(0.0, 3, check_valid=False).shape == (3,)
  out = bs.jit(lambda a: R.zipf(a, 3))(jnp.float32(0.5))   # cannot raise
  assert out.shape == (3,)


@pytest.mark.slow
def test_rejection_loops_end_on_parameters_numpy_rejects():
  z = jax.jit(lambda a: rx.zipf(KEY, a, (3,)))(1.0)   # capped, not hung
  assert z.shape == (3,)
  v = R.vonmises(0.0, jnp.array([1e-9, 1e-6, 1e7]), key=KEY)
  assert np.isfinite(np.asarray(v)).all()


def _draws(rng, n):
  """Some new samplers at per-shard size ``32 // n`` (global 32)."""
  s = (32 // n,)
  return (rng.f(2.0, 5.0, size=s), rng.noncentral_chisquare(3.0, 2.0, size=s),
          rng.zipf(2.0, size=s), rng.vonmises(0.5, 2.0, size=s),
          rng.maxwell(size=s), rng.loggamma(0.5, size=s),
          rng.orthogonal(2, size=s))


@pytest.mark.slow
def test_one_and_eight_devices_draw_the_same_numbers():
  rng = bs.RandomState(3)
  whole = [np.asarray(x) for x in bs.jit(lambda: _draws(rng, 1))()]
  rng.seed(3)
  mesh = make_mesh((8,), ("x",))
  got = bs.shard_map(lambda: _draws(rng, 8), mesh=mesh, in_specs=(),
                     out_specs=P("x"))()
  for name, a, b in zip(["f", "noncentral_chisquare", "zipf", "vonmises",
                         "maxwell", "loggamma", "orthogonal"], whole, got):
    np.testing.assert_array_equal(np.asarray(b), a, err_msg=name)


# ----------------------------------------------------------------------------
# numpy's and brainstate's conventions on the older samplers


@pytest.mark.slow
def test_list_and_tuple_parameters_are_arrays():
  key = jax.random.key(1)
  x = R.uniform([0.0, 2.0], [1.0, 4.0], key=key)
  assert x.shape == (2,) and (x >= jnp.array([0.0, 2.0])).all()
  np.testing.assert_array_equal(
      x, R.uniform(jnp.array([0.0, 2.0]), jnp.array([1.0, 4.0]), key=key))
  assert set(np.asarray(R.choice([1, 2, 4], 50, key=key)).tolist()) <= {1, 2, 4}
  m = R.multinomial(10, (0.2, 0.8), size=3, key=key)
  assert m.shape == (3, 2) and (np.asarray(m).sum(-1) == 10).all()
  assert R.randint([1, 5, 7], 10, key=key).shape == (3,)
  assert R.dirichlet((10, 5, 3), 4, key=key).shape == (4, 3)
  s = R.choice(["a", "b", "c"], 6, p=[0.5, 0.5, 0.0], key=key)
  assert s.dtype.kind == "U" and set(s.tolist()) <= {"a", "b"}


@pytest.mark.parametrize("call", [
    lambda: R.bernoulli(1.5, 3), lambda: R.binomial(5, -0.1),
    lambda: R.chisquare(0.0, 2), lambda: R.geometric(0.0),
    lambda: R.multinomial(10, jnp.array([0.6, 0.6, 0.5])),
    lambda: R.truncated_normal(-1.0, 1.0, loc=5.0),
    lambda: R.weibull(jnp.array([1.0, 2.0]), size=(3,)),   # does not broadcast
    lambda: R.multivariate_normal(jnp.zeros(3), jnp.eye(2)),
    lambda: bs.random.split_key(0)])
def test_older_samplers_refuse_concretely_invalid_parameters(call):
  with pytest.raises(ValueError):
    call()


@pytest.mark.slow
def test_check_valid_false_skips_the_checks():
  assert R.bernoulli(1.5, 3, check_valid=False).shape == (3,)
  assert R.chisquare(0.0, 2, check_valid=False).shape == (2,)
  assert R.multinomial(4, jnp.array([0.6, 0.6, 0.5]), check_valid=False).shape == (3,)


def test_random_state_repr_shows_the_key():
  rng = bs.RandomState(42)
  assert "RandomState" in repr(rng) and str(rng.value) in repr(rng)
