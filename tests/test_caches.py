"""brainshard's caches (brainshard/_core/caches.py): ``bs.clear_caches()``
makes the next call of a transformed function trace and compile again (and
still compute the same thing), and a Cache keeps at most ``maxsize``
entries."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._core.caches import Cache
from _util import count_compiles, mesh


def _calls_trace_and_compile(call):
  """The number of compiles while ``call()`` runs."""
  with count_compiles() as compiles:
    call()
  return compiles.count


def test_clear_caches_retraces_and_recompiles_eager_shard_map():
  m = mesh((8,), ("x",))
  v = bs.State(jnp.zeros(16), name="v", spec=P("x"))
  traces = []

  @bs.shard_map(mesh=m, in_specs=P("x"), out_specs=P())
  def step(x):
    traces.append(1)
    v.value = v.value + x
    return jax.lax.psum(v.value.sum(), "x")

  x = jnp.arange(16.0)
  step(x)
  n = len(traces)
  assert _calls_trace_and_compile(lambda: step(x)) == 0
  assert len(traces) == n  # cached: no Python, no compile

  bs.clear_caches()
  assert _calls_trace_and_compile(lambda: step(x)) == 1
  assert len(traces) > n  # the body ran again
  n = len(traces)
  assert _calls_trace_and_compile(lambda: step(x)) == 0  # cached again
  assert len(traces) == n
  np.testing.assert_array_equal(np.asarray(v.value), 4 * np.arange(16.0))


def test_clear_caches_retraces_and_recompiles_eager_for_loop():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  def body(i):
    traces.append(1)
    s.value = s.value + i

  xs = jnp.arange(4.0)
  bs.for_loop(body, xs)
  n = len(traces)
  assert _calls_trace_and_compile(lambda: bs.for_loop(body, xs)) == 0
  assert len(traces) == n

  bs.clear_caches()
  assert _calls_trace_and_compile(lambda: bs.for_loop(body, xs)) == 1
  assert len(traces) > n
  np.testing.assert_array_equal(np.asarray(s.value), np.full(3, 3 * 6.0))


def test_clear_caches_forgets_discoveries():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  def f(x):
    traces.append(1)
    s.value = s.value + x

  sf = bs.StatefulFunction(f)
  sf.make_jaxpr(1.0)
  sf.make_jaxpr(1.0)
  assert len(traces) == 1
  bs.clear_caches()
  assert sf.get_write_states(1.0) == (s,)
  assert len(traces) == 2
  sf.clear_cache()  # one function's cache alone
  sf.make_jaxpr(1.0)
  assert len(traces) == 3


def test_clear_caches_retraces_and_recompiles_bs_jit():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  @bs.jit
  def step(x):
    traces.append(1)
    s.value = s.value + x
    return s.value.sum()

  step(1.0)
  n = len(traces)
  assert _calls_trace_and_compile(lambda: step(1.0)) == 0
  assert len(traces) == n

  bs.clear_caches()
  compiles = _calls_trace_and_compile(lambda: step(1.0))
  np.testing.assert_array_equal(np.asarray(s.value), np.full(3, 3.0))
  assert len(traces) == n + 1
  assert compiles == 1


def test_cache_keeps_at_most_maxsize_entries_dropping_the_oldest():
  cache = Cache(maxsize=3)
  for i in range(5):
    cache[i] = str(i)
    assert len(cache) == min(i + 1, 3)
  assert list(cache) == [2, 3, 4]
  assert cache[4] == "4" and 0 not in cache
  cache[3] = "three"  # replacing a key evicts nothing
  assert list(cache) == [2, 3, 4] and cache[3] == "three"
  cache[5] = "5"
  assert list(cache) == [3, 4, 5]


@pytest.mark.slow
def test_a_transform_cache_stays_bounded():
  """A shard_map called with many signatures keeps at most maxsize plans."""
  m = mesh((2,), ("x",))
  f = bs.shard_map(lambda x: x * 2, mesh=m, in_specs=P("x"), out_specs=P("x"))
  maxsize = f.planner.plans.maxsize
  f.planner.plans.maxsize = 3  # small, so that a few signatures overflow it
  try:
    for n in range(1, 6):
      np.testing.assert_array_equal(f(jnp.ones(2 * n)), np.full(2 * n, 2.0))
      assert len(f.planner.plans) <= 3
    assert len(f.planner.plans) == 3
  finally:
    f.planner.plans.maxsize = maxsize


def test_clear_caches_empties_every_cache():
  cache = Cache()
  cache["a"] = 1
  bs.clear_caches()
  assert len(cache) == 0



def test_clear_caches_forgets_spike_compactors():
  from brainshard._simulation.monitors import spikes
  buf = jnp.asarray(np.arange(8, dtype=np.uint32).reshape(2, 4))
  before = spikes.compact(buf, 8)
  first = spikes._compactor(None, None, 8)
  assert spikes._compactor(None, None, 8) is first  # cached
  bs.clear_caches()
  assert spikes._compactor(None, None, 8) is not first
  after = spikes.compact(buf, 8)  # compiled again, the same compaction
  for x, y in zip(before[:4], after[:4]):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
