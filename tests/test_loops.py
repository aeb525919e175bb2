"""Stateful loops: for_loop, scan and while_loop, eagerly, under bs.jit and
nested with bs.shard_map in both directions."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import count_compiles
from conftest import make_mesh


class Leaky:
  """A small neuron group: sharded potentials, a replicated clock and a
  read-only input weight."""

  def __init__(self, n=16, spec=P("x")):
    self.v = bs.State(jnp.zeros(n), name="v", spec=spec)
    self.w = bs.State(np.linspace(0.5, 1.5, n, dtype=np.float32), name="w",
                      spec=spec)
    self.t = bs.State(jnp.zeros(()), name="t")

  def step(self, i):
    self.v.value = self.v.value * 0.9 + self.w.value * i
    self.t.value = self.t.value + 0.1
    return self.v.value.sum()

  def shard_step(self, i):
    self.v.value = self.v.value * 0.9 + self.w.value * i
    self.t.value = self.t.value + 0.1
    return jax.lax.psum(self.v.value.sum(), "x")


def reference(n_steps, n=16):
  v = np.zeros(n, np.float32)
  w = np.linspace(0.5, 1.5, n, dtype=np.float32)
  outs = []
  for i in range(n_steps):
    v = v * np.float32(0.9) + w * np.float32(i)
    outs.append(v.sum())
  return v, np.array(outs)


# ----------------------------------------------------------------------------
# for_loop


def test_for_loop_eager_matches_python_loop():
  net = Leaky()
  outs = bs.for_loop(net.step, jnp.arange(6.0))
  v, ref = reference(6)
  np.testing.assert_allclose(outs, ref, rtol=1e-5)
  np.testing.assert_allclose(net.v.value, v, rtol=1e-5)
  np.testing.assert_allclose(net.t.value, 0.6, rtol=1e-5)
  np.testing.assert_array_equal(net.w.value, np.linspace(0.5, 1.5, 16,
                                                         dtype=np.float32))


def test_for_loop_eager_repeated_calls_do_not_retrace_or_recompile():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  def step(x):
    traces.append(1)
    s.value = s.value + x
    return s.value[0]

  bs.for_loop(step, jnp.ones(4))
  n = len(traces)
  with count_compiles() as compiles:
    for _ in range(3):
      out = bs.for_loop(step, jnp.ones(4))
  assert len(traces) == n and compiles.count == 0
  np.testing.assert_array_equal(out, [13.0, 14.0, 15.0, 16.0])
  np.testing.assert_array_equal(s.value, np.full(3, 16.0))
  bs.for_loop(step, jnp.ones(5))  # a new length is a new signature
  assert len(traces) > n


def test_for_loop_read_only_state_is_read_fresh_each_call():
  w = bs.State(jnp.ones(2), name="w")
  acc = bs.State(jnp.zeros(2), name="acc")

  def step(_):
    acc.value = acc.value + w.value

  bs.for_loop(step, jnp.arange(3))
  w.value = jnp.full(2, 10.0)
  bs.for_loop(step, jnp.arange(3))
  np.testing.assert_array_equal(acc.value, [33.0, 33.0])


def test_for_loop_under_jit_and_trace_count():
  net = Leaky()
  traces = []

  @bs.jit
  def run(xs):
    traces.append(1)
    return bs.for_loop(net.step, xs)

  out1 = run(jnp.arange(3.0))
  n = len(traces)
  out2 = run(jnp.arange(3.0, 6.0))
  assert len(traces) == n
  v, ref = reference(6)
  np.testing.assert_allclose(np.concatenate([out1, out2]), ref, rtol=1e-5)
  np.testing.assert_allclose(net.v.value, v, rtol=1e-5)


def test_for_loop_many_xs_pytrees_length_and_reverse():
  s = bs.State(jnp.zeros(()), name="s")

  def step(a, b):
    s.value = s.value * 2 + a["p"] + b
    return s.value

  xs = {"p": jnp.arange(4.0)}
  out = bs.for_loop(step, xs, jnp.ones(4), reverse=True, unroll=2)
  expected, acc = [], 0.0
  for i in reversed(range(4)):
    acc = acc * 2 + i + 1
    expected.append(acc)
  np.testing.assert_array_equal(out, expected[::-1])
  s.value = jnp.zeros(())
  assert bs.for_loop(lambda: s.value, length=3).shape == (3,)
  with pytest.raises(ValueError, match="disagree on the number of steps"):
    bs.for_loop(step, xs, jnp.ones(5))
  with pytest.raises(ValueError, match="nothing to loop over"):
    bs.for_loop(lambda: None)


def test_write_only_state_and_state_created_in_body():
  last = bs.State(jnp.zeros(()), name="last")

  def step(x):
    tmp = bs.State(x * 2, name="tmp")  # local to this trace
    last.value = tmp.value
    return tmp.value

  out = bs.for_loop(step, jnp.arange(3.0))
  np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])
  assert float(last.value) == 4.0


def test_nested_loops():
  s = bs.State(jnp.zeros(()), name="s")

  def inner(x):
    s.value = s.value + x

  def outer(x):
    bs.for_loop(inner, jnp.full(3, x))
    return s.value

  out = bs.jit(lambda xs: bs.for_loop(outer, xs))(jnp.arange(4.0))
  np.testing.assert_array_equal(out, np.cumsum(3 * np.arange(4.0)))


# ----------------------------------------------------------------------------
# scan and while_loop


def test_scan_carry_and_states_match_lax_scan():
  s = bs.State(jnp.ones(2), name="s")

  def f(c, x):
    s.value = s.value * x
    return c + s.value.sum(), c

  def pure(carry, x):
    (c, sv) = carry
    sv = sv * x
    return (c + sv.sum(), sv), c

  xs = jnp.linspace(1.0, 2.0, 5)
  c, ys = bs.scan(f, jnp.zeros(()), xs)
  (c_ref, s_ref), ys_ref = jax.lax.scan(pure, (jnp.zeros(()), jnp.ones(2)), xs)
  np.testing.assert_allclose(c, c_ref)
  np.testing.assert_allclose(ys, ys_ref)
  np.testing.assert_allclose(s.value, s_ref)


def test_scan_jit_and_eager_agree():
  s = bs.State(jnp.zeros(()), name="s")

  def f(c, x):
    s.value = s.value + x * c
    return c * 0.5, s.value

  c1, y1 = bs.scan(f, 1.0, jnp.arange(4.0))
  s1 = s.value
  s.value = jnp.zeros(())
  c2, y2 = bs.jit(lambda xs: bs.scan(f, 1.0, xs))(jnp.arange(4.0))
  np.testing.assert_array_equal(c1, c2)
  np.testing.assert_array_equal(y1, y2)
  np.testing.assert_array_equal(s1, s.value)


def test_while_loop_eager_and_jit():
  t = bs.State(jnp.zeros(()), name="t")
  limit = bs.State(jnp.array(1.0), name="limit")

  def body(n):
    t.value = t.value + 0.25
    return n + 1

  def cond(n):
    return t.value < limit.value  # sees the carried value of t

  assert int(bs.while_loop(cond, body, 0)) == 4
  assert float(t.value) == 1.0
  limit.value = jnp.array(2.0)
  assert int(bs.jit(lambda: bs.while_loop(cond, body, 0))()) == 4
  assert float(t.value) == 2.0


def test_while_loop_cond_may_not_write():
  t = bs.State(jnp.zeros(()), name="t")

  def cond(n):
    t.value = t.value + 1
    return n < 3

  with pytest.raises(TypeError, match="cond_fun writes State 't'"):
    bs.while_loop(cond, lambda n: n + 1, 0)
  assert float(t.value) == 0.0


# ----------------------------------------------------------------------------
# failures and foreign transforms


def test_failure_inside_loop_leaves_states_intact():
  net = Leaky()
  net.v.value = jnp.full(16, 3.0)

  def bad(i):
    net.step(i)
    raise RuntimeError("boom")

  for run in (lambda: bs.for_loop(bad, jnp.arange(3.0)),
              bs.jit(lambda: bs.for_loop(bad, jnp.arange(3.0))),
              lambda: bs.scan(lambda c, x: (bad(x), None), 0.0, jnp.ones(2))):
    with pytest.raises(RuntimeError, match="boom"):
      run()
    np.testing.assert_array_equal(net.v.value, np.full(16, 3.0))
    assert float(net.t.value) == 0.0


def test_failure_of_shapes_inside_loop_leaves_states_intact():
  s = bs.State(jnp.zeros(3), name="s")

  def step(x):
    s.value = jnp.zeros(4)

  with pytest.raises(ValueError, match="State 's'"):
    bs.for_loop(step, jnp.arange(2.0))
  np.testing.assert_array_equal(s.value, np.zeros(3))


def test_plain_lax_scan_write_raises_but_for_loop_works():
  s = bs.State(jnp.zeros(()), name="s")

  def step(c, x):
    s.value = s.value + x
    return c, None

  with pytest.raises(bs.StateTraceError, match="State 's'"):
    bs.jit(lambda: jax.lax.scan(step, 0.0, jnp.arange(3.0)))()
  bs.jit(lambda: bs.scan(step, 0.0, jnp.arange(3.0)))()
  assert float(s.value) == 3.0


def test_for_loop_under_plain_jax_jit_may_read_but_not_write():
  s = bs.State(jnp.full(2, 2.0), name="s")
  out = jax.jit(lambda xs: bs.for_loop(lambda x: s.value * x, xs))(jnp.ones(3))
  np.testing.assert_array_equal(out, np.full((3, 2), 2.0))

  def write(x):
    s.value = s.value + x

  with pytest.raises(bs.StateTraceError, match="State 's'"):
    jax.jit(lambda xs: bs.for_loop(write, xs))(jnp.ones(3))
  np.testing.assert_array_equal(s.value, [2.0, 2.0])


def test_eager_cache_does_not_keep_the_function_alive():
  from brainshard._transforms.control import _eager_cache
  s = bs.State(jnp.zeros(()), name="s")

  def step(x):
    s.value = s.value + x

  def other(x):
    return None

  before = {id(k) for k in _eager_cache}
  bs.for_loop(step, jnp.ones(2))
  bs.cond(True, step, other, 1.0)
  bs.cond(True, other, lambda x: None, 1.0)  # a fresh lambda: dropped at once
  ours = [k for k in _eager_cache if id(k) not in before]
  assert len(ours) == 2
  ref = weakref.ref(step)
  del step
  gc.collect()
  assert ref() is None
  assert not any(k in _eager_cache for k in ours)


def test_bound_methods_hit_the_eager_cache():
  net = Leaky()
  traces = []

  class Runner:
    def step(self, i):
      traces.append(1)
      return net.step(i)

  r = Runner()
  bs.for_loop(r.step, jnp.arange(2.0))
  n = len(traces)
  bs.for_loop(r.step, jnp.arange(2.0))
  assert len(traces) == n


# ----------------------------------------------------------------------------
# with shard_map


@pytest.mark.parametrize("form", ["jit(for_loop(shard_map))",
                                  "shard_map(for_loop)",
                                  "for_loop(shard_map)"])
def test_sharded_loops_match_unsharded(form, axis_type):
  mesh = make_mesh((8,), ("x",), axis_type)
  net = Leaky()
  xs = jnp.arange(5.0)
  if form == "jit(for_loop(shard_map))":
    step = bs.shard_map(net.shard_step, mesh=mesh, in_specs=P(), out_specs=P())
    out = bs.jit(lambda xs: bs.for_loop(step, xs))(xs)
  elif form == "shard_map(for_loop)":
    out = bs.shard_map(lambda xs: bs.for_loop(net.shard_step, xs), mesh=mesh,
                       in_specs=P(), out_specs=P())(xs)
  else:
    step = bs.shard_map(net.shard_step, mesh=mesh, in_specs=P(), out_specs=P())
    out = bs.for_loop(step, xs)
  v, ref = reference(5)
  np.testing.assert_allclose(out, ref, rtol=1e-5)
  np.testing.assert_allclose(net.v.value, v, rtol=1e-5)
  np.testing.assert_allclose(net.t.value, 0.5, rtol=1e-5)
  if axis_type == jax.sharding.AxisType.Explicit:
    assert net.v.value.sharding.spec == P("x")


def test_shard_map_loop_carry_becomes_per_shard():
  """A carry that starts replicated and accumulates per-shard data must
  enter the loop per-shard (lax.scan alone would reject the types)."""
  mesh = make_mesh((4,), ("x",))
  acc = bs.State(jnp.zeros(8), name="acc", spec=P("x"))

  def body(xs):
    def step(c, x):
      acc.value = acc.value + x
      return c + x.sum(), None
    c, _ = bs.scan(step, 0.0, xs)
    return c[None]

  xs = jnp.arange(24.0).reshape(3, 8)
  out = bs.shard_map(body, mesh=mesh, in_specs=P(None, "x"),
                     out_specs=P("x"))(xs)
  np.testing.assert_allclose(out, np.asarray(xs).reshape(3, 4, 2).sum((0, 2)))
  np.testing.assert_allclose(acc.value, np.asarray(xs).sum(0))


def test_replicated_state_written_per_shard_in_loop_gives_shard_map_error():
  mesh = make_mesh((4,), ("x",))
  total = bs.State(jnp.zeros(()), name="total")

  def body(xs):
    bs.for_loop(lambda x: setattr(total, "value", total.value + x.sum()), xs)

  with pytest.raises(ValueError, match="differs across mesh axis 'x'"):
    bs.shard_map(body, mesh=mesh, in_specs=P(None, "x"),
                 out_specs=P())(jnp.ones((3, 8)))
  assert float(total.value) == 0.0


def test_loop_of_sharded_states_keeps_placement_and_compiles_once():
  mesh = make_mesh((8,), ("x",))
  v = bs.State(jax.device_put(jnp.zeros(16), NamedSharding(mesh, P("x"))),
               name="v")

  def step(x):
    v.value = v.value + x

  run = bs.jit(lambda xs: bs.for_loop(step, xs))
  run(jnp.ones(3))
  with count_compiles() as compiles:
    run(jnp.ones(3))
  assert compiles.count == 0
  assert v.value.sharding.spec == P("x")
  np.testing.assert_array_equal(v.value, np.full(16, 6.0))


def test_for_loop_under_jit_compiles_to_the_same_program_as_lax_scan():
  """Same optimized XLA program (instruction and copy counts) as a
  hand-written lax.scan over the pure step: no extra copies or carries."""
  w = bs.ParamState(jnp.eye(8) * 0.5, name="w")
  v = bs.State(jnp.zeros(8), name="v")
  count = bs.State(jnp.zeros((), jnp.int32), name="count")

  def step(drive):
    new = v.value * 0.9 + w.value @ v.value + drive
    fired = new > 1.0
    v.value = jnp.where(fired, 0.0, new)
    count.value = count.value + fired.sum()
    return fired.mean()

  def pure(w, carry, drive):
    v, count = carry
    new = v * 0.9 + w @ v + drive
    fired = new > 1.0
    return (jnp.where(fired, 0.0, new), count + fired.sum()), fired.mean()

  drives = jnp.ones((20, 8))
  ours = bs.jit(lambda d: bs.for_loop(step, d)).lower(drives).compile()
  # bs.jit donates the written states' old buffers (donate_states='auto'),
  # so the hand-written program donates its carry too.
  ref = jax.jit(lambda w, c, d: jax.lax.scan(
      lambda c, x: pure(w, c, x), c, d), donate_argnums=(1,)).lower(
          w.value, (v.value, count.value), drives).compile()

  def stats(compiled):
    lines = [l for l in compiled.as_text().splitlines() if " = " in l]
    return len(lines), sum(" copy(" in l for l in lines)

  assert stats(ours) == stats(ref)
  np.testing.assert_array_equal(ours(drives), jax.lax.scan(
      lambda c, x: pure(w.value, c, x),
      (jnp.zeros(8), jnp.zeros((), jnp.int32)), drives)[1])
