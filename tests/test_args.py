"""Static and dynamic call arguments (brainshard/_core/args.py), the one
split every transform uses: static arguments (by position, negative
position or name) steer tracing and key the caches, must be hashable and take
no spec; States are never arguments."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs


def test_static_argnums_and_argnames():
  s = bs.State(jnp.ones(2), name="s")
  traces = []

  def f(x, n, *, mode="add"):
    traces.append((n, mode))
    for _ in range(n):  # Python control flow on a static argument
      s.value = s.value + x if mode == "add" else s.value * x
    return s.value

  sf = bs.StatefulFunction(f, static_argnums=1, static_argnames="mode")
  j2 = sf.make_jaxpr(1.0, 2)
  sf.make_jaxpr(5.0, 2)
  assert len(traces) == 1
  j3 = sf.make_jaxpr(1.0, 3)
  assert len(traces) == 2
  assert len(j3.jaxpr.eqns) > len(j2.jaxpr.eqns)
  # the static argument is not an input
  assert len(j2.jaxpr.invars) == 2
  sf.make_jaxpr(1.0, 2, mode="mul")
  assert len(traces) == 3
  sf.make_jaxpr(1.0, 2, mode="mul")
  assert len(traces) == 3

  new_vals, out = sf.jaxpr_call([jnp.full(2, 3.0)], 2.0, 3, mode="mul")
  np.testing.assert_allclose(new_vals[0], [24.0, 24.0])
  np.testing.assert_allclose(out, [24.0, 24.0])
  new_vals, out = sf.jaxpr_call([jnp.full(2, 3.0)], 2.0, 3)
  np.testing.assert_allclose(out, [9.0, 9.0])
  np.testing.assert_array_equal(s.value, np.ones(2))


@pytest.mark.parametrize("how", ["positional", "keyword", "in_pytree"])
def test_state_as_argument_is_type_error(how):
  s = bs.State(jnp.ones(3), name="passed")
  sf = bs.StatefulFunction(lambda *a, **k: 0.0)
  with pytest.raises(TypeError, match="close over") as info:
    if how == "positional":
      sf.make_jaxpr(s)
    elif how == "keyword":
      sf.make_jaxpr(x=s)
    else:
      sf.make_jaxpr({"a": [jnp.ones(2), s]})
  assert "passed" in str(info.value)
  np.testing.assert_array_equal(s.value, np.ones(3))


@pytest.mark.parametrize("form", ["position", "name", "both"])
def test_static_args_by_position_and_by_name(form):
  s = bs.State(jnp.zeros(2), name="s")
  traces = []
  kw = {"position": dict(static_argnums=1), "name": dict(static_argnames="n"),
        "both": dict(static_argnums=1, static_argnames="n")}[form]

  @bs.jit(**kw)
  def f(x, n):
    traces.append(n)
    for _ in range(n):  # needs a Python int
      s.value = s.value + x
    return s.value

  f(1.0, 2)
  f(1.0, n=2)
  f(2.0, 3)
  f(2.0, n=3)
  np.testing.assert_array_equal(s.value, np.full(2, 1 * 2 + 1 * 2 + 2 * 3 + 2 * 3))
  # only two distinct static values were seen
  assert set(traces) == {2, 3}


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
