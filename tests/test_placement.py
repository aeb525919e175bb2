"""Placing eager shard_map inputs on the mesh (brainshard/_core/placement.py):
inputs already placed right (states written by the previous call included)
are passed as they are, without a copy or a compile; numpy, uncommitted and
wrongly sharded inputs are moved to the sharding the program expects."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import assert_on_mesh, count_compiles, mesh
from conftest import make_mesh


def test_inputs_placed_right_are_not_copied(axis_type, monkeypatch):
  m = mesh((4,), ("x",), axis_type)
  v = bs.State(jnp.zeros(8), name="v")
  w = bs.State(jax.device_put(jnp.ones(()), NamedSharding(m, P())), name="w")

  def step(x):
    v.value = v.value + x * w.value
    return x

  g = bs.shard_map(step, m, (P("x"),), P("x"), state_in_specs={v: P("x")})
  x = jax.device_put(jnp.arange(8.0), NamedSharding(m, P("x")))
  g(x)  # v gets placed on the mesh here (it starts on one device)
  assert v.sharding == NamedSharding(m, P("x"))
  w_before = w.value

  puts = []
  real_put = jax.device_put

  def counting_put(*args, **kwargs):
    puts.append(args)
    return real_put(*args, **kwargs)

  monkeypatch.setattr(jax, "device_put", counting_put)
  out = g(x)
  assert puts == []  # x, v and w were all placed right already
  assert w.value is w_before  # read-only: the same array object
  assert x.sharding == NamedSharding(m, P("x"))
  np.testing.assert_array_equal(out, np.arange(8.0))
  np.testing.assert_array_equal(v.value, np.arange(8.0) * 2)


def _buffers(x):
  return sorted(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)


def test_written_states_are_not_copied_on_the_next_call(axis_type, monkeypatch):
  """States written by one call come back placed right and are passed to the
  next call without a copy (2-D sharded, replicated, pytree)."""
  m = mesh((4,), ("x",), axis_type)
  a = bs.State(jnp.zeros((8, 4)), name="a", spec=P("x"))
  b = bs.State(jnp.zeros(3), name="b")
  c = bs.State({"u": jnp.zeros((4, 8)), "k": jnp.zeros((), jnp.int32)},
               name="c", spec={"u": P(None, "x"), "k": P()})

  def step(x):
    a.value = a.value + x[:, None]
    b.value = b.value + 1
    c.value = {"u": c.value["u"] * 2, "k": c.value["k"] + 1}
    return x

  g = bs.shard_map(step, m, (P("x"),), P("x"))
  x = jax.device_put(jnp.arange(8.0), NamedSharding(m, P("x")))
  g(x)
  copies = []
  real_put = jax.device_put

  def checking_put(value, *args, **kwargs):
    out = real_put(value, *args, **kwargs)
    for before, after in zip(jax.tree.leaves(value), jax.tree.leaves(out)):
      if not (isinstance(before, jax.Array) and _buffers(before) == _buffers(after)):
        copies.append(before)
    return out

  monkeypatch.setattr(jax, "device_put", checking_put)
  with count_compiles() as compiles:
    g(x)
  assert copies == []
  assert compiles.count == 0
  np.testing.assert_array_equal(a.value, np.tile(np.arange(8.0)[:, None] * 2, 4))
  np.testing.assert_array_equal(b.value, np.full(3, 2.0))
  assert int(c.value["k"]) == 2


def test_unplaced_inputs_are_placed(axis_type):
  m = mesh((4,), ("x",), axis_type)
  v = bs.State(np.arange(8.0), name="v")  # on one device

  def step(x):
    v.value = v.value + x
    return x * 2

  g = bs.shard_map(step, m, (P("x"),), P("x"), state_in_specs={v: P("x")})
  out = g(np.arange(8.0, dtype=np.float32))  # a numpy argument
  np.testing.assert_array_equal(out, np.arange(8.0) * 2)
  np.testing.assert_array_equal(v.value, np.arange(8.0) * 2)
  assert_on_mesh(v, m, P("x"))
  assert isinstance(out.sharding, NamedSharding) and out.sharding.spec == P("x")


def test_eager_shard_map_places_misplaced_inputs(axis_type):
  mesh = make_mesh((8,), ("x",), axis_type)
  v = bs.State(jnp.zeros(16), name="v", spec=P("x"))

  @bs.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P())
  def step(x):
    v.value = v.value + x
    return jax.lax.psum(v.value.sum(), "x")

  ones = jnp.ones(16)
  assert float(step(ones)) == 16.0  # uncommitted input
  replicated = jax.device_put(ones, NamedSharding(mesh, P()))
  assert float(step(replicated)) == 32.0  # committed, wrong sharding
  assert float(step(np.ones(16, np.float32))) == 48.0  # numpy input
  v.value = jnp.zeros(16)  # a state reset by hand, uncommitted
  assert float(step(ones)) == 16.0
  assert v.value.sharding.spec == P("x")
  assert float(step(ones, **{})) == 32.0


def test_jitted_shard_map_called_inside_another_transform(axis_type):
  """``bs.jit(bs.shard_map(f))`` called inside ``bs.jit`` and inside
  ``bs.for_loop``: its placement hints meet tracers there, which the
  enclosing program places (it used to ask a tracer for ``.sharding``)."""
  m = make_mesh((8,), ("x",), axis_type)
  v = bs.State(jnp.zeros(16), name="v", spec=P("x"))

  def f(c):
    v.value = v.value + c
    return jax.lax.psum(v.value.sum(), "x")

  inner = bs.jit(bs.shard_map(f, mesh=m, in_specs=P("x"), out_specs=P()))
  c = jnp.arange(16.0)
  assert float(bs.jit(lambda: inner(c))()) == float(c.sum())
  totals = bs.jit(lambda xs: bs.for_loop(inner, xs))(jnp.stack([c] * 3))
  # pure reference: v accumulates c on every step
  np.testing.assert_allclose(np.asarray(totals), [2 * c.sum(), 3 * c.sum(),
                                                  4 * c.sum()])
  np.testing.assert_allclose(np.asarray(v.value), 4 * np.asarray(c))
  assert v.value.sharding.spec == P("x")
