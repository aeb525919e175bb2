"""Exact small-rate counts (random_small): the tables against scipy's CDFs
in float64, the inversion against the bits it draws, frequencies against
the pmf, the switch-over rule, per-element rates, dtypes, mesh invariance
and no retrace."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._simulation.random import small as random_small
from brainshard._simulation.random import blocks as random_blocks
from conftest import make_mesh
from hlo_ops import compiled_ops

stats = pytest.importorskip("scipy.stats")

R = bs.random
ONE = 2.0 ** 31


def _cdf(table):
  """A table's CDF values (exact: multiples of 2**-31)."""
  return (np.asarray(table, np.float64) + 2 ** 30 + 1) / ONE


@pytest.mark.parametrize("lam", [0.0, 1e-3, 0.1, 1.0, 2.4, 10.0, 30.0, 70.0])
def test_poisson_table_is_scipys_cdf_rounded_once(lam):
  table = R.poisson_table(lam)
  assert table.dtype == np.int32 and table.ndim == 1
  k = np.arange(len(table))
  cdf = stats.poisson(lam).cdf(k)
  # each threshold is the float64 CDF rounded to the nearest 2**-31
  np.testing.assert_array_less(np.abs(_cdf(table) - cdf), 2 ** -32 + 1e-15)
  # the rows stop where the threshold rounds to 1: P(X > K) < 2**-32
  assert stats.poisson(lam).sf(len(table)) < 2 ** -32 * (1 + 1e-9)
  if len(table):
    assert stats.poisson(lam).sf(len(table) - 1) >= 2 ** -32 * (1 - 1e-9)


@pytest.mark.parametrize("n,p", [(10, 0.3), (12, 0.8), (50, 0.02), (60, 0.5),
                                 (0, 0.4), (7, 0.0), (7, 1.0)])
def test_binomial_table_is_scipys_cdf_rounded_once(n, p):
  table = R.binomial_table(n, p)
  cdf = stats.binom(n, p).cdf(np.arange(len(table)))
  np.testing.assert_array_less(np.abs(_cdf(table) - cdf), 2 ** -32 + 1e-15)
  assert len(table) <= n  # k = n is never a threshold (P(X <= n) = 1)


def test_counts_are_the_rows_the_drawn_bits_pass():
  # The inversion, bit for bit: 31 bits of the draw's key, counted against
  # T[k] = 2**31 * CDF; so P(count = k) is (T[k] - T[k-1]) / 2**31 exactly.
  key = jax.random.key(4)
  lam = np.array([0.0, 0.3, 2.4, 9.0])
  table = R.poisson_table(lam)
  got = np.asarray(R.from_table(table, size=(5000, 4), key=key))
  bits = np.asarray(jax.random.bits(random_blocks.block_key(key, 0, 0),
                                    (5000, 4), jnp.uint32))
  x = bits.view(np.int32) >> 1  # uniform on [-2**30, 2**30)
  want = (x[None] > table[:, None]).sum(0)
  np.testing.assert_array_equal(got, want)
  assert (got[:, 0] == 0).all()


def _guide_cases():
  rng = np.random.default_rng(0)
  tables = [R.poisson_table(lam) for lam in (2.4, 5.0, 10.0, 30.0, 60.0)]
  tables += [R.binomial_table(n, p) for n, p in ((100, 0.5), (50, 0.99),
                                                 (1000, 0.01))]
  # thresholds crowding a bucket (more than one: compares), at either end
  # and in the middle, repeated ones
  lo, hi = -(1 << 30) - 1, (1 << 30) - 1
  for draw in (lambda k: rng.integers(lo, hi, k),
               lambda k: lo + rng.integers(0, 60, k),
               lambda k: hi - rng.integers(0, 60, k),
               lambda k: rng.integers(-3000, 3000, k)):
    tables.append(np.sort(draw(int(rng.integers(1, 128)))).astype(np.int32))
  return tables


def test_the_guide_counts_every_draw_as_the_rows_do():
  # The indexed search (random_small.guide, what a table known at trace
  # time draws with) against the compares of every row: at both edges of
  # every bucket, at each threshold and its neighbours, and at random.
  index, xlo, xhi = random_small.buckets()
  assert xlo[0] == 0 and xhi[-1] == (1 << 31) - 1
  assert (xlo[1:] == xhi[:-1] + 1).all() and (xhi >= xlo).all()
  assert len(np.unique(index)) == len(index)
  for x in (xlo, xhi):  # a bucket is the interval of draws of one index
    got = random_small._bucket((x - (1 << 30)).astype(np.int32), np)[0]
    np.testing.assert_array_equal(got, index)
  rng = np.random.default_rng(1)
  for table in _guide_cases():
    t = table.astype(np.int64) + (1 << 30) + 1
    x = np.concatenate([xlo - 1, xlo, xhi, xhi + 1, t - 1, t, t + 1,
                        rng.integers(0, 1 << 31, 1 << 14)])
    x = np.unique(x[(x >= 0) & (x < (1 << 31))])
    bits = jnp.asarray(((x << 1) | rng.integers(0, 2, len(x))).astype(
        np.uint32))
    entries, extra = random_small.guide(tuple(table.tolist()))
    got = random_small.guided(bits, entries, list(extra))
    np.testing.assert_array_equal(got, random_small.counts(bits, list(table)))


