"""Stateful jit (brainshard/_transforms/jit.py): fresh reads, persistent
writes, decorator forms, methods, donate_argnums, shardings, AOT stages and
nesting. Trace and compile counts of the program are in test_program.py,
static arguments in test_args.py, donate_states in test_donation.py."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import count_compiles, mesh


# ----------------------------------------------------------------------------
# reads and writes


def test_reads_see_current_value_every_call_without_retrace():
  s = bs.State(jnp.arange(4.0), name="s")
  traces = []

  @bs.jit
  def f(x):
    traces.append(1)
    return s.value * x

  np.testing.assert_array_equal(f(2.0), np.arange(4.0) * 2)
  n = len(traces)
  s.value = jnp.full(4, 10.0)  # changed outside between calls
  np.testing.assert_array_equal(f(2.0), np.full(4, 20.0))
  s.restore_value(jnp.full(4, -1.0))
  np.testing.assert_array_equal(f(3.0), np.full(4, -3.0))
  assert len(traces) == n


def test_writes_persist():
  s = bs.State(jnp.zeros(3), name="s")
  count = bs.State(0, name="count")

  @bs.jit
  def step(x):
    s.value = s.value + x
    count.value = count.value + 1
    return s.value.sum()

  expected = np.zeros(3)
  for i in range(4):
    out = step(float(i))
    expected = expected + i
    np.testing.assert_allclose(out, expected.sum())
  np.testing.assert_array_equal(s.value, expected)
  assert int(count.value) == 4
  assert s.value.dtype == jnp.float32 and count.value.dtype == jnp.int32
  assert not jax.typeof(count.value).weak_type


def test_pytree_state_and_outputs():
  s = bs.State({"v": jnp.zeros(2), "n": jnp.zeros((), jnp.int32)}, name="s")

  @bs.jit
  def f(x):
    s.value = {"v": s.value["v"] + x, "n": s.value["n"] + 1}
    return {"sum": s.value["v"].sum(), "n": s.value["n"]}

  f(1.0)
  out = f(2.0)
  np.testing.assert_array_equal(s.value["v"], [3.0, 3.0])
  assert int(s.value["n"]) == 2
  assert float(out["sum"]) == 6.0 and int(out["n"]) == 2


# ----------------------------------------------------------------------------
# decorator forms and methods


def test_decorator_with_and_without_arguments():
  s = bs.State(jnp.zeros(()), name="s")

  @bs.jit
  def f(x):
    s.value = s.value + x
    return s.value

  @bs.jit()
  def g(x):
    s.value = s.value * x
    return s.value

  @bs.jit(static_argnums=(1,))
  def h(x, k):
    s.value = s.value - k * x
    return s.value

  k = bs.jit(lambda x: s.value + x)  # call form

  assert float(f(2.0)) == 2.0
  assert float(g(3.0)) == 6.0
  assert float(h(1.0, 4)) == 2.0
  assert float(k(1.0)) == 3.0
  assert float(s.value) == 2.0
  assert f.__name__ == "f" and h.__name__ == "h"


class _Neuron:
  def __init__(self, n, tau):
    self.v = bs.ShortTermState(jnp.zeros(n), name="v")
    self.tau = bs.ParamState(jnp.asarray(tau, jnp.float32), name="tau")
    self.traces = 0

  @bs.jit
  def step(self, inp):
    self.traces += 1
    self.v.value = self.v.value + (inp - self.v.value) / self.tau.value
    return self.v.value.mean()

  @bs.jit(static_argnums=2)
  def run(self, inp, n):
    for _ in range(n):
      self.step(inp)
    return self.v.value


def test_method_on_two_independent_instances():
  a, b = _Neuron(3, 2.0), _Neuron(3, 4.0)
  for _ in range(3):
    a.step(1.0)
  b.step(2.0)
  va, vb = 0.0, 0.0
  for _ in range(3):
    va = va + (1.0 - va) / 2.0
  vb = vb + (2.0 - vb) / 4.0
  np.testing.assert_allclose(a.v.value, np.full(3, va), rtol=1e-6)
  np.testing.assert_allclose(b.v.value, np.full(3, vb), rtol=1e-6)
  ta, tb = a.traces, b.traces
  a.step(1.0)
  b.step(1.0)
  assert (a.traces, b.traces) == (ta, tb)


def test_method_with_static_arg_nesting_another_method():
  a = _Neuron(2, 2.0)
  out = a.run(1.0, 3)
  v = 0.0
  for _ in range(3):
    v = v + (1.0 - v) / 2.0
  np.testing.assert_allclose(out, np.full(2, v), rtol=1e-6)
  np.testing.assert_allclose(a.v.value, np.full(2, v), rtol=1e-6)


# ----------------------------------------------------------------------------
# donating arguments


def test_donate_argnums():
  s = bs.State(jnp.zeros(8), name="s")

  @bs.jit(donate_argnums=0)
  def f(x):
    s.value = s.value + x
    return x * 2

  x = jnp.ones(8)
  out = f(x)
  assert x.is_deleted()
  np.testing.assert_array_equal(out, np.full(8, 2.0))
  np.testing.assert_array_equal(s.value, np.ones(8))


# ----------------------------------------------------------------------------
# shardings


def test_in_and_out_shardings(axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.State(jnp.zeros(8), name="s")

  @bs.jit(in_shardings=(NamedSharding(m, P("x")),),
          out_shardings=NamedSharding(m, P()))
  def f(x):
    s.value = s.value + x
    return x * 3

  x = jax.device_put(jnp.arange(8.0), NamedSharding(m, P("x")))
  out = f(x)
  assert out.sharding == NamedSharding(m, P())
  np.testing.assert_array_equal(out, np.arange(8.0) * 3)
  f(x)
  np.testing.assert_array_equal(s.value, np.arange(8.0) * 2)


def test_one_in_sharding_is_every_positional_argument():
  # jax.jit's meaning (brainstate raises NotImplementedError)
  m = mesh((2,), ("x",))
  s = bs.State(jnp.zeros(4), name="s")
  shard = NamedSharding(m, P("x"))

  @bs.jit(in_shardings=shard, static_argnums=2)
  def f(x, y, k):
    s.value = s.value + x
    return x + y * k

  out = f(jnp.arange(4.0), jnp.ones(4), 2)
  np.testing.assert_array_equal(out, np.arange(4.0) + 2)
  np.testing.assert_array_equal(s.value, np.arange(4.0))
  assert f.in_shardings is shard

  class Model:
    @bs.jit(in_shardings=shard)
    def step(self, x):
      s.value = s.value + x
      return 2 * x

  np.testing.assert_array_equal(Model().step(jnp.ones(4)), 2 * np.ones(4))


def test_in_shardings_bad_forms():
  m = mesh((2,), ("x",))
  with pytest.raises(TypeError, match="fixed number of positional"):
    bs.jit(lambda *xs: xs, in_shardings=NamedSharding(m, P("x")))
  with pytest.raises(TypeError, match="in_shardings must be a Sharding .* got dict"):
    bs.jit(lambda x: x, in_shardings={"x": NamedSharding(m, P("x"))})


def test_negative_donate_argnums_are_an_error():
  # they would count from the end into the States' values the program takes
  with pytest.raises(ValueError, match="donate_argnums must be non-negative"):
    bs.jit(lambda x: x, donate_argnums=-1)


def test_clear_cache_trace_and_name():
  traces = []
  v = bs.State(jnp.zeros(2), name="v")

  @bs.jit(name="stepper")
  def step(x):
    traces.append(1)
    v.value = v.value + x
    return v.value

  step(jnp.ones(2)); step(jnp.ones(2))
  assert len(traces) == 1 and repr(step) == "<bs.jit(stepper)>"
  step.clear_cache()
  step(jnp.ones(2))
  assert len(traces) == 2 and float(v.value[0]) == 3.0
  traced = step.trace(jnp.ones(2))
  assert float(v.value[0]) == 3.0  # tracing writes nothing
  assert traced.lower().compile() is not None
  compiled = step.compile(jnp.ones(2))   # brainstate's spelling
  np.testing.assert_array_equal(compiled(jnp.ones(2)), [4.0, 4.0])
  assert float(v.value[0]) == 4.0


# ----------------------------------------------------------------------------
# lower / compile / eval_shape


def test_lower_compile_call_writes_states():
  s = bs.State(jnp.zeros(4), name="s")
  traces = []

  @bs.jit
  def f(x):
    traces.append(1)
    s.value = jnp.sin(s.value + x)
    return s.value.sum()

  lowered = f.lower(1.0)
  assert "sine" in lowered.as_text()
  compiled = lowered.compile()
  np.testing.assert_array_equal(s.value, np.zeros(4))  # lowering writes nothing
  n = len(traces)
  out1 = compiled(1.0)
  expected = np.sin(np.zeros(4, np.float32) + 1)
  np.testing.assert_allclose(s.value, expected, rtol=1e-6)
  np.testing.assert_allclose(out1, expected.sum(), rtol=1e-6)
  compiled(0.5)
  expected = np.sin(expected + 0.5)
  np.testing.assert_allclose(s.value, expected, rtol=1e-6)
  assert len(traces) == n
  # the jitted function agrees with the compiled one
  f(0.25)
  np.testing.assert_allclose(s.value, np.sin(expected + 0.25), rtol=1e-6)


def test_eval_shape_returns_shapes_and_writes_nothing():
  s = bs.State(jnp.arange(3.0), name="s")

  @bs.jit
  def f(x):
    s.value = s.value * 100
    return {"a": x[:, None] * s.value, "b": jnp.sum(x).astype(jnp.int32)}

  shapes = f.eval_shape(jnp.ones(5))
  assert isinstance(shapes["a"], jax.ShapeDtypeStruct)
  assert shapes["a"].shape == (5, 3) and shapes["a"].dtype == jnp.float32
  assert shapes["b"].shape == () and shapes["b"].dtype == jnp.int32
  np.testing.assert_array_equal(s.value, np.arange(3.0))


# ----------------------------------------------------------------------------
# nesting


def test_jit_inside_jit():
  s = bs.State(jnp.zeros(2), name="s")
  inner_traces, outer_traces = [], []

  @bs.jit
  def inner(x):
    inner_traces.append(1)
    s.value = s.value + x
    return s.value.sum()

  @bs.jit
  def outer(x):
    outer_traces.append(1)
    a = inner(x)
    b = inner(2 * x)
    return a + b

  out = outer(1.0)
  np.testing.assert_array_equal(s.value, [3.0, 3.0])
  assert float(out) == 2.0 + 6.0
  n_in, n_out = len(inner_traces), len(outer_traces)
  out = outer(1.0)
  np.testing.assert_array_equal(s.value, [6.0, 6.0])
  assert float(out) == 8.0 + 12.0
  assert (len(inner_traces), len(outer_traces)) == (n_in, n_out)
  # the inner function still works on its own
  inner(1.0)
  np.testing.assert_array_equal(s.value, [7.0, 7.0])


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_jit_of_shard_map_writes_states_and_matches_unsharded(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  v = bs.State(jnp.zeros(16), name="v")
  w = bs.State(2.0, name="w")
  traces = []

  def step(x):
    traces.append(1)
    v.value = v.value * 0.5 + x * w.value
    return jax.lax.psum(v.value.sum(), "x")

  f = bs.jit(bs.shard_map(step, m, (P("x"),), P(), state_in_specs={v: P("x")}))
  x = np.arange(16, dtype=np.float32)
  ref = np.zeros(16, np.float32)
  for i in range(3):
    out = f(jnp.asarray(x + i))
    ref = ref * 0.5 + (x + i) * 2.0
    np.testing.assert_allclose(out, ref.sum(), rtol=1e-6)
    np.testing.assert_allclose(v.value, ref, rtol=1e-6)
  assert float(w.value) == 2.0
  n_traces = len(traces)
  with count_compiles() as compiles:
    f(jnp.asarray(x))
  assert len(traces) == n_traces
  assert compiles.count == 0
  assert isinstance(v.sharding, NamedSharding)
  assert v.sharding.mesh == m
  assert v.sharding.is_equivalent_to(NamedSharding(m, P("x")), 1)
  if n > 1:
    assert v.sharding.spec == P("x")


# -- jit of shard_map: one compile, then none (issue 9, item 5) ---------------------


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto],
                         ids=["explicit", "auto"])
def test_jit_of_shard_map_compiles_once_and_donates_usably(axis_type):
  m = mesh((8,), ("x",), axis_type)
  v = bs.ShortTermState(jnp.zeros(64), name="v", spec=P("x"))  # unplaced
  tau = bs.ParamState(10.0, name="tau")
  runs = []

  @bs.jit
  @bs.shard_map(mesh=m, in_specs=P("x"), out_specs=P())
  def step(current):
    runs.append(1)
    v.value = v.value + (current - v.value) / tau.value
    return jax.lax.psum(v.value.sum(), "x")

  current = jnp.ones(64)
  want = np.zeros(64, np.float32)
  # Placing the unplaced state compiles JAX's own slicing helper once per
  # shape and process; made here so the counts below are of the program.
  jax.device_put(jnp.zeros(64), NamedSharding(m, P("x"))).block_until_ready()
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # "Some donated buffers were not usable"
    with count_compiles() as compiles:
      step(current)
    first_runs = len(runs)
    assert compiles.count == 1
    assert first_runs == 1  # the Python body runs once on the first call
    for _ in range(3):
      with count_compiles() as compiles:
        total = step(current)
      assert compiles.count == 0
  assert len(runs) == first_runs  # later calls run no Python
  for _ in range(4):
    want = want + (1.0 - want) / np.float32(10.0)
  np.testing.assert_allclose(np.asarray(v.value), want, rtol=1e-6)
  np.testing.assert_allclose(float(total), want.sum(), rtol=1e-6)
  assert v.value.sharding.spec == P("x")
