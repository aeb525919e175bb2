"""Shared fixtures: meshes over the 8 faked CPU devices and a leak guard.

The repository-level conftest.py sets XLA_FLAGS before JAX is imported.
"""

import jax
import pytest
from jax.sharding import AxisType

import brainshard as bs
from brainshard._core.state.state import UNSET, live_states

assert jax.device_count() == 8, "tests need 8 (faked) CPU devices"

AXIS_TYPES = [AxisType.Explicit, AxisType.Auto]


def make_mesh(shape, names, axis_type=AxisType.Explicit):
  return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))


@pytest.fixture(params=AXIS_TYPES, ids=["explicit", "auto"])
def axis_type(request):
  return request.param


@pytest.fixture(autouse=True)
def slots_owned_by_this_thread():
  """Every test starts as a fresh single-threaded program does: the test
  thread owns the slots, lock-free (a test that started threads ended that
  mode for the rest of its process; state.py: WINDOW)."""
  window = bs._core.threads.WINDOW
  if bs._core.threads.thread_frames.owner and not window.busy:
    window.lockfree = bs._core.threads.GIL_ENABLED
  yield


@pytest.fixture(autouse=True)
def no_tracer_left_in_any_state():
  """After every test, no live State holds a tracer in its global slot."""
  yield
  for state in live_states():
    value = state._value
    if value is UNSET:
      continue
    for leaf in jax.tree.leaves(value):
      assert not isinstance(leaf, jax.core.Tracer), (
          f"{state!r} holds a tracer after the test")
  assert not bs._core.threads.frame_stack(), "a brainshard frame was left active"
