"""Planning a bs.shard_map call (brainshard/_transforms/shard_map/plan.py): the
mesh (given, or from jax.set_mesh at call time), the manual axes, keyword
argument specs, which states the body reads and writes (a plan per argument
and state signature), each spec validated once per trace, and the hint when
a replicated State meets sharded data."""

import collections
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import assert_on_mesh, mesh


def mesh_2d(axis_type):
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)


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
  # v was placed on the 8-device mesh by the first call and stays there;
  # the 2-device program reads a copy and says so once, naming it.
  with jax.set_mesh(jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])):
    with pytest.warns(UserWarning, match="State 'v' lives on devices 0-7"):
      np.testing.assert_array_equal(f(), [4.0] * 2)


def test_no_mesh_anywhere_is_a_clear_error():
  f = bs.shard_map(lambda: None)
  with pytest.raises(ValueError, match="has no mesh.*jax.set_mesh"):
    f()


def test_mesh_from_set_mesh(axis_type):
  m = mesh((4,), ("x",), axis_type)
  v = bs.State(jnp.zeros(8), name="v")

  @bs.shard_map(in_specs=(P("x"),), out_specs=P("x"), state_in_specs={v: P("x")})
  def f(x):
    v.value = v.value + x
    return v.value * 2

  with jax.set_mesh(m):
    out = f(jnp.arange(8.0))
    np.testing.assert_array_equal(out, np.arange(8.0) * 2)
  np.testing.assert_array_equal(v.value, np.arange(8.0))
  assert_on_mesh(v, m, P("x"))
  with pytest.raises(ValueError, match="mesh"):
    f(jnp.arange(8.0))  # no mesh set any more
  np.testing.assert_array_equal(v.value, np.arange(8.0))


def test_partial_manual_argument_spec_must_name_manual_axes():
  mesh = mesh_2d(jax.sharding.AxisType.Explicit)
  f = bs.shard_map(lambda a: a, mesh=mesh, in_specs=P("y"), out_specs=P(),
                   axis_names={"x"})
  with pytest.raises(ValueError,
                     match=r"positional argument 0 .*'y'.*manual only over"):
    f(jnp.zeros(8))


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


def test_write_only_state_is_not_an_input():
  m = mesh((4,), ("x",))
  out = bs.State(jnp.zeros(()), name="out")  # replicated, only written
  rw = bs.State(jnp.zeros(8), name="rw")

  def f(x):
    out.value = jax.lax.psum(x.sum(), "x")
    rw.value = rw.value + x
    return x

  g = bs.shard_map(f, m, P("x"), P("x"), state_in_specs={rw: P("x")})
  sf = bs.StatefulFunction(g)
  x = jnp.arange(8.0)
  assert sf.get_read_states(x) == (rw,)
  assert set(sf.get_write_states(x)) == {out, rw}
  # A deleted buffer is fine for a state that is only written: it is never
  # read, placed or passed.
  out.value.delete()
  g(x)
  assert float(out.value) == np.arange(8.0).sum()
  np.testing.assert_array_equal(rw.value, np.arange(8.0))


def test_write_only_sharded_state(axis_type):
  """A state that is only written, with a sharded spec: the function writes
  its per-shard value."""
  m = mesh((4,), ("x",), axis_type)
  out = bs.State(jnp.zeros(8), name="out")

  def f(x):
    out.value = x * 2
    return x

  g = bs.shard_map(f, m, P("x"), P("x"), state_in_specs={out: P("x")})
  x = jnp.arange(8.0)
  assert bs.StatefulFunction(g).get_read_states(x) == ()
  g(x)
  np.testing.assert_array_equal(out.value, np.arange(8.0) * 2)
  assert_on_mesh(out, m, P("x"))


def test_state_reshaped_outside_between_calls(axis_type):
  m = mesh((4,), ("x",), axis_type)
  buf = bs.State(jnp.arange(8.0), name="buf")
  seen = []

  def f():
    seen.append(buf.value.shape)
    buf.value = buf.value * 2

  g = bs.shard_map(f, m, P(), None, state_in_specs={buf: P("x")})
  g()
  np.testing.assert_array_equal(buf.value, np.arange(8.0) * 2)
  buf.value = jnp.arange(16.0)  # a new (still divisible) shape
  g()
  np.testing.assert_array_equal(buf.value, np.arange(16.0) * 2)
  assert seen[-1] == (4,)  # per-shard shape of the new value
  assert_on_mesh(buf, m, P("x"))


def _count_validations(monkeypatch) -> collections.Counter:
  """Counts spec validations (``check_spec`` calls) by what they validate,
  wherever brainshard calls it from."""
  from brainshard._core import specs
  counts: collections.Counter = collections.Counter()
  check = specs.check_spec

  def counting(spec, shape, mesh, owner):
    counts[owner] += 1
    return check(spec, shape, mesh, owner)
  for module in list(sys.modules.values()):
    if (getattr(module, "__name__", "").startswith("brainshard")
        and getattr(module, "check_spec", None) is check):
      monkeypatch.setattr(module, "check_spec", counting)
  return counts


@pytest.mark.parametrize("how", ["traced", "eager"])
def test_each_spec_is_validated_once_per_trace(monkeypatch, how):
  # Before: a read State's spec was validated twice in a traced call (when
  # planned, and again by the call) and three times in an eager one
  # (placement too), an out spec once per write.
  m = mesh((4,), ("x",))
  v = bs.State(jnp.zeros(8), name="v", spec=P("x"))
  w = bs.State(jnp.zeros(8), name="w")

  def step(x):
    v.value = v.value + x.sum()  # 2 per shard
    v.value = v.value * 2  # a second write: its out spec is the same
    w.value = x
    return x

  f = bs.shard_map(step, mesh=m, in_specs=P("x"), out_specs=P("x"),
                   state_out_specs={w: P("x")})
  run = bs.jit(f) if how == "traced" else f
  counts = _count_validations(monkeypatch)
  run(jnp.ones(8))
  name = f.name
  assert counts == {
      f"{name}: positional argument 0 (float32[8])": 1,
      f"{name}: State 'v' (float32[8]), state_in_specs P('x',)": 1,
      f"{name}: State 'w' (float32[8]), state_in_specs P()": 1,
      f"{name}: State 'w' (float32[8]), state_out_specs P('x',)": 1}
  counts.clear()
  run(jnp.ones(8))  # no new trace: nothing validated again
  assert not counts
  v.value = jnp.zeros(16)  # a new shape: a new trace validates it, once
  run(jnp.ones(8))
  assert counts == {f"{name}: State 'v', state_in_specs P('x',)": 1}
  np.testing.assert_array_equal(v.value, np.full(16, 4.0))
