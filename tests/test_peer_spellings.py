"""brainstate's spellings that mean the same thing in brainshard:
StatefulFunction called as a function, get_states(compile_if_miss=),
State.copy/replace, bs.ifelse and bs.bounded_while_loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brainshard as bs


def test_stateful_function_call_applies_writes_and_compiles_once():
  w = bs.State(jnp.arange(3.0), name="w")
  runs = []

  def f(x, scale=1.0):
    runs.append(1)
    w.value = w.value * x + scale
    return w.value.sum()

  sf = bs.StatefulFunction(f)
  ref = jnp.arange(3.0)
  for x in (2.0, 3.0, 0.5):
    out = sf(x, scale=0.5)
    ref = ref * x + 0.5  # the hand-threaded computation
    np.testing.assert_allclose(out, ref.sum(), rtol=1e-6)
    np.testing.assert_allclose(w.value, ref, rtol=1e-6)
  assert len(runs) == 1  # the discovery's trace serves the compiled program
  assert sf.get_states() == (w,) and sf.get_write_states() == (w,)
  # inside bs.jit it is one more stateful call
  before = w.value
  np.testing.assert_allclose(bs.jit(lambda: sf(1.0, scale=1.0))(),
                             (before + 1.0).sum(), rtol=1e-6)
  np.testing.assert_allclose(w.value, before + 1.0)
  sf.clear_cache()
  sf(1.0, scale=0.0)
  assert len(runs) >= 2  # cleared: traced again


def test_stateful_function_call_errors_leave_states_unchanged():
  w = bs.State(jnp.ones(2), name="w")

  def bad(x):
    w.value = w.value + 1
    return w.value @ jnp.ones(3)  # shape error after the write

  with pytest.raises(TypeError):
    bs.StatefulFunction(bad)(1.0)
  np.testing.assert_array_equal(w.value, jnp.ones(2))

  def takes_state(s):
    return s.value

  with pytest.raises(Exception, match="State"):
    bs.StatefulFunction(takes_state)(w)
  np.testing.assert_array_equal(w.value, jnp.ones(2))


def test_get_states_compile_if_miss():
  a = bs.State(jnp.zeros(2), name="a")
  b = bs.State(jnp.ones(2), name="b")

  def f(x):
    a.value = b.value * x
    return x

  sf = bs.StatefulFunction(f)
  with pytest.raises(ValueError, match="compile_if_miss=False"):
    sf.get_states(1.0, compile_if_miss=False)
  assert set(sf.get_states(1.0, compile_if_miss=True)) == {a, b}
  assert sf.get_read_states(2.0, compile_if_miss=False) == (b,)
  assert sf.get_write_states(2.0, compile_if_miss=False) == (a,)
  with pytest.raises(ValueError, match="compile_if_miss"):
    sf.get_states(jnp.ones(3), compile_if_miss=False)  # another signature


@pytest.mark.slow
def test_state_copy_and_replace():
  spec = jax.sharding.PartitionSpec("x")
  p = bs.ParamState(jnp.arange(4.0), name="p", spec=spec)
  c = p.copy()
  assert type(c) is bs.ParamState and c is not p
  assert (c.name, c.spec) == ("p", spec)
  c.value = c.value + 1
  np.testing.assert_array_equal(p.value, jnp.arange(4.0))
  np.testing.assert_array_equal(c.value, jnp.arange(4.0) + 1)
  r = p.replace(jnp.zeros(4))
  assert type(r) is bs.ParamState and r.spec == spec
  np.testing.assert_array_equal(r.value, jnp.zeros(4))
  np.testing.assert_array_equal(p.value, jnp.arange(4.0))
  assert p.replace(c) is c   # brainstate: a State of the same type replaces
  with pytest.raises(ValueError, match="of another type"):
    p.replace(bs.State(jnp.zeros(4)))
  # a RandomState copy continues the same stream independently
  rng = bs.RandomState(3)
  twin = rng.copy()
  assert isinstance(twin, bs.RandomState)
  np.testing.assert_array_equal(rng.normal(size=3), twin.normal(size=3))
  # copied inside a transform: a local state, as any State created there
  out = bs.jit(lambda: p.copy().value * 2)()
  np.testing.assert_array_equal(out, jnp.arange(4.0) * 2)


def _grade_ref(a):
  return jnp.select([a > 5, a > 0], [2.0 * a, a], -a)


@pytest.mark.slow
def test_ifelse_first_true_wins_and_matches_select():
  hits = bs.State(jnp.zeros(3, jnp.int32), name="hits")

  def branch(i, scale):
    def run(a):
      hits.value = hits.value.at[i].add(1)
      return scale * a
    return run

  branches = [branch(0, 2.0), branch(1, 1.0), branch(2, -1.0)]

  @bs.jit
  def grade(a):
    return bs.ifelse([a > 5, a > 0, True], branches, a, check_cond=False)

  for a in (7.0, 3.0, -2.0, 6.0):
    np.testing.assert_allclose(grade(a), _grade_ref(a))
  np.testing.assert_array_equal(hits.value, [2, 1, 1])
  # no condition true: the last branch
  out = bs.ifelse([False, False], [lambda: 1.0, lambda: 2.0], check_cond=False)
  assert float(out) == 2.0
  # exclusive conditions with the default check
  a = 3.0
  assert float(bs.ifelse([a > 5, (a > 0) & (a <= 5), a <= 0],
                         [lambda: 2.0, lambda: 1.0, lambda: 0.0])) == 1.0


def test_ifelse_errors_leave_states_unchanged():
  s = bs.State(jnp.zeros(()), name="s")

  def write():
    s.value = s.value + 1

  with pytest.raises(ValueError, match="2 of 2 conditions are true"):
    bs.ifelse([True, True], [write, write])
  with pytest.raises(ValueError, match="3 conditions for 2 branches"):
    bs.ifelse([True, False, False], [write, write])
  with pytest.raises(TypeError, match="callables"):
    bs.ifelse([True], [1.0])
  with pytest.raises(ValueError, match="scalar"):
    bs.ifelse([jnp.ones(2, bool), True], [write, write])
  assert float(s.value) == 0.0


def test_bounded_while_loop_matches_a_python_loop_and_stops_at_max_steps():
  t = bs.State(jnp.zeros(()), name="t")
  runs = []

  def body(x):
    runs.append(1)
    t.value = t.value + x
    return x * 1.5

  def ref(x, max_steps):
    tv = 0.0
    for _ in range(max_steps):
      if not tv < 10.0:
        break
      tv, x = tv + x, x * 1.5
    return x, tv

  def below(x):
    return t.value < 10.0

  for max_steps in (3, 50):
    t.value = jnp.zeros(())
    out = bs.bounded_while_loop(below, body, 1.0, max_steps=max_steps)
    x_ref, t_ref = ref(1.0, max_steps)
    np.testing.assert_allclose(out, x_ref, rtol=1e-6)
    np.testing.assert_allclose(t.value, t_ref, rtol=1e-6)
  n = len(runs)
  t.value = jnp.zeros(())
  bs.bounded_while_loop(below, body, 1.0, max_steps=50)
  assert len(runs) == n  # eager repeat: cached, not traced again
  assert float(bs.bounded_while_loop(lambda x: True, body, 2.0,
                                     max_steps=0)) == 2.0


@pytest.mark.slow
def test_bounded_while_loop_is_reverse_differentiable():
  def loss(x0):
    return bs.bounded_while_loop(lambda x: x < 5.0, lambda x: x * 2.0, x0,
                                 max_steps=10)

  def ref(x0):  # the same loop, hand-unrolled with lax.cond
    x = x0
    going = True
    for _ in range(10):
      going = jnp.logical_and(going, x < 5.0)
      x = jax.lax.cond(going, lambda v: v * 2.0, lambda v: v, x)
    return x

  for x0 in (0.3, 1.0, 6.0):
    np.testing.assert_allclose(bs.grad(loss, argnums=0)(x0),
                               jax.grad(ref)(x0))
    np.testing.assert_allclose(loss(x0), ref(x0))


def test_bounded_while_loop_bad_arguments():
  t = bs.State(jnp.zeros(()), name="t")
  for bad in (-1, 2.5, True):
    with pytest.raises(ValueError, match="max_steps"):
      bs.bounded_while_loop(lambda x: True, lambda x: x, 0, max_steps=bad)
  with pytest.raises(ValueError, match="base"):
    bs.bounded_while_loop(lambda x: True, lambda x: x, 0, max_steps=3, base=1)
  assert float(t.value) == 0.0
