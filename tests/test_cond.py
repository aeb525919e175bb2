"""Stateful branches: cond and switch, eagerly, under bs.jit, in loops and
inside bs.shard_map."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from conftest import make_mesh


def test_state_written_in_one_branch():
  v = bs.State(jnp.zeros(3), name="v")
  hits = bs.State(jnp.zeros((), jnp.int32), name="hits")

  def fire(x):
    v.value = v.value + x
    hits.value = hits.value + 1
    return x.sum()

  def rest(x):
    return -x.sum()

  assert float(bs.cond(True, fire, rest, jnp.ones(3))) == 3.0
  assert float(bs.cond(False, fire, rest, jnp.ones(3))) == -3.0
  np.testing.assert_array_equal(v.value, np.ones(3))
  assert int(hits.value) == 1


def test_each_branch_writes_a_different_state_under_jit():
  a = bs.State(jnp.zeros(()), name="a")
  b = bs.State(jnp.zeros(()), name="b")

  def to_a(x):
    a.value = a.value + x

  def to_b(x):
    b.value = b.value + x

  traces = []

  @bs.jit
  def route(p, x):
    traces.append(1)
    bs.cond(p, to_a, to_b, x)

  for p, x in [(True, 1.0), (False, 2.0), (True, 3.0), (False, 4.0)]:
    route(p, x)
  assert len(traces) <= 2  # discovery + one jax.jit trace, never again
  assert (float(a.value), float(b.value)) == (4.0, 6.0)


def test_eager_cond_compiles_once():
  v = bs.State(jnp.zeros(()), name="v")
  traces = []

  def up(x):
    traces.append(1)
    v.value = v.value + x

  def down(x):
    v.value = v.value - x

  bs.cond(True, up, down, 1.0)
  n = len(traces)
  bs.cond(False, up, down, 2.0)
  bs.cond(True, up, down, 4.0)
  assert len(traces) == n
  assert float(v.value) == 3.0


def test_switch_branches_and_clamping():
  v = bs.State(jnp.zeros(()), name="v")

  def set_to(k):
    def branch(x):
      v.value = x * k
      return k
    return branch

  branches = [set_to(1.0), set_to(2.0), lambda x: 0.0]
  for i, expected in [(0, 5.0), (1, 10.0), (2, 10.0), (7, 10.0), (-3, 5.0)]:
    bs.switch(i, branches, 5.0)
    assert float(v.value) == expected


def test_cond_in_loop_counts_events():
  count = bs.State(jnp.zeros((), jnp.int32), name="count")

  def step(x):
    def bump():
      count.value = count.value + 1
    bs.cond(x > 0.5, bump, lambda: None)

  xs = jnp.array([0.1, 0.9, 0.7, 0.2, 0.6])
  bs.for_loop(step, xs)
  assert int(count.value) == 3


def test_branch_failure_leaves_states_intact():
  v = bs.State(jnp.ones(2), name="v")

  def bad(x):
    v.value = v.value * 0
    raise KeyError("nope")

  with pytest.raises(KeyError):
    bs.cond(True, bad, lambda x: None, 1.0)
  with pytest.raises(KeyError):
    bs.jit(lambda: bs.switch(0, [lambda x: None, bad], 1.0))()
  np.testing.assert_array_equal(v.value, np.ones(2))


def test_cond_inside_shard_map_with_per_shard_branch_write():
  """One branch makes a sharded state's shard depend on local data, the
  other passes it through: both branches must return one per-shard type."""
  mesh = make_mesh((4,), ("x",))
  v = bs.State(jnp.zeros(8), name="v", spec=P("x"))
  flag = bs.State(jnp.zeros(()), name="flag")

  def body(x, p):
    def write(x):
      v.value = v.value + x
      flag.value = flag.value + 1.0
    bs.cond(p, write, lambda x: None, x)
    return jax.lax.psum(v.value.sum(), "x")

  run = bs.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=P())
  x = jnp.arange(8.0)
  assert float(run(x, True)) == 28.0
  assert float(run(x, False)) == 28.0
  np.testing.assert_array_equal(v.value, np.arange(8.0))
  assert float(flag.value) == 1.0


def test_cond_on_per_shard_predicate():
  mesh = make_mesh((4,), ("x",))
  v = bs.State(jnp.zeros(8), name="v", spec=P("x"))

  def body(x):
    def write():
      v.value = v.value + 1.0
    bs.cond(x.sum() > 10.0, write, lambda: None)

  bs.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P())(
      jnp.arange(8.0))
  # shard sums: 1, 5, 9, 13 -> only the last shard writes
  np.testing.assert_array_equal(v.value, [0, 0, 0, 0, 0, 0, 1, 1])
