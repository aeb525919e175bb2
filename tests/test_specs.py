"""Resolving and validating PartitionSpecs (brainshard/_core/specs.py), seen
through shard_map: which spec each State gets (state_in_specs keys by State,
type and predicate, the State's own spec, pytree specs), the forms of
in_specs and kwarg_specs, and the errors for specs that do not fit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import assert_on_mesh, mesh


def _shard_shapes(state_in_specs, *states):
  """Per-shard shapes each state has inside shard_map on an 8-device mesh."""
  m = mesh((8,), ("x",))
  seen = {}

  def f(x):
    for s in states:
      seen[s.name] = s.value.shape
    return x

  bs.shard_map(f, m, P(), P(), state_in_specs=state_in_specs)(jnp.zeros(()))
  return seen


def _states():
  plain = bs.State(jnp.zeros((8, 8)), name="plain")
  param = bs.ParamState(jnp.zeros((8, 8)), name="param")
  short = bs.ShortTermState(jnp.zeros((8, 8)), name="short")
  return plain, param, short


ROWS, COLS, WHOLE = (1, 8), (8, 1), (8, 8)


def test_default_is_replicated():
  plain, param, short = _states()
  assert _shard_shapes(None, plain, param) == {"plain": WHOLE, "param": WHOLE}


def test_state_own_spec():
  s = bs.State(jnp.zeros((8, 8)), name="own", spec=P(None, "x"))
  t = bs.State(jnp.zeros((8, 8)), name="other")
  assert _shard_shapes(None, s, t) == {"own": COLS, "other": WHOLE}
  assert _shard_shapes({}, s, t) == {"own": COLS, "other": WHOLE}


def test_single_spec_applies_to_every_state():
  plain, param, short = _states()
  assert _shard_shapes(P("x"), plain, param, short) == {
      "plain": ROWS, "param": ROWS, "short": ROWS}


def test_state_key_beats_type_key_wherever_it_is_in_the_dict():
  plain, param, short = _states()
  first = {bs.ParamState: P("x"), param: P(None, "x")}
  last = {param: P(None, "x"), bs.ParamState: P("x")}
  for specs in (first, last):
    assert _shard_shapes(specs, plain, param) == {"plain": WHOLE, "param": COLS}


def test_state_key_beats_predicate_key():
  plain, param, short = _states()
  specs = {(lambda s: True): P("x"), short: P(None, "x")}
  assert _shard_shapes(specs, plain, short) == {"plain": ROWS, "short": COLS}


def test_type_key_matches_subclass_instances():
  plain, param, short = _states()
  assert _shard_shapes({bs.State: P("x")}, plain, param, short) == {
      "plain": ROWS, "param": ROWS, "short": ROWS}
  assert _shard_shapes({bs.ShortTermState: P("x")}, plain, param, short) == {
      "plain": WHOLE, "param": WHOLE, "short": ROWS}


def test_type_and_predicate_keys_in_dict_order():
  plain, param, short = _states()
  by_name = lambda s: s.name in ("param", "plain")
  a = {bs.ParamState: P("x"), by_name: P(None, "x")}
  b = {by_name: P(None, "x"), bs.ParamState: P("x")}
  assert _shard_shapes(a, plain, param, short) == {
      "plain": COLS, "param": ROWS, "short": WHOLE}
  assert _shard_shapes(b, plain, param, short) == {
      "plain": COLS, "param": COLS, "short": WHOLE}


def test_key_beats_state_own_spec():
  s = bs.ParamState(jnp.zeros((8, 8)), name="s", spec=P(None, "x"))
  assert _shard_shapes({bs.ParamState: P("x")}, s) == {"s": ROWS}
  assert _shard_shapes({(lambda st: st.name == "s"): P()}, s) == {"s": WHOLE}
  assert _shard_shapes({s: P("x")}, s) == {"s": ROWS}
  # a key that does not match falls through to the state's own spec
  assert _shard_shapes({bs.ShortTermState: P("x")}, s) == {"s": COLS}


def test_pytree_state_one_spec_for_all_leaves(axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.State({"a": jnp.zeros(8), "b": jnp.zeros((4, 2))}, name="tree")
  seen = {}

  def f(x):
    seen["shapes"] = jax.tree.map(jnp.shape, s.value)
    s.value = {"a": s.value["a"] + x, "b": s.value["b"] + 1}
    return x

  g = bs.shard_map(f, m, P(), P(), state_in_specs={s: P("x")})
  g(jnp.ones((), jnp.float32))
  assert seen["shapes"] == {"a": (2,), "b": (1, 2)}
  np.testing.assert_array_equal(s.value["a"], np.ones(8))
  np.testing.assert_array_equal(s.value["b"], np.ones((4, 2)))
  assert_on_mesh(s, m, [P("x"), P("x")])


def test_pytree_state_pytree_of_specs(axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.State({"a": jnp.arange(8.0), "b": jnp.arange(8.0).reshape(2, 4)},
               name="tree", spec={"a": P("x"), "b": P(None, "x")})
  seen = {}

  def f():
    seen["shapes"] = jax.tree.map(jnp.shape, s.value)
    s.value = jax.tree.map(lambda v: v * 2, s.value)

  bs.shard_map(f, m, P(), None)()
  assert seen["shapes"] == {"a": (2,), "b": (2, 1)}
  np.testing.assert_array_equal(s.value["a"], np.arange(8.0) * 2)
  np.testing.assert_array_equal(s.value["b"], np.arange(8.0).reshape(2, 4) * 2)
  assert_on_mesh(s, m, [P("x"), P(None, "x")])


def test_pytree_spec_prefix_via_state_in_specs():
  m = mesh((2,), ("x",))
  s = bs.State({"pre": (jnp.zeros(4), jnp.zeros(6)), "post": jnp.zeros(3)},
               name="tree")
  seen = {}

  def f():
    seen["shapes"] = jax.tree.map(jnp.shape, s.value)

  bs.shard_map(f, m, P(), None,
               state_in_specs={s: {"pre": P("x"), "post": P()}})()
  assert seen["shapes"] == {"pre": ((2,), (3,)), "post": (3,)}


def test_in_specs_forms():
  m = mesh((4,), ("x",))
  seen = {}

  def f(a, b):
    seen["a"], seen["b"] = jax.tree.map(jnp.shape, (a, b))
    return a["u"].sum() + a["v"].sum() + b.sum()

  a = {"u": jnp.ones(8), "v": jnp.ones((4, 4))}
  b = jnp.ones(4)
  ref = 8 + 16 + 4
  # one spec for every argument
  g = bs.shard_map(lambda a, b: jax.lax.psum(f(a, b), "x"), m, P("x"), P())
  np.testing.assert_allclose(g(a, b), ref)
  assert seen == {"a": {"u": (2,), "v": (1, 4)}, "b": (1,)}
  g = bs.shard_map(lambda a, b: jax.lax.psum(f(a, b), "x") / 4, m,
                   ({"u": P("x"), "v": P()}, P()), P())  # per-arg prefixes
  np.testing.assert_allclose(g(a, b), (2 + 16 + 4) * 4 / 4)
  assert seen == {"a": {"u": (2,), "v": (4, 4)}, "b": (4,)}


def test_in_specs_none_follows_argument_sharding():
  m = mesh((4,), ("x",))
  seen = {}

  def f(x):
    seen["x"] = x.shape
    return x * 2

  g = bs.shard_map(f, m, None, P("x"))
  x = jax.device_put(jnp.arange(8.0), NamedSharding(m, P("x")))
  np.testing.assert_array_equal(g(x), np.arange(8.0) * 2)
  assert seen["x"] == (2,)


def test_keyword_arguments_are_replicated(axis_type):
  m = mesh((4,), ("x",), axis_type)
  seen = {}

  def f(x, *, bias, scale):
    seen["bias"], seen["x"] = bias.shape, x.shape
    return x * scale + bias[: x.shape[0]].sum()

  g = bs.shard_map(f, m, (P("x"),), P("x"))
  x = np.arange(8, dtype=np.float32)
  bias = np.arange(8, dtype=np.float32)
  out = g(jnp.asarray(x), bias=jnp.asarray(bias), scale=jnp.float32(3.0))
  assert seen == {"bias": (8,), "x": (2,)}
  np.testing.assert_allclose(out, x * 3.0 + bias[:2].sum())


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