@pytest.mark.parametrize("lam", [2.4, 10.0, 60.0])
def test_a_rate_known_at_trace_time_counts_the_rows_its_bits_pass(lam):
  # poisson(lam) with one table for every element draws by the guide: the
  # counts of the compares, bit for bit, at any shape and padding
  key = jax.random.key(4)
  table = R.poisson_table(lam)
  assert len(table) >= random_small.GUIDE_MIN_ROWS
  for shape in ((5000,), (4097,), (60, 70)):
    got = np.asarray(R.poisson(lam, size=shape, key=key))
    bits = np.asarray(jax.random.bits(random_blocks.block_key(key, 0, 0),
                                      shape, jnp.uint32))
    x = bits.view(np.int32) >> 1
    want = (x[None] > table.reshape(-1, *[1] * len(shape))).sum(0)
    np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(R.from_table(table, size=(60, 70), key=key),
                                want)


def test_the_guide_joins_the_hash_in_one_loop():
  # The gathered entry has two uses; a third (a decode in three shifts)
  # made XLA:CPU gather in a fusion of its own and hash twice (2x).
  if jax.default_backend() != "cpu":
    pytest.skip("XLA:CPU's fusion")

  def compiled(draw):
    return compiled_ops(jax.jit(draw).lower(jax.random.key(0)).compile()
                        .as_text())
  uniform = compiled(lambda k: R.uniform(size=4096, key=k))
  guided = compiled(lambda k: R.poisson(10.0, size=4096, key=k))
  assert guided["gather"] == 1 and guided["fusion"] == uniform["fusion"]
  assert guided["xor"] <= uniform["xor"] + 2  # the hash once


def test_poisson_frequencies_match_the_pmf():
  # 2**20 draws: a frequency's sd is at most 5e-4; the bound is 5 sd of
  # each probability, so a bias above ~1e-3 of a count's mass would show.
  n = 1 << 20
  for lam in (0.7, 2.4):
    x = np.asarray(R.poisson(lam, size=n, key=jax.random.key(1)))
    k = np.arange(x.max() + 2)
    pmf = stats.poisson(lam).pmf(k)
    freq = np.bincount(x, minlength=len(k)) / n
    np.testing.assert_array_less(np.abs(freq - pmf),
                                 5 * np.sqrt(pmf * (1 - pmf) / n) + 2e-6)
    chi2 = ((freq - pmf) ** 2 / pmf)[pmf > 1e-4].sum() * n
    assert chi2 < stats.chi2((pmf > 1e-4).sum() - 1).ppf(0.999), (lam, chi2)


def test_binomial_frequencies_match_the_pmf_and_the_edges_are_exact():
  n = 1 << 19
  x = np.asarray(R.binomial(12, 0.8, size=n, key=jax.random.key(2)))
  pmf = stats.binom(12, 0.8).pmf(np.arange(13))
  freq = np.bincount(x, minlength=13) / n
  np.testing.assert_array_less(np.abs(freq - pmf),
                               5 * np.sqrt(pmf * (1 - pmf) / n) + 2e-6)
  edges = R.binomial(np.array([0, 5, 5, 3]), np.array([0.5, 0.0, 1.0, 1.0]),
                     size=(1000, 4), key=jax.random.key(0))
  np.testing.assert_array_equal(edges, np.broadcast_to([0, 0, 5, 3], (1000, 4)))


