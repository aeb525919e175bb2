"""Discovery (brainshard/_core/discovery.py) through StatefulFunction: which
states a function reads and writes and in what order, state reads as jaxpr
inputs (never constants), the per-signature cache, and jaxpr_call's purity.
Static arguments and States passed as arguments are in test_args.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brainshard as bs


def _const_matches(consts, value):
  value = np.asarray(value)
  for c in consts:
    c = np.asarray(c)
    if c.shape == value.shape and np.array_equal(c, value):
      return True
  return False


def _three_states():
  a = bs.State(jnp.arange(3.0) * 7.25 + 1.5, name="a")        # read only
  b = bs.State(jnp.arange(4.0) * -3.5 + 2.25, name="b")       # written only
  c = bs.State(jnp.arange(5.0) * 11.125 - 4.0, name="c")      # read, written
  return a, b, c


# ----------------------------------------------------------------------------
# discovery and ordering


def test_states_read_and_write_sets_in_first_touch_order():
  a, b, c = _three_states()

  def f(x):
    y = a.value.sum() * x
    b.value = jnp.full(4, y)
    c.value = c.value + y
    return y

  sf = bs.StatefulFunction(f)
  assert sf.get_states(1.0) == (a, b, c)
  assert sf.get_read_states(1.0) == (a, c)
  assert sf.get_write_states(1.0) == (b, c)
  # With no arguments they describe the most recent discovery.
  assert sf.get_states() == (a, b, c)


def test_order_follows_first_touch_not_creation():
  a, b, c = _three_states()

  def f():
    c.value = c.value * 2
    b.value = b.value + a.value.sum()

  sf = bs.StatefulFunction(f)
  assert sf.get_states() == (c, b, a)
  assert sf.get_read_states() == (c, b, a)
  assert sf.get_write_states() == (c, b)


def test_state_written_then_read_is_not_an_input():
  s = bs.State(jnp.ones(2), name="s")

  def f(x):
    s.value = x
    return s.value * 2

  sf = bs.StatefulFunction(f)
  assert sf.get_read_states(jnp.ones(2)) == ()
  assert sf.get_write_states(jnp.ones(2)) == (s,)
  jaxpr = sf.make_jaxpr(jnp.ones(2))
  assert len(jaxpr.jaxpr.invars) == 1


def test_untouched_state_is_not_discovered():
  a, b, c = _three_states()
  sf = bs.StatefulFunction(lambda x: a.value * x)
  assert sf.get_states(2.0) == (a,)
  assert sf.get_write_states(2.0) == ()


# ----------------------------------------------------------------------------
# the jaxpr


def test_read_state_is_a_jaxpr_input_never_a_constant():
  a, b, c = _three_states()

  def f(x):
    b.value = jnp.full(4, a.value.sum() * x)
    c.value = c.value * x
    return a.value + x

  sf = bs.StatefulFunction(f)
  jaxpr = sf.make_jaxpr(2.0)
  # 1 argument leaf + read states a and c; b is written only.
  assert len(jaxpr.jaxpr.invars) == 3
  in_shapes = [v.aval.shape for v in jaxpr.jaxpr.invars]
  assert in_shapes == [(), (3,), (5,)]
  out_shapes = [v.aval.shape for v in jaxpr.jaxpr.outvars]
  assert out_shapes == [(3,), (4,), (5,)]  # output, then written b, c
  for s in (a, b, c):
    assert not _const_matches(jaxpr.consts, s.value), s


def test_pytree_state_leaves_are_inputs():
  s = bs.State({"u": jnp.arange(3.0) + 0.5, "w": jnp.arange(6.0).reshape(2, 3)})

  def f():
    return s.value["u"] + s.value["w"].sum(0)

  jaxpr = bs.StatefulFunction(f).make_jaxpr()
  assert [v.aval.shape for v in jaxpr.jaxpr.invars] == [(3,), (2, 3)]
  assert not jaxpr.consts or not any(
      _const_matches(jaxpr.consts, leaf) for leaf in jax.tree.leaves(s.value))


def test_write_only_state_is_not_an_input():
  out = bs.State(jnp.zeros(7), name="out")

  def f(x):
    out.value = jnp.full(7, x)

  jaxpr = bs.StatefulFunction(f).make_jaxpr(1.0)
  assert len(jaxpr.jaxpr.invars) == 1
  assert jaxpr.jaxpr.invars[0].aval.shape == ()


# ----------------------------------------------------------------------------
# caching


def test_discovery_cached_per_signature():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  def f(x):
    traces.append(1)
    s.value = s.value + x
    return x * 2

  sf = bs.StatefulFunction(f)
  sf.make_jaxpr(jnp.ones(3))
  assert len(traces) == 1
  sf.make_jaxpr(jnp.zeros(3))           # same signature
  sf.get_states(jnp.ones(3) * 4.0)
  sf.jaxpr_call([s.value], jnp.ones(3))
  assert len(traces) == 1
  sf.make_jaxpr(jnp.ones(1))            # new shape (broadcasts into s)
  assert len(traces) == 2
  sf.make_jaxpr(jnp.ones(3, jnp.int32))  # new dtype
  assert len(traces) == 3
  sf.make_jaxpr(jnp.ones(3))            # first signature again: cached
  assert len(traces) == 3


def test_state_shape_change_outside_retraces():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  def f(x):
    traces.append(1)
    return s.value * x

  sf = bs.StatefulFunction(f)
  j1 = sf.make_jaxpr(2.0)
  sf.make_jaxpr(2.0)
  assert len(traces) == 1
  s.value = jnp.zeros(5)  # new shape, set outside any transform
  j2 = sf.make_jaxpr(2.0)
  assert len(traces) == 2
  assert j1.jaxpr.invars[1].aval.shape == (3,)
  assert j2.jaxpr.invars[1].aval.shape == (5,)
  s.value = jnp.zeros(5, jnp.int32)  # new dtype
  sf.make_jaxpr(2.0)
  assert len(traces) == 3
  s.value = jnp.ones(5, jnp.int32)  # same aval, new value: cached
  sf.make_jaxpr(2.0)
  assert len(traces) == 3


def test_axis_env_lets_collectives_trace():
  s = bs.State(jnp.ones(4), name="s")

  def f(x):
    s.value = s.value + jax.lax.psum(x, "x")
    return jax.lax.axis_index("x")

  with pytest.raises(NameError):
    bs.StatefulFunction(f).make_jaxpr(1.0)
  sf = bs.StatefulFunction(f, axis_env=[("x", 4)])
  jaxpr = sf.make_jaxpr(1.0)
  assert "psum" in str(jaxpr)
  assert sf.get_read_states() == (s,)
  assert sf.get_write_states() == (s,)


# ----------------------------------------------------------------------------
# jaxpr_call


def test_jaxpr_call_is_pure_and_matches_running_the_function():
  a, b, c = _three_states()

  def f(x):
    y = a.value.sum() * x
    b.value = jnp.full(4, y) + b.value  # b read here: all three are read
    c.value = c.value * x
    return y + c.value.sum()

  before = [np.asarray(s.value) for s in (a, b, c)]
  sf = bs.StatefulFunction(f)
  states = sf.get_states(3.0)
  assert states == (a, b, c)
  vals = [jnp.asarray(v) + 1.0 for v in before]
  new_vals, out = sf.jaxpr_call(vals, 3.0)

  # purity: no State changed
  for s, v in zip((a, b, c), before):
    np.testing.assert_array_equal(s.value, v)

  # expected: the same function in plain numpy on the given values
  va, vb, vc = [np.asarray(v) for v in vals]
  y = va.sum() * 3.0
  np.testing.assert_allclose(new_vals[0], va)
  np.testing.assert_allclose(new_vals[1], np.full(4, y) + vb, rtol=1e-6)
  np.testing.assert_allclose(new_vals[2], vc * 3.0, rtol=1e-6)
  np.testing.assert_allclose(out, y + (vc * 3.0).sum(), rtol=1e-6)

  # and it matches actually running the function with those state values
  for s, v in zip((a, b, c), vals):
    s.value = v
  ran = bs.jit(f)(3.0)
  np.testing.assert_allclose(out, ran, rtol=1e-6)
  for s, v in zip((a, b, c), new_vals):
    np.testing.assert_allclose(s.value, v, rtol=1e-6)


def test_jaxpr_call_write_only_state_value_is_ignored():
  out_state = bs.State(jnp.zeros(2), name="o")

  def f(x):
    out_state.value = jnp.full(2, x)
    return x

  sf = bs.StatefulFunction(f)
  new_vals, out = sf.jaxpr_call([jnp.full(2, 99.0)], 4.0)
  np.testing.assert_array_equal(new_vals[0], [4.0, 4.0])
  np.testing.assert_array_equal(out_state.value, [0.0, 0.0])


def test_jaxpr_call_wrong_number_of_values():
  a, b, c = _three_states()
  sf = bs.StatefulFunction(lambda: a.value + 1)
  with pytest.raises(ValueError, match="1 state"):
    sf.jaxpr_call([])
  np.testing.assert_array_equal(a.value, np.arange(3.0) * 7.25 + 1.5)


def test_jaxpr_call_with_a_missing_value_names_the_state():
  w = bs.State(jnp.ones(3), name="w")

  def f(x):
    w.value = w.value * x
    return w.value.sum()

  with pytest.raises(ValueError, match=r"value given for State 'w' is None.*"
                     r"holds float32\[3\]"):
    bs.StatefulFunction(f).jaxpr_call([None], 2.0)
  np.testing.assert_array_equal(np.asarray(w.value), np.ones(3))


# -- brainstate's make_jaxpr cases (issue 24) --------------------------------


def test_jaxpr_call_messages_name_the_mismatch():
  a, b = bs.State(jnp.ones(2), name="a"), bs.State(jnp.ones(2), name="b")

  def f(x):
    a.value = a.value + x
    b.value = b.value + x
    return a.value

  sf = bs.StatefulFunction(f)
  with pytest.raises(ValueError, match="State length mismatch: got 1 state values"):
    sf.jaxpr_call([a.value], 1.0)
  with pytest.raises(ValueError, match="State 'b' is None at index 1"):
    sf.jaxpr_call([a.value, None], 1.0)


def test_returning_a_state_is_a_clear_error():
  a = bs.State(jnp.ones(3), name="a")
  for call in (lambda: bs.jit(lambda: a)(),
               lambda: bs.StatefulFunction(lambda x: bs.State(x)).make_jaxpr(1.0)):
    # a TypeError, as JAX's for a non-array output, and brainstate's ValueError
    with pytest.raises(TypeError, match=r"returned State.*return `state.value`"):
      call()
    with pytest.raises(ValueError):
      call()


def test_static_argnums_past_the_signature_are_an_error():
  sf = bs.StatefulFunction(lambda x: x, static_argnums=(5,))
  with pytest.raises(ValueError, match="static_argnums contains index 5, but "
                     "the function takes 1 positional"):
    sf.make_jaxpr(jnp.ones(1))
  with pytest.raises(ValueError, match="index 2"):
    bs.jit(lambda x, y: x, static_argnums=2)(1.0, 2.0)
  # *args: any position may exist
  assert bs.jit(lambda *xs: xs[0] * xs[1], static_argnums=1)(2.0, 3) == 6.0


def test_get_jaxpr_out_shapes_and_treedef():
  sf = bs.StatefulFunction(lambda x: (x * 2, x + 1))
  with pytest.raises(ValueError, match="not compiled"):
    sf.get_jaxpr(jnp.ones(2), compile_if_miss=False)
  assert sf.get_jaxpr(jnp.ones(2)) is sf.make_jaxpr(jnp.ones(2))
  shapes = sf.get_out_shapes(jnp.ones(2), compile_if_miss=False)
  assert [s.shape for s in shapes] == [(2,), (2,)]
  assert sf.get_out_treedef(jnp.ones(2)) == jax.tree.structure((0, 0))


def test_discovery_leaks_no_tracer_under_checking_leaks():
  # the discovery frame holds the trace's tracers: it must not outlive it
  w = bs.ParamState(jnp.array(2.0), name="w")
  v = bs.State(jnp.zeros(3), name="v")
  grad = bs.grad(lambda x: (w.value * x).sum(), grad_states=w)

  @bs.jit
  def outer(x):
    v.value = v.value + x
    return grad(x)

  with jax.checking_leaks():
    out = outer(jnp.ones(3))
  assert float(out) == 3.0 and float(v.value[0]) == 1.0
