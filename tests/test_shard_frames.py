"""The frames of a bs.shard_map body (brainshard/_transforms/shard_map/frames.py):
states at per-shard shapes, discovered inside a real jax.shard_map (so
varying-axes types are JAX's), and writes checked against the shard shape of
the state's *out* spec, so state_out_specs may change how a state is split
(issue 9, item 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from _util import mesh


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


def test_body_using_pcast_and_varying_types_traces_like_jax_shard_map(axis_type):
  """Discovery runs the body inside a real jax.shard_map, so code written
  for JAX's varying-axes types (pcast / pvary) works, and the result matches
  the same update done in numpy."""
  m = mesh((4, 2), ("a", "b"), axis_type)
  acc = bs.State(jnp.zeros((8, 2)), name="acc")
  w = bs.State(jnp.arange(8.0) + 1, name="w")
  runs = []

  @bs.shard_map(mesh=m, in_specs=P("a"), out_specs=P("a", "b"),
                state_in_specs={acc: P("a", "b"), w: P("a")})
  def f(x):
    runs.append(1)
    y = jax.lax.pcast(x * w.value, ("b",), to="varying")  # varies over a, b
    acc.value = acc.value + y[:, None]
    return acc.value

  x = jnp.arange(8.0)
  f(x)
  out = f(x)
  expected = np.repeat((2 * np.arange(8.0) * (np.arange(8.0) + 1))[:, None],
                       2, axis=1)
  np.testing.assert_allclose(np.asarray(acc.value), expected)
  np.testing.assert_allclose(np.asarray(out), expected)
  assert acc.sharding.spec == P("a", "b")
  assert len(runs) == 1  # discovered once, evaluated by the compiled trace