def test_switch_over_rule():
  plan = random_small.poisson_plan
  assert plan(0.0) is not None and plan(2.4) is not None
  # tiny rates: 2**-31 steps would be a visible part of P(X >= 1)
  assert plan(random_small.LAM_MIN) is not None
  assert plan(random_small.LAM_MIN * 0.99) is None
  assert plan(np.array([0.0, 1.0])) is not None
  assert plan(np.array([1e-5, 1.0])) is None
  assert plan(-1.0) is None and plan(np.nan) is None  # the loop's behaviour
  # the largest rate whose table has at most MAX_ROWS rows, and the next
  grid = np.arange(40.0, 90.0, 0.5)
  fits = [len(R.poisson_table(g)) <= random_small.MAX_ROWS for g in grid]
  top = grid[np.argmin(fits) - 1]
  assert plan(top) is not None and plan(top + 0.5) is None
  # traced rates have no table (its size is not known at trace time)
  seen = []
  jax.jit(lambda lam: seen.append(plan(lam)) or lam)(2.0)
  assert seen == [None]
  assert random_small.binomial_plan(10, 0.3) is not None
  assert random_small.binomial_plan(10.5, 0.3) is None  # not integer
  assert random_small.binomial_plan(400, 0.9) is None   # too many rows
  # a per-element table over MAX_ENTRIES runs the loop
  big = np.full(random_small.MAX_ENTRIES // 8 + 1, 2.4)
  assert plan(big) is None and plan(2.4 + 0 * big[:1000]) is not None


@pytest.mark.slow
def test_both_sides_of_the_switch_follow_the_pmf():
  grid = np.arange(40.0, 90.0, 0.5)
  fits = [len(R.poisson_table(g)) <= random_small.MAX_ROWS for g in grid]
  top = grid[np.argmin(fits) - 1]
  n = 100_000
  for lam in (top, top + 0.5):
    x = np.asarray(R.poisson(lam, size=n, key=jax.random.key(3)))
    assert abs(x.mean() - lam) < 5 * np.sqrt(lam / n)
    assert abs(x.var() - lam) < 0.03 * lam
    k = np.arange(int(lam) - 15, int(lam) + 16)
    freq = (x[:, None] == k).mean(0)
    np.testing.assert_allclose(freq, stats.poisson(lam).pmf(k), atol=4e-3)


def test_zero_tiny_and_large_rates():
  key = jax.random.key(5)
  assert not np.asarray(R.poisson(0.0, size=1000, key=key)).any()
  tiny = np.asarray(R.poisson(1e-4, size=200_000, key=key))  # the loop
  assert 5 <= tiny.sum() <= 45
  big = np.asarray(R.poisson(300.0, size=2000, key=key))     # the loop
  assert abs(big.mean() - 300) < 5 * np.sqrt(300 / 2000)


def test_per_element_rates():
  lam = np.array([0.0, 0.5, 2.4, 8.0])
  x = np.asarray(R.poisson(lam, size=(50_000, 4), key=jax.random.key(6)))
  assert (x[:, 0] == 0).all()
  for j in (1, 2, 3):
    k = np.arange(x[:, j].max() + 1)
    freq = np.bincount(x[:, j], minlength=len(k)) / len(x)
    np.testing.assert_allclose(freq, stats.poisson(lam[j]).pmf(k), atol=0.01)
  # the draw path inverts what poisson_table gives
  np.testing.assert_array_equal(
      x, R.from_table(R.poisson_table(lam), size=(50_000, 4),
                      key=jax.random.key(6)))


def test_dtypes():
  key = jax.random.key(0)
  assert R.poisson(2.4, size=3, key=key).dtype == jnp.int32
  assert R.poisson(2.4, size=3, key=key, dtype=jnp.float32).dtype == jnp.float32
  assert R.poisson(2.4, size=3, key=key, dtype=jnp.int16).dtype == jnp.int16
  assert R.binomial(5, 0.5, size=3, key=key, dtype=jnp.uint8).dtype == jnp.uint8
  assert R.poisson(0.0, size=(2, 0), key=key).shape == (2, 0)
  with pytest.raises(TypeError, match="int32"):
    R.from_table(np.zeros((3, 2), np.float32), key=key)
  with pytest.raises(ValueError, match="lam"):
    R.poisson_table(-1.0)


@pytest.mark.parametrize("devices", [2, 8])
def test_a_shard_draws_its_block_of_the_unsharded_counts(devices):
  n = 64
  lam = np.linspace(0.0, 6.0, n)
  table = R.poisson_table(lam)

  def draws(rng, m, table):
    return (rng.poisson(2.4, size=m), rng.binomial(10, 0.3, size=m),
            rng.poisson(10.0, size=m), rng.from_table(table))

  rng = bs.RandomState(7)
  whole = [np.asarray(x) for x in bs.jit(lambda t: draws(rng, n, t))(table)]
  rng.seed(7)
  mesh = make_mesh((devices,), ("x",))
  f = bs.shard_map(lambda t: draws(rng, n // devices, t), mesh=mesh,
                   in_specs=P(None, "x"), out_specs=P("x"))
  for a, b in zip(whole, bs.jit(f)(table)):
    np.testing.assert_array_equal(b, a)


def test_a_spec_splitting_a_non_leading_axis():
  # rows of the block are drawn one at a time (random_blocks.run's vmap)
  mesh = make_mesh((2, 4), ("x", "y"))
  rng = bs.RandomState(3)
  got = bs.shard_map(
      lambda: rng.poisson(np.full(2, 2.0), size=(2, 2), spec=P("x", "y")),
      mesh=mesh, in_specs=(), out_specs=P("x", "y"))()
  np.testing.assert_array_equal(
      got, np.asarray(R.poisson(2.0, size=(4, 8), key=bs.RandomState(3))))


def test_repeated_calls_do_not_retrace():
  rng = bs.RandomState(0)
  traces = []

  @bs.jit
  def step():
    traces.append(1)
    return rng.poisson(2.4, size=100), rng.binomial(10, 0.3, size=100)

  a = [np.asarray(x) for x in step()]
  b = [np.asarray(x) for x in step()]
  step()
  assert len(traces) == 1
  assert not all(np.array_equal(x, y) for x, y in zip(a, b))  # fresh draws
  # eager draws reuse one compiled program per table size, not per rate
  rng.poisson(2.4, size=100)
  before = random_small_cache_size()
  for lam in (2.41, 2.42, 2.43):
    assert len(R.poisson_table(lam)) == len(R.poisson_table(2.4))
    rng.poisson(lam, size=100)
  assert random_small_cache_size() == before


def random_small_cache_size():
  from brainshard._simulation.random import draw as random_draw
  return random_draw._run._cache_size()
