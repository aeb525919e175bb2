"""State and its subclasses (brainshard/_core/state/state.py): construction, value
access, metadata, sharding and repr. Tracing through frames (threads
included) is in test_frames.py."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import mesh

STATE_TYPES = [bs.State, bs.ParamState, bs.ShortTermState, bs.LongTermState]


def _is_strong_jax_array(x):
  return isinstance(x, jax.Array) and not jax.typeof(x).weak_type


# ----------------------------------------------------------------------------
# construction


@pytest.mark.parametrize("cls", STATE_TYPES)
def test_python_float_becomes_strong_float32_array(cls):
  s = cls(3.0)
  assert isinstance(s, bs.State)
  assert _is_strong_jax_array(s.value)
  assert s.value.dtype == jnp.float32
  assert s.value.shape == ()
  assert float(s.value) == 3.0


@pytest.mark.parametrize("value, dtype", [
    (2, jnp.int32), (True, jnp.bool_), (1.5, jnp.float32),
    (np.arange(4), jnp.int32), (np.ones((2, 3)), jnp.float32),
    (np.ones(3, np.float16), jnp.float16), (np.arange(3, dtype=np.int8), jnp.int8),
])
def test_scalars_and_numpy_become_strong_jax_arrays(value, dtype):
  s = bs.State(value)
  assert _is_strong_jax_array(s.value)
  assert s.value.dtype == dtype
  assert s.value.shape == np.shape(value)
  np.testing.assert_array_equal(np.asarray(s.value), np.asarray(value))


def test_jax_array_is_kept():
  x = jnp.arange(5.0)
  s = bs.State(x)
  np.testing.assert_array_equal(s.value, x)
  assert s.value.dtype == x.dtype


def test_pytree_value():
  s = bs.ShortTermState({"v": np.zeros(3), "i": (1.0, 2)}, name="neuron")
  value = s.value
  assert set(value) == {"v", "i"}
  assert isinstance(value["i"], tuple)
  for leaf in jax.tree.leaves(value):
    assert _is_strong_jax_array(leaf)
  assert value["v"].dtype == jnp.float32 and value["v"].shape == (3,)
  assert value["i"][0].dtype == jnp.float32
  assert value["i"][1].dtype == jnp.int32
  assert jax.tree.structure(value) == jax.tree.structure(
      {"v": 0, "i": (0, 0)})


def test_non_array_leaf_is_rejected():
  with pytest.raises(TypeError, match="str"):
    bs.State("not an array")
  with pytest.raises(TypeError, match="object"):
    bs.State({"a": object()})


def test_state_of_state_is_rejected():
  inner = bs.State(1.0, name="inner")
  with pytest.raises(TypeError, match="inner"):
    bs.State(inner)


def test_subclasses_are_distinct_types():
  p, s, l = bs.ParamState(1.0), bs.ShortTermState(1.0), bs.LongTermState(1.0)
  assert type(p) is bs.ParamState and not isinstance(p, bs.ShortTermState)
  assert type(s) is bs.ShortTermState and not isinstance(s, bs.LongTermState)
  assert type(l) is bs.LongTermState and not isinstance(l, bs.ParamState)
  assert all(isinstance(x, bs.State) for x in (p, s, l))


# ----------------------------------------------------------------------------
# value, restore_value, name, spec


@pytest.mark.parametrize("cls", STATE_TYPES)
def test_value_set_and_get(cls):
  s = cls(jnp.zeros(3))
  s.value = np.array([1.0, 2.0, 3.0])
  assert _is_strong_jax_array(s.value)
  np.testing.assert_array_equal(s.value, [1.0, 2.0, 3.0])
  s.value = 5.0  # outside a transform any new value (and shape) is allowed
  assert _is_strong_jax_array(s.value)
  assert s.value.shape == () and float(s.value) == 5.0
  s.value = {"a": jnp.ones(2)}
  assert jax.tree.structure(s.value) == jax.tree.structure({"a": 0})


def test_restore_value_sets_value():
  s = bs.State(jnp.zeros(2))
  s.restore_value(np.array([4.0, 5.0]))
  assert _is_strong_jax_array(s.value)
  np.testing.assert_array_equal(s.value, [4.0, 5.0])
  s.restore_value(7)
  assert s.value.dtype == jnp.int32 and int(s.value) == 7


def test_name_and_spec():
  s = bs.State(jnp.zeros(4))
  assert s.name is None and s.spec is None
  t = bs.ParamState(jnp.zeros(4), name="w", spec=P("x"))
  assert t.name == "w"
  assert t.spec == P("x")
  tree_spec = {"a": P("x"), "b": P()}
  u = bs.State({"a": jnp.zeros(4), "b": jnp.zeros(2)}, "u", spec=tree_spec)
  assert u.name == "u" and u.spec == tree_spec


def test_value_updates_are_seen_by_jit_reads():
  s = bs.State(jnp.ones(3))
  f = bs.jit(lambda: s.value * 2)
  np.testing.assert_array_equal(f(), 2 * np.ones(3))
  s.restore_value(jnp.full(3, 5.0))
  np.testing.assert_array_equal(f(), 10 * np.ones(3))


def test_reading_under_plain_jax_jit_is_allowed():
  s = bs.State(jnp.arange(3.0))
  out = jax.jit(lambda x: x + s.value)(1.0)
  np.testing.assert_array_equal(out, np.arange(3.0) + 1)


# ----------------------------------------------------------------------------
# sharding


def test_sharding_is_none_for_unplaced_value():
  # The issue: `.sharding` is "the NamedSharding of the current value, or
  # None"; a plain single-device array is on no mesh.
  s = bs.State(jnp.zeros(4))
  assert s.sharding is None


def test_sharding_is_named_sharding_of_placed_value(axis_type):
  m = mesh((4,), ("x",), axis_type)
  target = NamedSharding(m, P("x"))
  s = bs.State(jax.device_put(jnp.arange(8.0), target), name="v")
  assert isinstance(s.sharding, NamedSharding)
  assert s.sharding == target
  assert s.sharding.spec == P("x")
  s.value = jax.device_put(jnp.arange(8.0), NamedSharding(m, P()))
  assert s.sharding == NamedSharding(m, P())


def test_sharding_of_pytree_value():
  m = mesh((2,), ("x",))
  a = jax.device_put(jnp.zeros(4), NamedSharding(m, P("x")))
  b = jax.device_put(jnp.zeros(2), NamedSharding(m, P()))
  s = bs.State({"a": a, "b": b})
  sh = s.sharding
  assert sh["a"] == NamedSharding(m, P("x"))
  assert sh["b"] == NamedSharding(m, P())


# ----------------------------------------------------------------------------
# repr


@pytest.mark.parametrize("cls", STATE_TYPES)
def test_repr_is_short_one_line_and_has_no_values(cls):
  s = cls(jnp.full(1000, 123.456, jnp.float32), name="big")
  r = repr(s)
  assert "\n" not in r
  assert len(r) < 200, r
  assert cls.__name__ in r
  assert "big" in r
  assert "1000" in r and "float32" in r
  assert "123.4" not in r


def test_repr_of_pytree_has_every_leaf_and_no_values():
  s = bs.State({"v": jnp.full((10, 20), 7.25), "n": jnp.full(30, 9, jnp.int32)},
               name="pop")
  r = repr(s)
  assert "\n" not in r and len(r) < 250, r
  assert "pop" in r
  assert "float32" in r and "10" in r and "20" in r
  assert "int32" in r and "30" in r
  assert "7.25" not in r


def test_repr_shows_sharding(axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.State(jax.device_put(jnp.zeros((8, 8)), NamedSharding(m, P("x"))),
               name="sharded")
  r = repr(s)
  assert "\n" not in r
  assert "sharded" in r and "float32" in r
  assert "'x'" in r  # the spec


def test_repr_without_name():
  s = bs.State(jnp.zeros((3, 2), jnp.int32))
  r = repr(s)
  assert r.startswith("State(") and "\n" not in r
  assert "int32" in r and "3" in r and "2" in r


# ----------------------------------------------------------------------------
# a list of numbers is not a pytree of scalars (issue 21)


@pytest.mark.parametrize("value, shape", [
    ([1, 2, 3], "(3,)"), ((1.0, 2.0), "(2,)"), ([[1, 2], [3, 4]], "(2, 2)"),
    ([np.float32(1), 2.0], "(2,)")])
def test_a_list_of_numbers_is_an_error_saying_use_an_array(value, shape):
  with pytest.raises(TypeError, match=(
      rf"ParamState\('w'\): the value is a {type(value).__name__} of "
      rf".*not one array of shape {re.escape(shape)}.*jnp.asarray")):
    bs.ParamState(value, name="w")


def test_a_long_list_of_numbers_fails_at_once_with_a_short_message():
  with pytest.raises(TypeError) as info:
    bs.State(list(range(4000)))
  message = str(info.value)
  assert "4000 Python numbers" in message and len(message) < 400


def test_writing_a_list_of_numbers_is_an_error_and_changes_nothing():
  v = bs.State(jnp.zeros(3), name="v")
  before = v.value
  with pytest.raises(TypeError, match=r"State 'v' \(written\): the value is "
                     r"a list of 3 Python numbers.*jnp.asarray"):
    v.value = [1.0, 2.0, 3.0]
  assert v.value is before
  v.value = jnp.asarray([1.0, 2.0, 3.0])  # the fix works
  np.testing.assert_array_equal(np.asarray(v.value), [1.0, 2.0, 3.0])


def test_pytrees_of_arrays_and_dicts_of_numbers_stay_valid():
  s = bs.State([jnp.ones(2), jnp.zeros(2)])
  assert jax.tree.structure(s.value) == jax.tree.structure([0, 0])
  s.value = [jnp.zeros(2), jnp.ones(2)]
  d = bs.State({"a": 1.0, "b": 2})
  assert d.value["b"].dtype == jnp.int32
  t = bs.State([jnp.asarray(1.0), jnp.asarray(2.0)])
  t.value = [3.0, 4.0]  # its structure is already a list of scalars
  assert float(t.value[1]) == 4.0
  assert bs.State([]).value == []


# -- brainstate's State methods (issue 24) ----------------------------------


def test_replace_keyword_forms():
  w = bs.ParamState(jnp.ones(2), name="w", spec=P())
  renamed = w.replace(_name="w2")      # brainstate's spelling
  assert (type(renamed), renamed.name, renamed.spec) == (bs.ParamState, "w2", P())
  assert renamed.value is not None and float(renamed.value.sum()) == 2.0
  assert w.replace(name="w3", value=jnp.zeros(2)).name == "w3"
  other = bs.ParamState(jnp.zeros(2))
  assert w.replace(other) is other     # brainstate: the same-type State itself
  with pytest.raises(ValueError, match="of another type"):
    w.replace(bs.State(jnp.zeros(2)))
  with pytest.raises(TypeError, match=r"replace\(\) got colour="):
    w.replace(colour="red")


def test_numel_and_copy_from():
  assert bs.State(jnp.ones(())).numel() == 1
  assert bs.State({"a": jnp.ones((2, 3)), "b": [jnp.ones(4)]}).numel() == 10
  a, b = bs.State(jnp.ones(2)), bs.State(jnp.zeros(2))
  a.copy_from(b)
  assert float(a.value.sum()) == 0.0
  a.copy_from(a)
  with pytest.raises(ValueError, match="same type"):
    a.copy_from(bs.ShortTermState(jnp.zeros(2)))


def test_state_ref_round_trip_and_tree_map():
  p1 = bs.ParamState(jnp.ones(3), name="p")
  p2 = bs.ParamState(jnp.full(3, 2.0), name="p")
  r1, r2 = p1.to_state_ref(), p2.to_state_ref()
  assert jax.tree.structure(r1) == jax.tree.structure(r2)
  total = jax.tree.map(lambda a, b: a + b, r1, r2)
  rebuilt = total.to_state()
  assert type(rebuilt) is bs.ParamState and rebuilt.name == "p"
  assert float(rebuilt.value[0]) == 3.0
  p1.update_from_ref(total)
  assert float(p1.value[0]) == 3.0
  assert total.replace(jnp.zeros(3)).name == "p" and total.copy().type is bs.ParamState
  assert total.get_metadata() == {"name": "p", "spec": None, "axes": None}


def test_state_ref_inside_jit_is_a_write():
  v = bs.State(jnp.zeros(2), name="v")

  @bs.jit
  def step():
    ref = v.to_state_ref()
    v.update_from_ref(jax.tree.map(lambda x: x + 1, ref))

  step(); step()
  assert float(v.value[0]) == 2.0
