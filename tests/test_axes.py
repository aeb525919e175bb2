"""Logical axes on States and the rules that map them to mesh axes."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import PartitionSpec as P

import brainshard as bs


def mesh_2d(axis_type):
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)


# -- the rules context ------------------------------------------------------


def test_rules_nest_and_inner_entries_win():
  assert bs.current_axis_rules() == {}
  with bs.axis_rules({"neuron": "x", "batch": "data"}) as outer:
    assert outer == {"neuron": "x", "batch": "data"}
    with bs.axis_rules([("neuron", "y"), ("hidden", None)]):
      assert bs.current_axis_rules() == {
          "neuron": "y", "batch": "data", "hidden": None}
    assert bs.current_axis_rules() == {"neuron": "x", "batch": "data"}
  assert bs.current_axis_rules() == {}


def test_rules_are_thread_local():
  seen = []
  with bs.axis_rules({"neuron": "x"}):
    t = threading.Thread(target=lambda: seen.append(bs.current_axis_rules()))
    t.start()
    t.join()
  assert seen == [{}]


def test_rules_stack_survives_an_exception():
  with pytest.raises(KeyError):
    with bs.axis_rules({"neuron": "x"}):
      raise KeyError("boom")
  assert bs.current_axis_rules() == {}


@pytest.mark.parametrize("rules", [
    {"neuron": 3}, {1: "x"}, "neuron", [("neuron",)], {"n": ("x", 2)}])
def test_malformed_rules_are_rejected(rules):
  with pytest.raises(TypeError, match="axis rule|logical axis"):
    with bs.axis_rules(rules):
      pass


# -- resolution -------------------------------------------------------------


def test_axes_resolve_by_rules_and_tuples_of_mesh_axes():
  w = bs.State(jnp.zeros((8, 4)), "w", axes=("neuron", "hidden"))
  with bs.axis_rules({"neuron": ("x", "y"), "hidden": None}):
    assert bs.resolve_spec(w) == P(("x", "y"), None)
  assert bs.resolve_spec(w, axis_rules={"neuron": "x", "hidden": "y"}) == (
      P("x", "y"))


def test_resolution_order_state_in_specs_then_spec_then_axes():
  mesh = mesh_2d(jax.sharding.AxisType.Explicit)
  a = bs.State(jnp.zeros(8), "a", axes=("neuron",))
  b = bs.State(jnp.zeros(8), "b", axes=("neuron",), spec=P("y"))
  c = bs.State(jnp.zeros(8), "c")
  rules = {"neuron": "x"}
  assert bs.resolve_spec(a, mesh, axis_rules=rules) == P("x")
  assert bs.resolve_spec(b, mesh, axis_rules=rules) == P("y")  # spec wins
  assert bs.resolve_spec(c, mesh, axis_rules=rules) == P()
  # An explicit entry wins over both; a type key matches all three.
  specs = {b: P(), bs.State: P(("x", "y"))}
  assert bs.resolve_spec(b, mesh, specs, axis_rules=rules) == P()
  assert bs.resolve_spec(a, mesh, specs, axis_rules=rules) == P(("x", "y"))


def test_pytree_valued_state_takes_a_pytree_of_axes():
  value = {"w": jnp.zeros((8, 4)), "b": jnp.zeros(4), "n": jnp.zeros(())}
  s = bs.State(value, "layer",
               axes={"w": ("neuron", "hidden"), "b": ("hidden",), "n": None})
  spec = bs.resolve_spec(s, axis_rules={"neuron": "x", "hidden": "y"})
  assert spec == {"w": P("x", "y"), "b": P("y"), "n": P()}
  one = bs.State(value, axes=("neuron",))  # one tuple for every leaf
  with pytest.raises(ValueError, match="rank"):
    bs.resolve_spec(one, mesh_2d(jax.sharding.AxisType.Auto),
                    axis_rules={"neuron": "x"})


def test_unknown_logical_name_names_state_axis_and_rules():
  w = bs.State(jnp.zeros((8, 4)), "w", axes=("neuron", "hiden"))
  with pytest.raises(ValueError) as info:
    bs.resolve_spec(w, axis_rules={"neuron": "x", "hidden": "y"})
  msg = str(info.value)
  assert "State 'w'" in msg and "'hiden'" in msg
  assert "{'hidden': 'y', 'neuron': 'x'}" in msg


def test_rule_naming_a_missing_mesh_axis_names_the_mesh_axes():
  mesh = jax.make_mesh((8,), ("x",))
  w = bs.State(jnp.zeros((8, 4)), "w", axes=("neuron", None))
  with pytest.raises(ValueError) as info:
    bs.resolve_spec(w, mesh, axis_rules={"neuron": "model"})
  msg = str(info.value)
  assert "State 'w'" in msg and "'neuron' -> 'model'" in msg
  assert "mesh has axes ('x',)" in msg


def test_two_dimensions_on_one_mesh_axis_is_an_error():
  w = bs.State(jnp.zeros((8, 8)), "W", axes=("neuron", "neuron"))
  with pytest.raises(ValueError, match="both 'neuron' and 'neuron'.*'x'"):
    bs.resolve_spec(w, axis_rules={"neuron": "x"})


def test_spec_longer_than_rank_is_caught_with_the_state_name():
  mesh = jax.make_mesh((8,), ("x",))
  w = bs.State(jnp.zeros(8), "w", axes=("neuron", None))
  with pytest.raises(ValueError, match="State 'w'.*rank 1"):
    bs.resolve_spec(w, mesh, axis_rules={"neuron": "x"})


# -- in shard_map -------------------------------------------------------------


def _rate_step(W, r):
  def step(dt):
    full = jax.lax.all_gather(r.value, "x", tiled=True)
    r.value = r.value + dt * (-r.value + jnp.tanh(W.value @ full))
    return jax.lax.psum(r.value.sum(), "x")
  return step


def _reference(w, r, dt, steps):
  for _ in range(steps):
    r = r + dt * (-r + np.tanh(w @ r))
  return r


@pytest.mark.parametrize("n_dev", [1, 2, 4, 8])
def test_shard_map_with_logical_axes_matches_unsharded(n_dev, axis_type):
  mesh = jax.make_mesh((n_dev,), ("x",), axis_types=(axis_type,))
  w0 = np.asarray(jax.random.normal(jax.random.key(1), (16, 16))) / 16
  W = bs.ParamState(w0, "W", axes=("neuron", None))
  r = bs.ShortTermState(jnp.ones(16), "r", axes=("neuron",))
  step = bs.shard_map(_rate_step(W, r), mesh=mesh, in_specs=P(),
                      out_specs=P(), axis_rules={"neuron": "x"})
  for _ in range(3):
    total = step(0.1)
  ref = _reference(w0, np.ones(16, np.float32), 0.1, 3)
  np.testing.assert_allclose(r.value, ref, rtol=1e-5)
  np.testing.assert_allclose(total, ref.sum(), rtol=1e-5)
  assert r.sharding.is_equivalent_to(
      jax.sharding.NamedSharding(mesh, P("x")), 1)


def test_state_in_specs_entry_wins_over_axes():
  mesh = jax.make_mesh((4,), ("x",))
  v = bs.State(jnp.arange(8.0), "v", axes=("neuron",))

  @bs.shard_map(mesh=mesh, state_in_specs={v: P()}, out_specs=P("x"),
                axis_rules={"neuron": "x"})
  def shape_seen():
    return jnp.zeros(1) + v.value.shape[0]

  np.testing.assert_array_equal(shape_seen(), [8.0] * 4)  # whole, not split


def test_context_rules_are_part_of_the_cache_key():
  mesh = jax.make_mesh((2, 4), ("x", "y"))
  v = bs.State(jnp.arange(8.0), "v", axes=("neuron",))
  traces = []

  @bs.shard_map(mesh=mesh, out_specs=P(("x", "y")))
  def local_size():
    traces.append(1)
    return jnp.zeros(1) + v.value.shape[0]

  with bs.axis_rules({"neuron": "x"}):
    np.testing.assert_array_equal(local_size(), [4.0] * 8)
    n = len(traces)
    local_size()
    assert len(traces) == n  # same rules: no new trace
  with bs.axis_rules({"neuron": ("x", "y")}):
    np.testing.assert_array_equal(local_size(), [1.0] * 8)
  with bs.axis_rules({"neuron": None}):
    np.testing.assert_array_equal(local_size(), [8.0] * 8)


def test_shard_map_axis_rules_argument_wins_over_context():
  mesh = jax.make_mesh((2, 4), ("x", "y"))
  v = bs.State(jnp.arange(8.0), "v", axes=("neuron",))
  f = bs.shard_map(lambda: jnp.zeros(1) + v.value.shape[0], mesh=mesh,
                   out_specs=P(("x", "y")), axis_rules={"neuron": "y"})
  with bs.axis_rules({"neuron": "x"}):
    np.testing.assert_array_equal(f(), [2.0] * 8)


def test_shard_map_unknown_logical_name_fails_before_tracing():
  mesh = jax.make_mesh((8,), ("x",))
  v = bs.State(jnp.zeros(8), "v", axes=("neuron",))
  f = bs.shard_map(lambda: v.value.sum(), mesh=mesh)
  with pytest.raises(ValueError, match="State 'v'.*'neuron'"):
    f()
  with pytest.raises(ValueError, match="State 'v'.*mesh has axes"):
    with bs.axis_rules({"neuron": "data"}):
      f()
  np.testing.assert_array_equal(v.value, np.zeros(8))


def test_axes_inside_bs_jit_use_the_rules_at_trace_time():
  mesh = jax.make_mesh((8,), ("x",))
  v = bs.State(jnp.arange(8.0), "v", axes=("neuron",))

  @bs.jit
  def run():
    @bs.shard_map(mesh=mesh, out_specs=P("x"))
    def inner():
      v.value = v.value * 2
      return jnp.zeros(1) + v.value.shape[0]
    return inner()

  with bs.axis_rules({"neuron": "x"}):
    np.testing.assert_array_equal(run(), [1.0] * 8)
  np.testing.assert_array_equal(v.value, 2 * np.arange(8.0))


# -- property: logical axes place exactly like the equivalent spec ------------


MESHES = [((8,), ("a",)), ((2, 4), ("a", "b")), ((4, 2), ("a", "b")),
          ((2, 2, 2), ("a", "b", "c"))]


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.sampled_from(MESHES), st.data())
def test_logical_axes_place_like_the_equivalent_spec(mesh_def, data):
  shape_, names = mesh_def
  mesh = jax.make_mesh(shape_, names)
  rank = data.draw(st.integers(1, 3))
  # Each dimension gets its own logical name, mapped to an unused mesh axis
  # or to None.
  free = list(names)
  rules, dims = {}, []
  for d in range(rank):
    target = data.draw(st.sampled_from([None, *free]))
    if target is not None:
      free.remove(target)
    rules[f"dim{d}"] = target
    dims.append(mesh.shape[target] * data.draw(st.integers(1, 2))
                if target else data.draw(st.integers(1, 3)))
  value = np.arange(np.prod(dims), dtype=np.float32).reshape(dims)
  by_axes = bs.State(value, axes=tuple(rules))
  by_spec = bs.State(value, spec=P(*rules.values()))
  bs.place([by_axes, by_spec], mesh, axis_rules=rules)
  assert by_axes.sharding == by_spec.sharding
  for a, b in zip(by_axes.value.addressable_shards,
                  by_spec.value.addressable_shards):
    assert a.index == b.index
    np.testing.assert_array_equal(a.data, value[a.index])
