"""Placing eager shard_map inputs on the mesh (brainshard/_core/program/placement.py):
inputs already placed right (states written by the previous call included)
are passed as they are, without a copy or a compile; numpy, uncommitted and
wrongly sharded inputs are moved to the sharding the program expects; a
State moved for a call keeps its placement, so later calls move nothing."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard._core.program.program import Program
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


# -- a State's placement sticks (issue 21, item 2) ---------------------------


def _net(m):
  """v split over 'x'; a lookup table and a step counter made from plain
  arrays (one device), read replicated by the shard_map."""
  v = bs.State(jnp.zeros(16), name="v", spec=P("x"))
  table = bs.State(jnp.arange(8.0), name="table")  # read only
  count = bs.State(jnp.zeros((), jnp.int32), name="count")  # read and written

  def step(x):
    count.value = count.value + 1
    v.value = v.value + x * table.value[count.value % 8]
    return jax.lax.psum(v.value.sum(), "x")

  return v, table, count, bs.shard_map(step, m, (P("x"),), P())


def _reference(n, x):
  """The same steps in numpy: v after n calls and each call's total."""
  v, totals = np.zeros(16, np.float32), []
  for k in range(1, n + 1):
    v = v + x * np.float32(k % 8)
    totals.append(v.sum())
  return v, totals


def _counting_puts(monkeypatch):
  puts = []
  real_put = jax.device_put
  monkeypatch.setattr(jax, "device_put",
                      lambda *a, **k: puts.append(a) or real_put(*a, **k))
  return puts


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_replicated_state_from_a_plain_array_is_placed_once(
    axis_type, jitted, monkeypatch):
  """After the first call the table lives replicated on the mesh and the
  counter stays there; later calls move nothing, take the generated fast
  call, compile nothing, and give the unsharded numbers."""
  m = mesh((8,), ("x",), axis_type)
  generic = []
  real_call = Program.call
  monkeypatch.setattr(Program, "call", lambda self, *a, **k: generic.append(
      1) or real_call(self, *a, **k))
  v, table, count, step = _net(m)
  if jitted:
    step = bs.jit(step)
  x = jax.device_put(jnp.ones(16), NamedSharding(m, P("x")))
  assert table.sharding is None  # starts on one device
  totals = [step(x)]
  assert_on_mesh(table, m, P())
  assert_on_mesh(count, m, P())
  placed = table.value
  puts = _counting_puts(monkeypatch)
  generic.clear()
  with count_compiles() as compiles:
    totals += [step(x) for _ in range(4)]
  assert puts == [] and generic == [] and compiles.count == 0
  assert table.value is placed  # kept, not moved again
  want_v, want_totals = _reference(5, np.ones(16, np.float32))
  np.testing.assert_array_equal(np.asarray(v.value), want_v)
  np.testing.assert_array_equal(np.asarray(totals), want_totals)
  np.testing.assert_array_equal(np.asarray(table.value), np.arange(8.0))
  assert int(count.value) == 5


def test_eager_loop_of_a_shard_map_places_its_states_once(monkeypatch):
  m = mesh((8,), ("x",))
  v, table, count, step = _net(m)
  xs = jax.device_put(jnp.ones((3, 16)), NamedSharding(m, P(None, "x")))
  bs.for_loop(step, xs)
  assert_on_mesh(table, m, P())
  placed = table.value
  puts = _counting_puts(monkeypatch)
  with count_compiles() as compiles:
    totals = bs.for_loop(step, xs)
  assert puts == [] and compiles.count == 0 and table.value is placed
  want_v, want_totals = _reference(6, np.ones(16, np.float32))
  np.testing.assert_array_equal(np.asarray(totals), want_totals[3:])
  np.testing.assert_array_equal(np.asarray(v.value), want_v)


def test_a_state_placed_by_hand_keeps_the_fast_call(monkeypatch):
  """A State placed as P() (not JAX's full-rank P(None)) passes the
  generated call's inline check: no generic path, no move."""
  m = mesh((8,), ("x",))
  generic = []
  real_call = Program.call
  monkeypatch.setattr(Program, "call", lambda self, *a, **k: generic.append(
      1) or real_call(self, *a, **k))
  v, table, count, step = _net(m)
  table.value = jax.device_put(table.value, NamedSharding(m, P()))
  placed = table.value
  x = jax.device_put(jnp.ones(16), NamedSharding(m, P("x")))
  step(x)
  generic.clear()
  step(x)
  assert generic == [] and table.value is placed


def test_programs_on_two_meshes_the_first_placement_stays():
  """Two eager shard_maps on disjoint sub-meshes read one table: the first
  places it, the second gets a copy on every call and warns once, naming
  it; both give the right numbers."""
  a, b = bs.split_mesh(jax.devices(), (4, 4))
  table = bs.State(jnp.arange(4.0), name="shared_table")

  def read(x):
    return x * table.value.sum()

  on_a = bs.shard_map(read, a, (P("x"),), P("x"))
  on_b = bs.shard_map(read, b, (P("x"),), P("x"))
  xa = jax.device_put(jnp.ones(8), NamedSharding(a, P("x")))
  xb = jax.device_put(jnp.ones(8), NamedSharding(b, P("x")))
  np.testing.assert_array_equal(on_a(xa), np.full(8, 6.0))
  assert_on_mesh(table, a, P())
  placed = table.value
  with pytest.warns(UserWarning, match="'shared_table'.*devices 0-3.*"
                    "devices 4-7") as record:
    np.testing.assert_array_equal(on_b(xb), np.full(8, 6.0))
  assert len(record) == 1
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # once, not every call
    np.testing.assert_array_equal(on_b(xb), np.full(8, 6.0))
    np.testing.assert_array_equal(on_a(xa), np.full(8, 6.0))
  assert table.value is placed


def test_under_a_foreign_jit_nothing_is_kept(axis_type):
  """``jax.jit`` around ``bs.jit(bs.shard_map(...))`` that reads a table
  made from a plain array: the move is traced there, so the State keeps its
  value (no tracer); a later eager call places it."""
  m = mesh((8,), ("x",), axis_type)
  table = bs.State(jnp.arange(8.0), name="table")
  inner = bs.jit(bs.shard_map(lambda x: x * table.value[3], m, (P("x"),),
                              P("x")))
  before = table.value
  x = jnp.ones(16)
  with jax.set_mesh(m):
    out = jax.jit(lambda x: inner(x))(x)
  assert table.value is before and table.sharding is None
  np.testing.assert_array_equal(np.asarray(out), np.full(16, 3.0))
  inner(jax.device_put(x, NamedSharding(m, P("x"))))
  assert_on_mesh(table, m, P())


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_a_pytree_table_is_placed_once(jitted):
  """A read-only pytree State (placed leaf by leaf): placed by the first
  call, then the same value object on every later call."""
  m = mesh((8,), ("x",))
  table = bs.State({"a": jnp.arange(4.0), "b": jnp.ones((2, 2))}, name="t")
  step = bs.shard_map(lambda x: x * (table.value["a"].sum()
                                     + table.value["b"].sum()),
                      m, (P("x"),), P("x"))
  if jitted:
    step = bs.jit(step)
  x = jax.device_put(jnp.ones(16), NamedSharding(m, P("x")))
  step(x)
  assert_on_mesh(table, m, P())
  placed = table.value
  out = step(x)
  assert table.value is placed
  np.testing.assert_array_equal(np.asarray(out), np.full(16, 10.0))
