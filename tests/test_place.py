"""Putting States on a mesh (brainshard/_scaleout/place.py): place and
sharded_init, in one process. describe and visualize are in test_describe.py,
gather in test_multihost.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs


@pytest.fixture
def mesh():
  return jax.make_mesh((8,), ("x",))


def shard_shapes(state):
  return [s.data.shape for s in state.value.addressable_shards]


# -- place --------------------------------------------------------------------


def test_place_a_state_list_and_dict(mesh, axis_type):
  mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)
  a = bs.State(np.arange(16.0).reshape(8, 2), "a", spec=P("x"))
  b = bs.ParamState(np.arange(8.0), "b", axes=("neuron",))
  c = bs.State(np.ones(3), "c")
  assert bs.place(a, mesh) is a
  tree = {"pair": [b, c], "again": a}
  assert bs.place(tree, mesh, axis_rules={"neuron": ("x", "y")}) is tree
  assert a.sharding == NamedSharding(mesh, P("x"))
  assert b.sharding == NamedSharding(mesh, P(("x", "y")))
  assert c.sharding == NamedSharding(mesh, P())
  assert shard_shapes(a) == [(4, 2)] * 8 and shard_shapes(b) == [(1,)] * 8
  np.testing.assert_array_equal(a.value, np.arange(16.0).reshape(8, 2))
  np.testing.assert_array_equal(b.value, np.arange(8.0))


def test_place_specs_win_keyed_by_state_type_or_predicate(mesh):
  a = bs.ParamState(jnp.zeros(8), "a", spec=P("x"))
  b = bs.ShortTermState(jnp.zeros(8), "b", spec=P("x"))
  c = bs.State(jnp.zeros(8), "c")
  bs.place([a, b, c], mesh, specs={
      a: P(), bs.ShortTermState: P(), lambda s: s.name == "c": P("x")})
  assert [s.sharding.spec for s in (a, b, c)] == [P(), P(), P("x")]
  bs.place([a, b, c], mesh, specs=P())
  assert [s.sharding.spec for s in (a, b, c)] == [P(), P(), P()]


def test_pytree_valued_state_is_placed_per_leaf(mesh):
  s = bs.State({"w": jnp.zeros((8, 3)), "b": jnp.zeros(3)}, "layer",
               spec={"w": P("x"), "b": P()})
  bs.place(s, mesh)
  assert s.sharding == {"w": NamedSharding(mesh, P("x")),
                        "b": NamedSharding(mesh, P())}


def test_place_checks_every_state_before_moving_any(mesh):
  good = bs.State(jnp.zeros(8), "good", spec=P("x"))
  bad = bs.State(jnp.zeros(6), "bad", spec=P("x"))
  before = good.sharding
  with pytest.raises(ValueError, match="State 'bad'.*size 6.*8 shards"):
    bs.place([good, bad], mesh)
  assert good.sharding == before


def test_place_errors(mesh):
  s = bs.State(jnp.zeros(8), "s")
  with pytest.raises(TypeError, match="pytree .* of States"):
    bs.place([s, jnp.zeros(3)], mesh)
  with pytest.raises(ValueError, match="no mesh"):
    bs.place(s)
  with pytest.raises(TypeError, match="keys must be"):
    bs.place(s, mesh, specs={"s": P()})

  @bs.jit
  def inside():
    bs.place(s, mesh)

  with pytest.raises(bs.StateTraceError, match="outside every transform"):
    inside()


def test_place_uses_the_mesh_from_set_mesh(mesh):
  s = bs.State(jnp.arange(8.0), "s", spec=P("x"))
  with jax.set_mesh(mesh):
    bs.place(s)
  assert s.sharding == NamedSharding(mesh, P("x"))


def test_place_from_process_local_in_one_process_is_the_whole_value(mesh):
  s = bs.State(np.arange(16.0).reshape(8, 2), "s", spec=P("x"))
  k = bs.State(jax.random.key(3), "k")
  bs.place([s, k], mesh, from_process_local=True)
  assert s.sharding == NamedSharding(mesh, P("x"))
  np.testing.assert_array_equal(s.value, np.arange(16.0).reshape(8, 2))
  np.testing.assert_array_equal(jax.random.key_data(k.value),
                                jax.random.key_data(jax.random.key(3)))


def test_placed_states_run_in_shard_map_without_moving_again(mesh):
  v = bs.State(jnp.arange(8.0), "v", axes=("neuron",))
  bs.place(v, mesh, axis_rules={"neuron": "x"})
  placed = v.value

  @bs.shard_map(mesh=mesh, axis_rules={"neuron": "x"})
  def total():
    return jax.lax.psum(v.value.sum(), "x")

  assert float(total()) == 28.0
  assert v.value is placed  # read only: the placed array is kept


# -- sharded_init -------------------------------------------------------------


N = 2048  # an N x 256 float32 state is 2 MiB; each of 8 devices holds 256 KiB


@pytest.mark.slow
def test_sharded_init_creates_each_shard_in_place(mesh):
  rules = {"neuron": "x"}
  init = bs.sharded_init(
      lambda key: {"w": bs.ParamState(jax.random.normal(key, (N, 256)), "w",
                                      axes=("neuron", None)),
                   "v": bs.ShortTermState(jnp.zeros(N), "v",
                                          axes=("neuron",))},
      mesh, axis_rules=rules)
  states = init(jax.random.key(0))
  w = states["w"]
  assert shard_shapes(w) == [(N // 8, 256)] * 8
  assert shard_shapes(states["v"]) == [(N // 8,)] * 8
  # Same numbers as an unsharded init (partitionable threefry).
  np.testing.assert_allclose(
      w.value, jax.random.normal(jax.random.key(0), (N, 256)))
  stats = init.lower(jax.random.key(0)).compile().memory_analysis()
  if stats is not None:
    whole = N * 256 * 4
    per_device = whole // 8 + N * 4 // 8
    # Each device outputs its shards (plus a few bytes of tuple table).
    assert per_device <= stats.output_size_in_bytes < per_device + 256
    # Nothing of the size of the whole weight matrix is ever live.
    assert stats.output_size_in_bytes + stats.temp_size_in_bytes < whole


@pytest.mark.slow
def test_sharded_init_decorator_objects_static_args_and_extras(mesh):
  class Net:
    def __init__(self, key, n):
      self.w = bs.ParamState(jax.random.normal(key, (n, n)), "w",
                             axes=("neuron", None))
      self.bias = bs.ParamState(jnp.ones(n), "bias")

  @bs.sharded_init(mesh=mesh, axis_rules={"neuron": "x"}, static_argnums=1,
                   specs={lambda s: s.name == "bias": P("x")})
  def make(key, n):
    net = Net(key, n)
    return net, jnp.arange(3), "label"

  net, extra, label = make(jax.random.key(1), 16)
  assert net.w.sharding.spec == P("x", None)
  assert net.bias.sharding.spec == P("x")
  np.testing.assert_array_equal(extra, np.arange(3))
  assert extra.sharding.is_fully_replicated and label == "label"
  again, _, _ = make(jax.random.key(1), 16)
  assert again.w is not net.w  # every call creates new States
  np.testing.assert_array_equal(again.w.value, net.w.value)


def test_sharded_init_states_work_in_transforms(mesh):
  @bs.sharded_init(mesh=mesh)
  def init():
    return bs.State(jnp.arange(8.0), "v", spec=P("x"))

  v = init()

  @bs.shard_map(mesh=mesh)
  def double():
    v.value = v.value * 2

  double()
  np.testing.assert_array_equal(v.value, 2 * np.arange(8.0))
  assert v.sharding.spec == P("x")


def test_sharded_init_errors(mesh):
  outer = bs.State(jnp.zeros(3), "outer")

  def writes():
    outer.value = outer.value + 1
    return bs.State(jnp.zeros(8))

  with pytest.raises(bs.StateTraceError, match="State 'outer'.*only create"):
    bs.sharded_init(writes, mesh)()
  np.testing.assert_array_equal(outer.value, np.zeros(3))
  with pytest.raises(ValueError, match="State 'w'.*'neuron'"):
    bs.sharded_init(lambda: bs.State(jnp.zeros(8), "w", axes=("neuron",)),
                    mesh)()
  with pytest.raises(ValueError, match="State 'odd'.*not divisible"):
    bs.sharded_init(lambda: bs.State(jnp.zeros(6), "odd", spec=P("x")),
                    mesh)()
  with pytest.raises(TypeError, match="may not be keyed by State objects"):
    bs.sharded_init(lambda: None, mesh, specs={outer: P()})
