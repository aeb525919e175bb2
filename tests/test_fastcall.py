"""The generated per-plan call path (brainshard/_core/fastcall.py) keeps every
behaviour of the generic one: pytree states and keyword arguments, many
states, plan growth, errors, the function's signature, and no re-tracing.
Placement through the generated call is in test_placement.py."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._core import fastcall as _fastcall

from conftest import make_mesh


def test_repeated_calls_do_not_retrace():
  traces = []
  v = bs.State(jnp.zeros(3))

  @bs.jit
  def step(x):
    traces.append(1)
    v.value = v.value + x
    return v.value.sum()

  step(1.0)
  n = len(traces)
  for _ in range(5):
    step(1.0)
  assert len(traces) == n
  np.testing.assert_allclose(v.value, 6.0)


def test_many_states_take_the_generic_path():
  n = _fastcall.MAX_STATES + 5
  states = [bs.State(jnp.full(2, float(i))) for i in range(n)]

  @bs.jit
  def step():
    for s in states:
      s.value = s.value * 2

  step()
  step()
  for i, s in enumerate(states):
    np.testing.assert_allclose(s.value, 4.0 * i)


def test_plan_growth_through_the_fast_path():
  a, b = bs.State(jnp.zeros(2)), bs.State(jnp.zeros(2))

  @bs.jit(static_argnums=0)
  def step(which):
    if which:
      b.value = b.value + 1
    else:
      a.value = a.value + 1

  for which in (0, 0, 1, 1, 0):
    step(which)
  np.testing.assert_allclose(a.value, 3.0)
  np.testing.assert_allclose(b.value, 2.0)


def test_reading_a_transform_local_state_raises_and_keeps_states():
  made = []
  v = bs.State(jnp.ones(2))

  @bs.jit
  def make():
    made.append(bs.State(jnp.zeros(2)))

  make()
  local = made[0]

  @bs.jit
  def step():
    v.value = v.value + local.value

  with pytest.raises(bs.StateTraceError, match="created inside"):
    step()
  np.testing.assert_allclose(v.value, 1.0)


def test_jitted_function_keeps_its_signature():
  v = bs.State(jnp.ones(2))

  @bs.jit
  def f(x, y=2.0):
    return v.value * x + y

  assert list(inspect.signature(f).parameters) == ["x", "y"]
  assert callable(f)
  np.testing.assert_allclose(f(1.0), 3.0)
  np.testing.assert_allclose(jax.jit(f)(1.0), 3.0)  # reading under jax.jit


def test_eager_shard_map_pytree_state_and_kwargs():
  mesh = make_mesh((4,), ("x",))
  devices = mesh.devices.flat
  assert len(list(devices)) == 4
  s = bs.State({"a": jnp.zeros(8), "b": jnp.zeros((8, 2))}, name="s",
               spec={"a": P("x"), "b": P(None)})

  @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P())
  def step(x, *, scale=1.0):
    s.value = {"a": s.value["a"] + x * scale, "b": s.value["b"] + 1}
    return jax.lax.psum(s.value["a"].sum(), "x")

  assert float(step(1.0)) == 8.0
  assert float(step(1.0, scale=2.0)) == 24.0
  np.testing.assert_allclose(s.value["b"], 2.0)
  assert s.value["a"].sharding.spec == P("x")
