"""shard_map: axis_names, mesh from jax.set_mesh, static arguments, keyword
argument specs and per-argument spec pytrees."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import mesh


def mesh_2d(axis_type):
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)


# -- axis_names: manual over some axes, automatic over the rest ---------------


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


def test_partial_manual_argument_spec_must_name_manual_axes():
  mesh = mesh_2d(jax.sharding.AxisType.Explicit)
  f = bs.shard_map(lambda a: a, mesh=mesh, in_specs=P("y"), out_specs=P(),
                   axis_names={"x"})
  with pytest.raises(ValueError,
                     match=r"positional argument 0 .*'y'.*manual only over"):
    f(jnp.zeros(8))


# -- mesh=None: the mesh set with jax.set_mesh ----------------------------------


def test_mesh_from_set_mesh_eager_and_under_bs_jit(axis_type):
  mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
  v = bs.State(jnp.arange(8.0), "v", spec=P("x"))

  @bs.shard_map(in_specs=P("x"), out_specs=P())
  def step(a):
    v.value = v.value + a
    return jax.lax.psum(v.value.sum(), "x")

  with jax.set_mesh(mesh):
    assert float(step(jnp.ones(8))) == 36.0
    assert float(bs.jit(step)(jnp.ones(8))) == 44.0
  assert v.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 1)
  np.testing.assert_array_equal(v.value, np.arange(8.0) + 2)


def test_mesh_from_set_mesh_changes_with_the_context():
  v = bs.State(jnp.arange(8.0), "v", spec=P("x"))
  f = bs.shard_map(lambda: jnp.zeros(1) + v.value.shape[0], out_specs=P("x"))
  with jax.set_mesh(jax.make_mesh((8,), ("x",))):
    np.testing.assert_array_equal(f(), [1.0] * 8)
  with jax.set_mesh(jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])):
    np.testing.assert_array_equal(f(), [4.0] * 2)


def test_no_mesh_anywhere_is_a_clear_error():
  f = bs.shard_map(lambda: None)
  with pytest.raises(ValueError, match="has no mesh.*jax.set_mesh"):
    f()


# -- static arguments -----------------------------------------------------------


def test_static_argnums_steer_the_trace_and_take_no_spec():
  mesh = jax.make_mesh((8,), ("x",))
  v = bs.State(jnp.zeros(8), "v", spec=P("x"))
  traces = []

  # in_specs has one entry per *dynamic* positional argument: (dt,).
  @bs.shard_map(mesh=mesh, in_specs=(P(),), out_specs=P(), static_argnums=1)
  def run(dt, n_steps):
    traces.append(n_steps)
    for _ in range(n_steps):
      v.value = v.value + dt
    return jax.lax.psum(v.value.sum(), "x")

  assert float(run(1.0, 3)) == 24.0
  n = len(traces)
  assert float(run(1.0, 3)) == 48.0
  assert len(traces) == n  # same static value: cached
  assert float(run(0.5, 2)) == 56.0  # new static value: traced again
  assert traces[-1] == 2
  np.testing.assert_array_equal(v.value, np.full(8, 7.0))
  # Declared by position, passed by keyword: still static.
  assert float(run(1.0, n_steps=1)) == 64.0


def test_static_argnames_and_unhashable_static_values():
  mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])

  @bs.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                static_argnames="mode")
  def f(a, mode="double"):
    return a * 2 if mode == "double" else a + 1

  np.testing.assert_array_equal(f(jnp.arange(4.0)), [0, 2, 4, 6])
  np.testing.assert_array_equal(f(jnp.arange(4.0), mode="inc"), [1, 2, 3, 4])
  np.testing.assert_array_equal(f(jnp.arange(4.0), "inc"), [1, 2, 3, 4])
  with pytest.raises((TypeError, ValueError), match="hashable"):
    f(jnp.arange(4.0), mode=["double"])


def test_static_args_under_bs_jit():
  mesh = jax.make_mesh((8,), ("x",))
  v = bs.State(jnp.ones(8), "v", spec=P("x"))
  sm = bs.shard_map(functools.partial(_scale, v), mesh=mesh,
                    static_argnums=0)

  @bs.jit
  def run():
    sm(2)
    sm(3)

  run()
  np.testing.assert_array_equal(v.value, np.full(8, 6.0))


def _scale(v, k):
  v.value = v.value * k


def test_negative_static_argnums():
  mesh = jax.make_mesh((8,), ("x",))

  @bs.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                static_argnums=-1)
  def f(a, k):
    return a * k

  np.testing.assert_array_equal(f(jnp.ones(8), 3), np.full(8, 3.0))


# -- keyword arguments with specs -------------------------------------------------


def test_kwarg_specs_split_keyword_arguments():
  mesh = jax.make_mesh((8,), ("x",))
  acc = bs.State(jnp.zeros(8), "acc", spec=P("x"))
  seen = []

  @bs.shard_map(mesh=mesh, out_specs=P(), kwarg_specs={"drive": P("x")})
  def step(*, drive, gain):
    seen.append((drive.shape, gain.shape))
    acc.value = acc.value + gain * drive
    return jax.lax.psum(acc.value.sum(), "x")

  drive = jnp.arange(8.0)
  out = step(drive=drive, gain=jnp.full(3, 2.0)[0])
  assert seen[-1] == ((1,), ())  # drive split, gain replicated
  np.testing.assert_array_equal(acc.value, 2 * np.arange(8.0))
  assert float(out) == 56.0


def test_kwarg_specs_validation():
  mesh = jax.make_mesh((8,), ("x",))
  with pytest.raises(ValueError, match="'n', which is a static"):
    bs.shard_map(lambda n: n, mesh=mesh, static_argnames="n",
                 kwarg_specs={"n": P()})
  with pytest.raises(TypeError, match="kwarg_specs must be a dict"):
    bs.shard_map(lambda n: n, mesh=mesh, kwarg_specs=[P()])
  f = bs.shard_map(lambda *, a: a, mesh=mesh, out_specs=P("x"),
                   kwarg_specs={"a": P("x")})
  with pytest.raises(ValueError, match="keyword argument 'a'.*not divisible"):
    f(a=jnp.zeros(6))


# -- per-argument spec pytrees -----------------------------------------------------


def test_dict_argument_takes_a_dict_of_specs(axis_type):
  mesh = jax.make_mesh((4,), ("x",), axis_types=(axis_type,),
                       devices=jax.devices()[:4])
  batch = {"x": jnp.arange(8.0), "w": jnp.arange(3.0)}
  seen = []

  @bs.shard_map(mesh=mesh, in_specs=({"x": P("x"), "w": P()}, P()),
                out_specs=P("x"))
  def f(b, scale):
    seen.append((b["x"].shape, b["w"].shape))
    return b["x"] * b["w"].sum() * scale

  np.testing.assert_array_equal(f(batch, 2.0), np.arange(8.0) * 6.0)
  assert seen[-1] == ((2,), (3,))


def test_tuple_argument_with_a_prefix_and_a_mismatch():
  mesh = jax.make_mesh((8,), ("x",))

  @bs.shard_map(mesh=mesh, in_specs=((P("x"), P()),), out_specs=P("x"))
  def f(pair):
    a, b = pair
    return a + b.sum()

  np.testing.assert_array_equal(f((jnp.zeros(8), jnp.ones(2))), np.full(8, 2.0))
  with pytest.raises(ValueError, match="positional argument 0"):
    f((jnp.zeros(8), jnp.ones(2), jnp.ones(2)))


# -- state_out_specs changes a state's per-shard shape (issue 9, item 2) ------------


def test_write_only_state_takes_its_out_spec_shape():
  m = mesh((8,), ("x",))
  o = bs.State(jnp.zeros(16), name="o")

  def step(x):
    o.value = x * 2.0  # each shard writes its block

  bs.shard_map(step, mesh=m, in_specs=P("x"), out_specs=P(),
               state_out_specs={o: P("x")})(jnp.arange(16.0))
  np.testing.assert_array_equal(np.asarray(o.value), np.arange(16.0) * 2)
  assert o.value.shape == (16,)


def test_read_split_gather_and_write_whole():
  m = mesh((8,), ("x",))
  s = bs.State(jnp.arange(16.0), name="s")

  def step():
    s.value = jax.lax.all_gather(s.value, "x", tiled=True) + 1.0

  # JAX types an all_gather result as per-shard data, so storing it
  # replicated needs check_vma=False, as in jax.shard_map.
  bs.shard_map(step, mesh=m, in_specs=(), out_specs=P(), check_vma=False,
               state_in_specs={s: P("x")}, state_out_specs={s: P()})()
  np.testing.assert_array_equal(np.asarray(s.value), np.arange(16.0) + 1)
  with pytest.raises(ValueError, match=r"State 's'.*check_vma=False"):
    bs.shard_map(step, mesh=m, in_specs=(), out_specs=P(),
                 state_in_specs={s: P("x")}, state_out_specs={s: P()})()
  np.testing.assert_array_equal(np.asarray(s.value), np.arange(16.0) + 1)


def test_read_whole_and_write_each_shards_block():
  m = mesh((8,), ("x",))
  r = bs.State(jnp.arange(16.0), name="r")

  def step():
    i = jax.lax.axis_index("x")
    r.value = jax.lax.dynamic_slice_in_dim(r.value, i * 2, 2) * 10.0

  f = bs.shard_map(step, mesh=m, in_specs=(), out_specs=P(),
                   state_in_specs={r: P()}, state_out_specs={r: P("x")})
  f()
  np.testing.assert_array_equal(np.asarray(r.value), np.arange(16.0) * 10)
  f()  # again, now entering from its P('x') layout
  np.testing.assert_array_equal(np.asarray(r.value), np.arange(16.0) * 100)
  bs.jit(f)()  # and compiled
  np.testing.assert_array_equal(np.asarray(r.value), np.arange(16.0) * 1000)


def test_write_of_the_wrong_per_shard_shape_names_the_out_spec_shape():
  m = mesh((8,), ("x",))
  o = bs.State(jnp.zeros(16), name="o")

  def step(x):
    o.value = jnp.concatenate([x, x])  # 4 per shard, but P('x') means 2

  with pytest.raises(ValueError, match=r"State 'o' holds float32\[2\].*"
                     r"written with float32\[4\]"):
    bs.shard_map(step, mesh=m, in_specs=P("x"), out_specs=P(),
                 state_out_specs={o: P("x")})(jnp.arange(16.0))
  np.testing.assert_array_equal(np.asarray(o.value), np.zeros(16))


# -- the replicated-state hint is in the message (issue 9, item 4) ----------------


def test_replicated_state_hint_is_in_str_of_the_error():
  m = mesh((8,), ("x",))
  rep = bs.State(jnp.ones(16), name="rep")
  with pytest.raises(TypeError) as info:
    bs.shard_map(lambda x: (rep.value * x).sum(), mesh=m, in_specs=P("x"),
                 out_specs=P())(jnp.ones(16))
  message = str(info.value)
  assert "incompatible shapes" in message  # JAX's own words stay
  assert "state_in_specs={rep: P('x')}" in message
  assert "State 'rep' (float32[16])" in message


def test_shard_map_repr_names_function_and_mesh():
  def step(x):
    return x
  f = bs.shard_map(step, mesh=mesh((8,), ("x",)), in_specs=P("x"))
  assert repr(f) == "<bs.shard_map(test_shard_map_repr_names_function_and_mesh"\
      ".<locals>.step) mesh={'x': 8}>"
  assert f.__name__ == "step" and f.__wrapped__ is step
