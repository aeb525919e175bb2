"""Frames (brainshard/_core/frames.py): while a transform traces, state reads
and writes go to this thread's innermost frame, a write is conformed to the
state's type, and two threads can trace functions touching the same State at
once."""

import threading

import jax
import jax.numpy as jnp
import numpy as np

import brainshard as bs


def test_python_scalar_write_keeps_state_dtype():
  s = bs.State(jnp.zeros((), jnp.float32), name="s")

  @bs.jit
  def f():
    s.value = 2.5

  f()
  assert s.value.dtype == jnp.float32 and float(s.value) == 2.5
  assert not jax.typeof(s.value).weak_type


def test_two_threads_trace_functions_touching_the_same_state():
  """Both threads are inside their traces at the same time (a barrier in the
  traced bodies); each must see its own traced values and get its result."""
  shared = bs.State(jnp.arange(4.0), name="shared")
  out_a = bs.State(jnp.zeros(4), name="out_a")
  out_b = bs.State(jnp.zeros(4), name="out_b")
  barrier = threading.Barrier(2, timeout=30)
  first = {"a": True, "b": True}

  def sync(key):
    if first[key]:  # only the first trace of each function meets the other
      first[key] = False
      barrier.wait()

  @bs.jit
  def fa(x):
    v = shared.value
    sync("a")
    out_a.value = v * x
    shared.value = shared.value + 0  # a write of the same state in both
    return (v * x).sum()

  @bs.jit
  def fb(x):
    v = shared.value
    sync("b")
    out_b.value = v + x
    shared.value = shared.value + 0
    return (v + x).sum()

  results, errors = {}, []

  def run(key, fn, arg):
    try:
      results[key] = fn(arg)
    except BaseException as e:  # reported below
      errors.append(e)
      barrier.abort()

  threads = [threading.Thread(target=run, args=("a", fa, 2.0)),
             threading.Thread(target=run, args=("b", fb, 10.0))]
  for t in threads:
    t.start()
  for t in threads:
    t.join(60)
  assert not errors, errors
  x = np.arange(4.0)
  np.testing.assert_allclose(results["a"], (2 * x).sum())
  np.testing.assert_allclose(results["b"], (x + 10).sum())
  np.testing.assert_array_equal(out_a.value, 2 * x)
  np.testing.assert_array_equal(out_b.value, x + 10)
  np.testing.assert_array_equal(shared.value, x)
  assert not bs._core.threads.frame_stack()
