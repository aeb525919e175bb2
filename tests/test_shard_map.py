"""State-aware shard_map: the peer's five scenarios over 1/2/4/8-device and
2-D meshes and both axis types, spec resolution, write-back specs, caching
of eager calls and input placement. Every sharded result is compared with
the same computation done unsharded in numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import count_compiles, mesh

SIZES = [1, 2, 4, 8]


def _assert_on_mesh(state, m, spec):
  """Every leaf of the state's value has a NamedSharding on ``m`` equivalent
  to ``spec`` (JAX may spell it with trailing Nones: P('x', None) is P('x'))."""
  leaves = jax.tree.leaves(state.value)
  shardings = jax.tree.leaves(state.sharding)
  specs = spec if isinstance(spec, list) else [spec] * len(leaves)
  assert len(shardings) == len(leaves) == len(specs)
  for x, sh, sp in zip(leaves, shardings, specs):
    assert isinstance(sh, NamedSharding), sh
    assert sh.mesh == m
    assert _canon(sh.spec) == _canon(sp), (sh.spec, sp)
    assert sh.is_equivalent_to(NamedSharding(m, sp), x.ndim)


def _canon(spec):
  entries = list(spec)
  while entries and entries[-1] is None:
    entries.pop()
  return tuple(entries)


# ----------------------------------------------------------------------------
# the peer's five scenarios


@pytest.mark.parametrize("n", SIZES)
def test_peer_1_sharded_data_times_replicated_scalar_state(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  w = bs.State(3.0)

  def f(x):
    return x * w.value

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P("x"))
  x = np.arange(16, dtype=np.float32)
  out = g(jnp.asarray(x))
  np.testing.assert_allclose(out, x * 3.0)
  assert out.shape == (16,)
  w.value = 0.5  # the state is read afresh on the next call
  np.testing.assert_allclose(g(jnp.asarray(x)), x * 0.5)
  assert float(w.value) == 0.5


@pytest.mark.parametrize("n", SIZES)
def test_peer_2_per_shard_buffer_read_and_written_in_place(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  buffer = bs.State(jnp.zeros(16), name="buffer")

  def f(x):
    buffer.value = buffer.value * 0.5 + x
    return buffer.value

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P("x"),
                   state_in_specs={buffer: P("x")},
                   state_out_specs={buffer: P("x")})
  x = np.arange(16, dtype=np.float32)
  ref = np.zeros(16, np.float32)
  for i in range(3):
    out = g(jnp.asarray(x + i))
    ref = ref * 0.5 + x + i
    np.testing.assert_allclose(out, ref)
    np.testing.assert_allclose(buffer.value, ref)
  _assert_on_mesh(buffer, m, P("x"))


@pytest.mark.parametrize("n", SIZES)
def test_peer_3_collective_across_shards(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  scale = bs.State(2.0, name="scale")

  def f(d):
    d = d * scale.value
    return jax.lax.psum(jnp.sum(d, keepdims=True), "x")

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P())
  d = np.arange(32, dtype=np.float32).reshape(16, 2) / 7
  out = g(jnp.asarray(d))
  assert out.shape == (1, 1)
  np.testing.assert_allclose(out, np.sum(d * 2.0, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_peer_4_jax_jit_of_wrapped_function_reading_states(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  w = bs.State(jnp.arange(16.0), name="w")
  b = bs.State(1.5, name="b")

  def f(x):
    return x * w.value + b.value

  g = bs.shard_map(f, mesh=m, in_specs=(P("x"),), out_specs=P("x"),
                   state_in_specs={w: P("x")})
  x = np.linspace(-1, 1, 16).astype(np.float32)
  out = jax.jit(g)(jnp.asarray(x))
  np.testing.assert_allclose(out, x * np.arange(16.0) + 1.5, rtol=1e-6)
  np.testing.assert_array_equal(w.value, np.arange(16.0))  # untouched


@pytest.mark.parametrize("n", [2, 4, 8])
def test_peer_5_two_dimensional_mesh(n, axis_type):
  m = mesh((n // 2, 2), ("data", "model"), axis_type)
  buf = bs.State(jnp.zeros((8, 4)), name="buf")
  total = bs.State(jnp.zeros(()), name="total")

  def f(x):
    buf.value = buf.value * 0.5 + x
    total.value = total.value + jax.lax.psum(buf.value.sum(), ("data", "model"))
    return buf.value * 2

  g = bs.shard_map(f, mesh=m, in_specs=(P("data", "model"),),
                   out_specs=P("data", "model"),
                   state_in_specs={buf: P("data", "model")})
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  ref_buf, ref_total = np.zeros((8, 4), np.float32), 0.0
  for i in range(2):
    out = g(jnp.asarray(x - i))
    ref_buf = ref_buf * 0.5 + x - i
    ref_total += ref_buf.sum()
    np.testing.assert_allclose(out, ref_buf * 2)
  np.testing.assert_allclose(buf.value, ref_buf)
  np.testing.assert_allclose(total.value, ref_total, rtol=1e-6)
  _assert_on_mesh(buf, m, P("data", "model"))
  _assert_on_mesh(total, m, P())


@pytest.mark.parametrize("n", [2, 4, 8])
def test_2d_mesh_partial_specs(n, axis_type):
  m = mesh((n // 2, 2), ("data", "model"), axis_type)
  w = bs.ParamState(jnp.arange(12.0).reshape(4, 3) / 10, name="w")  # replicated
  acc = bs.State(jnp.zeros((8, 3)), name="acc")

  def f(x):  # x: data-sharded rows, model-sharded features
    h = jax.lax.psum(x.sum(1, keepdims=True), "model")
    acc.value = acc.value + h * w.value.sum(0)
    return acc.value

  g = bs.shard_map(f, mesh=m, in_specs=P("data", "model"), out_specs=P("data"),
                   state_in_specs={acc: P("data")})
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  out = g(jnp.asarray(x))
  ref = x.sum(1, keepdims=True) * (np.arange(12.0).reshape(4, 3) / 10).sum(0)
  np.testing.assert_allclose(out, ref, rtol=1e-6)
  np.testing.assert_allclose(acc.value, ref, rtol=1e-6)
  _assert_on_mesh(acc, m, P("data"))


# ----------------------------------------------------------------------------
# spec resolution


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
  _assert_on_mesh(s, m, [P("x"), P("x")])


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
  _assert_on_mesh(s, m, [P("x"), P(None, "x")])


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


# ----------------------------------------------------------------------------
# write-back specs


@pytest.mark.parametrize("spec", [P("x"), P(None, "x"), P()])
def test_written_state_leaves_with_its_in_spec(spec, axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.State(jnp.arange(32.0).reshape(4, 8), name="s", spec=spec)

  def f():
    s.value = s.value + 1

  bs.shard_map(f, m, P(), None)()
  np.testing.assert_array_equal(s.value, np.arange(32.0).reshape(4, 8) + 1)
  _assert_on_mesh(s, m, spec)


def test_state_out_specs_by_type_key(axis_type):
  m = mesh((4,), ("x",), axis_type)
  s = bs.ShortTermState(jnp.zeros(8), name="s")

  def f(x):
    s.value = s.value + x
    return x

  g = bs.shard_map(f, m, P("x"), P("x"),
                   state_in_specs={bs.ShortTermState: P("x")},
                   state_out_specs={bs.ShortTermState: P("x")})
  g(jnp.arange(8.0))
  np.testing.assert_array_equal(s.value, np.arange(8.0))
  _assert_on_mesh(s, m, P("x"))


def test_replicated_write_after_psum(axis_type):
  m = mesh((4,), ("x",), axis_type)
  total = bs.State(jnp.zeros(()), name="total")

  def f(x):
    total.value = total.value + jax.lax.psum(x.sum(), "x")
    return x

  g = bs.shard_map(f, m, P("x"), P("x"))
  g(jnp.arange(8.0))
  g(jnp.arange(8.0))
  assert float(total.value) == 2 * np.arange(8.0).sum()
  _assert_on_mesh(total, m, P())


# ----------------------------------------------------------------------------
# write-only states, keyword arguments, in_specs forms


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
  _assert_on_mesh(out, m, P("x"))


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


# ----------------------------------------------------------------------------
# mesh=None and the call forms


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
  _assert_on_mesh(v, m, P("x"))
  with pytest.raises(ValueError, match="mesh"):
    f(jnp.arange(8.0))  # no mesh set any more
  np.testing.assert_array_equal(v.value, np.arange(8.0))


def test_positional_and_decorator_forms_agree():
  m = mesh((2,), ("x",))
  a = bs.State(jnp.zeros(4), name="a")
  b = bs.State(jnp.zeros(4), name="b")

  def fa(x):
    a.value = a.value + x * 2
    return a.value

  @bs.shard_map(mesh=m, in_specs=(P("x"),), out_specs=P("x"),
                state_in_specs={b: P("x")})
  def fb(x):
    b.value = b.value + x * 2
    return b.value

  ga = bs.shard_map(fa, m, (P("x"),), P("x"), state_in_specs={a: P("x")})
  x = jnp.arange(4.0)
  np.testing.assert_array_equal(ga(x), fb(x))
  np.testing.assert_array_equal(a.value, b.value)
  np.testing.assert_array_equal(a.value, np.arange(4.0) * 2)
  assert fb.__name__ == "fb"


# ----------------------------------------------------------------------------
# eager calls are cached; inputs placed right are not copied


@pytest.mark.parametrize("n", [2, 8])
def test_eager_calls_are_cached(n, axis_type):
  m = mesh((n,), ("x",), axis_type)
  v = bs.State(jnp.zeros(16), name="v")
  w = bs.State(jnp.ones(()), name="w")
  traces = []

  def step(x):
    traces.append(1)
    v.value = v.value * w.value + x
    return jax.lax.psum(v.value.sum(), "x")

  g = bs.shard_map(step, m, (P("x"),), P(), state_in_specs={v: P("x")})
  xs = [jnp.full(16, float(i)) + jnp.arange(16.0) for i in range(4)]
  g(xs[0])
  n_traces = len(traces)
  with count_compiles() as compiles:
    for x in xs[1:]:
      g(x)
    w.value = jnp.full((), 0.5)  # same aval, new value: still cached
    out = g(xs[0])
  assert len(traces) == n_traces
  assert compiles.count == 0
  ref = np.zeros(16, np.float32)
  for x in xs[1:]:
    ref = ref + np.asarray(x)
  ref = ref + np.asarray(xs[0])  # first call
  ref = ref * 0.5 + np.asarray(xs[0])
  np.testing.assert_allclose(v.value, ref, rtol=1e-6)
  np.testing.assert_allclose(out, ref.sum(), rtol=1e-6)


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
  _assert_on_mesh(v, m, P("x"))
  assert isinstance(out.sharding, NamedSharding) and out.sharding.spec == P("x")


def test_state_read_back_has_named_sharding_on_mesh(axis_type):
  m = mesh((2, 2), ("a", "b"), axis_type)
  s = bs.State(jnp.zeros((4, 4)), name="s", spec=P("a", "b"))
  r = bs.State(jnp.zeros(3), name="r")

  def f():
    s.value = s.value + 1
    r.value = r.value + 2

  bs.shard_map(f, m, P(), None)()
  _assert_on_mesh(s, m, P("a", "b"))
  _assert_on_mesh(r, m, P())
  np.testing.assert_array_equal(s.value, np.ones((4, 4)))
  np.testing.assert_array_equal(r.value, np.full(3, 2.0))
  assert "\n" not in repr(s)


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
  _assert_on_mesh(buf, m, P("x"))


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
  assert len(runs) == 2  # discovery + the one compiled trace; then cached
