"""State-aware shard_map (brainshard/_transforms/shard_map/shard_map.py): the peer's five
scenarios over 1/2/4/8-device and 2-D meshes and both axis types, write-back
specs, the call forms, caching of eager calls, manual over some mesh axes,
and the repr. Every sharded result is compared with the same computation
done unsharded in numpy. Spec resolution is in test_specs.py, planning in
test_shard_plan.py, the body's frames in test_shard_frames.py and input
placement in test_placement.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import assert_on_mesh, count_compiles, mesh

SIZES = [1, 2, 4, 8]


# ----------------------------------------------------------------------------
# the peer's five scenarios


@pytest.mark.parametrize("n", SIZES)
def test_peer_1_sharded_data_times_replicated_scalar_state(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  w = bs.State(3.0)

  def f(x):
    return x * w.value

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P("x"))
  x = np.arange(16, dtype=np.float32)
  out = g(jnp.asarray(x))
  np.testing.assert_allclose(out, x * 3.0)
  assert out.shape == (16,)
  w.value = 0.5  # the state is read afresh on the next call
  np.testing.assert_allclose(g(jnp.asarray(x)), x * 0.5)
  assert float(w.value) == 0.5


@pytest.mark.parametrize("n", SIZES)
def test_peer_2_per_shard_buffer_read_and_written_in_place(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  buffer = bs.State(jnp.zeros(16), name="buffer")

  def f(x):
    buffer.value = buffer.value * 0.5 + x
    return buffer.value

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P("x"),
                   state_in_specs={buffer: P("x")},
                   state_out_specs={buffer: P("x")})
  x = np.arange(16, dtype=np.float32)
  ref = np.zeros(16, np.float32)
  for i in range(3):
    out = g(jnp.asarray(x + i))
    ref = ref * 0.5 + x + i
    np.testing.assert_allclose(out, ref)
    np.testing.assert_allclose(buffer.value, ref)
  assert_on_mesh(buffer, m, P("x"))


@pytest.mark.parametrize("n", SIZES)
def test_peer_3_collective_across_shards(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  scale = bs.State(2.0, name="scale")

  def f(d):
    d = d * scale.value
    return jax.lax.psum(jnp.sum(d, keepdims=True), "x")

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P())
  d = np.arange(32, dtype=np.float32).reshape(16, 2) / 7
  out = g(jnp.asarray(d))
  assert out.shape == (1, 1)
  np.testing.assert_allclose(out, np.sum(d * 2.0, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_peer_4_jax_jit_of_wrapped_function_reading_states(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  w = bs.State(jnp.arange(16.0), name="w")
  b = bs.State(1.5, name="b")

  def f(x):
    return x * w.value + b.value

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P("x"),
                   state_in_specs={w: P("x")})
  x = np.linspace(-1, 1, 16).astype(np.float32)
  out = jax.jit(g)(jnp.asarray(x))
  np.testing.assert_allclose(out, x * np.arange(16.0) + 1.5, rtol=1e-6)
  np.testing.assert_array_equal(w.value, np.arange(16.0))  # untouched


@pytest.mark.parametrize("n", [2, 4, 8])
def test_peer_5_two_dimensional_mesh(n, axis_type):
  m = mesh((n // 2, 2), ("data", "model"), axis_type)
  buf = bs.State(jnp.zeros((8, 4)), name="buf")
  total = bs.State(jnp.zeros(()), name="total")

  def f(x):
    buf.value = buf.value * 0.5 + x
    total.value = total.value + jax.lax.psum(buf.value.sum(), ("data", "model"))
    return buf.value * 2

  g = bs.shard_map(f, mesh=m, in_specs=(P("data", "model"),),
                   out_specs=P("data", "model"),
                   state_in_specs={buf: P("data", "model")})
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  ref_buf, ref_total = np.zeros((8, 4), np.float32), 0.0
  for i in range(2):
    out = g(jnp.asarray(x - i))
    ref_buf = ref_buf * 0.5 + x - i
    ref_total += ref_buf.sum()
    np.testing.assert_allclose(out, ref_buf * 2)
  np.testing.assert_allclose(buf.value, ref_buf)
  np.testing.assert_allclose(total.value, ref_total, rtol=1e-6)
  assert_on_mesh(buf, m, P("data", "model"))
  assert_on_mesh(total, m, P())


@pytest.mark.parametrize("n", [2, 4, 8])
def test_2d_mesh_partial_specs(n, axis_type):
  m = mesh((n // 2, 2), ("data", "model"), axis_type)
  w = bs.ParamState(jnp.arange(12.0).reshape(4, 3) / 10, name="w")  # replicated
  acc = bs.State(jnp.zeros((8, 3)), name="acc")

  def f(x):  # x: data-sharded rows, model-sharded features
    h = jax.lax.psum(x.sum(1, keepdims=True), "model")
    acc.value = acc.value + h * w.value.sum(0)
    return acc.value

  g = bs.shard_map(f, mesh=m, in_specs=P("data", "model"), out_specs=P("data"),
                   state_in_specs={acc: P("data")})
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  out = g(jnp.asarray(x))
  ref = x.sum(1, keepdims=True) * (np.arange(12.0).reshape(4, 3) / 10).sum(0)
  np.testing.assert_allclose(out, ref, rtol=1e-6)
  np.testing.assert_allclose(acc.value, ref, rtol=1e-6)
  assert_on_mesh(acc, m, P("data"))


# ----------------------------------------------------------------------------
# write-back specs


@pytest.mark.parametrize("spec", [P("x"), P(None, "x"), P()])
def test_written_state_leaves_with_its_in_spec(spec, axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.State(jnp.arange(32.0).reshape(4, 8), name="s", spec=spec)

  def f():
    s.value = s.value + 1

  bs.shard_map(f, m, P(), None)()
  np.testing.assert_array_equal(s.value, np.arange(32.0).reshape(4, 8) + 1)
  assert_on_mesh(s, m, spec)


def test_state_out_specs_by_type_key(axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.ShortTermState(jnp.zeros(8), name="s")

  def f(x):
    s.value = s.value + x
    return x

  g = bs.shard_map(f, m, P("x"), P("x"),
                   state_in_specs={bs.ShortTermState: P("x")},
                   state_out_specs={bs.ShortTermState: P("x")})
  g(jnp.arange(8.0))
  np.testing.assert_array_equal(s.value, np.arange(8.0))
  assert_on_mesh(s, m, P("x"))


def test_replicated_write_after_psum(axis_type):
  m = mesh((4,), ("x",), axis_type)
  total = bs.State(jnp.zeros(()), name="total")

  def f(x):
    total.value = total.value + jax.lax.psum(x.sum(), "x")
    return x

  g = bs.shard_map(f, m, P("x"), P("x"))
  g(jnp.arange(8.0))
  g(jnp.arange(8.0))
  assert float(total.value) == 2 * np.arange(8.0).sum()
  assert_on_mesh(total, m, P())


# ----------------------------------------------------------------------------
# the call forms


def test_positional_and_decorator_forms_agree():
  m = mesh((2,), ("x",))
  a = bs.State(jnp.zeros(4), name="a")
  b = bs.State(jnp.zeros(4), name="b")

  def fa(x):
    a.value = a.value + x * 2
    return a.value

  @bs.shard_map(mesh=m, in_specs=(P("x"),), out_specs=P("x"),
                state_in_specs={b: P("x")})
  def fb(x):
    b.value = b.value + x * 2
    return b.value

  ga = bs.shard_map(fa, m, (P("x"),), P("x"), state_in_specs={a: P("x")})
  x = jnp.arange(4.0)
  np.testing.assert_array_equal(ga(x), fb(x))
  np.testing.assert_array_equal(a.value, b.value)
  np.testing.assert_array_equal(a.value, np.arange(4.0) * 2)
  assert fb.__name__ == "fb"


# ----------------------------------------------------------------------------
# eager calls are cached


@pytest.mark.parametrize("n", [2, 8])
def test_eager_calls_are_cached(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  v = bs.State(jnp.zeros(16), name="v")
  w = bs.State(jnp.ones(()), name="w")
  traces = []

  def step(x):
    traces.append(1)
    v.value = v.value * w.value + x
    return jax.lax.psum(v.value.sum(), "x")

  g = bs.shard_map(step, m, (P("x"),), P(), state_in_specs={v: P("x")})
  xs = [jnp.full(16, float(i)) + jnp.arange(16.0) for i in range(4)]
  g(xs[0])
  n_traces = len(traces)
  with count_compiles() as compiles:
    for x in xs[1:]:
      g(x)
    w.value = jnp.full((), 0.5)  # same aval, new value: still cached
    out = g(xs[0])
  assert len(traces) == n_traces
  assert compiles.count == 0
  ref = np.zeros(16, np.float32)
  for x in xs[1:]:
    ref = ref + np.asarray(x)
  ref = ref + np.asarray(xs[0])  # first call
  ref = ref * 0.5 + np.asarray(xs[0])
  np.testing.assert_allclose(v.value, ref, rtol=1e-6)
  np.testing.assert_allclose(out, ref.sum(), rtol=1e-6)


def test_state_read_back_has_named_sharding_on_mesh(axis_type):
  m = mesh((2, 2), ("a", "b"), axis_type)
  s = bs.State(jnp.zeros((4, 4)), name="s", spec=P("a", "b"))
  r = bs.State(jnp.zeros(3), name="r")

  def f():
    s.value = s.value + 1
    r.value = r.value + 2

  bs.shard_map(f, m, P(), None)()
  assert_on_mesh(s, m, P("a", "b"))
  assert_on_mesh(r, m, P())
  np.testing.assert_array_equal(s.value, np.ones((4, 4)))
  np.testing.assert_array_equal(r.value, np.full(3, 2.0))
  assert "\n" not in repr(s)


# ----------------------------------------------------------------------------
# axis_names: manual over some axes, automatic over the rest; repr


def mesh_2d(axis_type):
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)


@pytest.mark.slow
def test_partial_manual_matches_unsharded(axis_type):
  mesh = mesh_2d(axis_type)
  w0 = np.asarray(jax.random.normal(jax.random.key(0), (8, 16)))
  x0 = np.asarray(jax.random.normal(jax.random.key(1), (16,)))
  W = bs.ParamState(w0, "W", spec=P("x", "y"))  # lives split over x and y
  h = bs.State(np.zeros(8, np.float32), "h", spec=P("x"))
  bs.place(W, mesh)
  placed = W.value
  shapes = []

  @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P(), axis_names={"x"})
  def step(x):
    # Manual over 'x' only: W is split by rows; its 'y' split is the
    # compiler's business, so the function sees whole rows.
    shapes.append(W.value.shape)
    h.value = h.value + W.value @ x
    return jax.lax.psum(h.value.sum(), "x")

  for _ in range(2):
    total = step(x0)
  assert shapes[-1] == (4, 16)
  np.testing.assert_allclose(h.value, 2 * w0 @ x0, rtol=1e-5)
  np.testing.assert_allclose(total, (2 * w0 @ x0).sum(), rtol=1e-5)
  assert W.value is placed  # read only, already placed: never moved
  assert h.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 1)


def test_partial_manual_inside_bs_jit(axis_type):
  mesh = mesh_2d(axis_type)
  v = bs.State(np.arange(16.0, dtype=np.float32).reshape(8, 2), "v",
               spec=P("y"))

  @bs.jit
  def run():
    @bs.shard_map(mesh=mesh, out_specs=P(), axis_names={"y"})
    def inner():
      v.value = v.value + jax.lax.axis_index("y").astype(jnp.float32)
      return jax.lax.psum(v.value.sum(), "y")
    return inner()

  out = run()
  expected = np.arange(16.0).reshape(8, 2) + np.repeat(np.arange(4), 2)[:, None]
  np.testing.assert_allclose(v.value, expected)
  np.testing.assert_allclose(out, expected.sum())


def test_shard_map_repr_names_function_and_mesh():
  def step(x):
    return x
  f = bs.shard_map(step, mesh=mesh((8,), ("x",)), in_specs=P("x"))
  assert repr(f) == "<bs.shard_map(test_shard_map_repr_names_function_and_mesh"\
      ".<locals>.step) mesh={'x': 8}>"
  assert f.__name__ == "step" and f.__wrapped__ is step


def test_eager_first_call_runs_the_body_once_and_compiles_once():
  """The body is discovered inside the real jax.shard_map at per-shard types
  and the compiled trace evaluates that discovery (issue 10)."""
  from _util import count_compiles, mesh as cached_mesh
  m = cached_mesh((8,), ("x",))
  v = bs.State(jax.device_put(jnp.zeros(16), NamedSharding(m, P("x"))),
               name="v")
  runs = []

  @bs.shard_map(mesh=m, in_specs=P("x"), out_specs=P(),
                state_in_specs={v: P("x")})
  def step(x):
    runs.append(1)
    v.value = v.value + x
    return jax.lax.psum(v.value.sum(), "x")

  x = jax.device_put(jnp.ones(16), NamedSharding(m, P("x")))
  with count_compiles() as compiles:
    first = step(x)
  assert len(runs) == 1 and compiles.count == 1
  with count_compiles() as compiles:
    second = step(x)
  assert len(runs) == 1 and compiles.count == 0
  assert float(first) == 16.0 and float(second) == 32.0
  np.testing.assert_array_equal(np.asarray(v.value), np.full(16, 2.0))


# -- a later trace runs the body again (review of the body-once change) -------------


@pytest.mark.slow
def test_a_new_trace_sees_changed_globals_and_traced_closures():
  from _util import mesh as cached_mesh
  m = cached_mesh((4,), ("x",), jax.sharding.AxisType.Auto)  # eager jax.grad
  v = bs.State(jnp.arange(8.0), name="v")
  glob = {"scale": jnp.float32(1.0)}

  @bs.shard_map(mesh=m, in_specs=P("x"), out_specs=P(),
                state_in_specs={v: P("x")})
  def g(x):
    return jax.lax.psum((v.value * x * glob["scale"]).sum(), "x")

  assert float(g(jnp.ones(8))) == 28.0  # planned with a concrete closure

  def outer(a, x):
    glob["scale"] = a
    return g(x)

  # the closure is a tracer in these new traces: the plan's body must not
  # be reused with the old constant (it gave 28 and a zero gradient)
  assert float(bs.jit(outer)(3.0, jnp.ones(8))) == 84.0
  assert float(jax.jit(outer)(3.0, jnp.ones(8))) == 84.0
  assert float(jax.grad(outer)(3.0, jnp.ones(8))) == 28.0
  glob["scale"] = jnp.float32(2.0)
  assert float(bs.jit(lambda x: g(x))(jnp.ones(8))) == 56.0


@pytest.mark.slow
def test_vmap_of_an_already_called_shard_map_draws_per_member():
  from _util import mesh as cached_mesh
  m = cached_mesh((4,), ("x",))
  rng = bs.RandomState(0)

  @bs.shard_map(mesh=m, in_specs=P("x"), out_specs=P("x"))
  def f(x):
    return x + rng.uniform(size=x.shape)

  f(jnp.zeros(4))
  rows = np.asarray(bs.vmap(f, axis_size=3)(jnp.zeros((3, 4))))
  assert len({tuple(r) for r in rows}) == 3  # members draw independently
