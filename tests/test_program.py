"""The compiled program and its one call path (brainshard/_core/program/program.py):
one trace and one compile per signature, a first call that runs the Python
body once, a new state shape that traces once more, and a trace that touches
new states growing the program."""

import jax
import jax.numpy as jnp
import numpy as np

import brainshard as bs
from _util import count_compiles


def test_one_trace_and_one_compile_per_signature():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  @bs.jit
  def f(x):
    traces.append(jax.typeof(x).shape)
    s.value = s.value + x.sum()
    return x * 2

  # inputs are made before counting: creating arrays may compile too
  x3 = [jnp.full(3, float(i), jnp.float32) for i in range(4)]
  x5 = jnp.ones(5)
  with count_compiles() as compiles:
    f(x3[1])
  assert compiles.count == 1
  first = len(traces)
  with count_compiles() as compiles:
    for i in range(3):
      f(x3[i])
  assert len(traces) == first
  assert compiles.count == 0
  with count_compiles() as compiles:
    f(x5)  # new signature: exactly one more trace and compile
    f(x5)
  assert len(traces) == first + 1
  assert compiles.count == 1
  with count_compiles() as compiles:
    f(x3[1])  # back to the first signature: cached
  assert len(traces) == first + 1
  assert compiles.count == 0
  np.testing.assert_allclose(s.value, np.full(3, 3 + (0 + 3 + 6) + 5 + 5 + 3))


def test_first_call_traces_once():
  """The issue asks for one trace per signature; the first call should run
  the Python body once (not once for discovery and again for jax.jit)."""
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  @bs.jit
  def f(x):
    traces.append(1)
    s.value = s.value + x

  f(1.0)
  assert len(traces) == 1


def test_state_shape_change_outside_retraces_once():
  s = bs.State(jnp.zeros(3), name="s")
  traces = []

  @bs.jit
  def f():
    traces.append(1)
    s.value = s.value + 1

  f()
  n = len(traces)
  s.value = jnp.zeros(6)
  f()
  assert len(traces) == n + 1
  np.testing.assert_array_equal(s.value, np.ones(6))
  f()
  assert len(traces) == n + 1
  np.testing.assert_array_equal(s.value, np.full(6, 2.0))


def test_static_flag_that_touches_a_new_state():
  a = bs.State(jnp.zeros(2), name="a")
  b = bs.State(jnp.zeros(2), name="b")

  @bs.jit(static_argnums=1)
  def f(x, also_b):
    a.value = a.value + x
    if also_b:
      b.value = b.value + 10 * x

  f(1.0, False)
  f(1.0, True)
  f(1.0, False)
  np.testing.assert_array_equal(a.value, [3.0, 3.0])
  np.testing.assert_array_equal(b.value, [10.0, 10.0])
