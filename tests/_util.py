"""Helpers shared by the test files: cached meshes and a compile counter."""

import contextlib
import functools

import jax
import jax.monitoring
from jax.sharding import AxisType

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@functools.lru_cache(maxsize=None)
def mesh(shape, names, axis_type=AxisType.Explicit):
  """A mesh over the first prod(shape) devices, reused across tests."""
  return jax.make_mesh(tuple(shape), tuple(names),
                       axis_types=(axis_type,) * len(shape))


class CompileCounter:
  """Counts XLA backend compiles while active (any jit, any reshard)."""

  def __init__(self):
    self.count = 0

  def _listener(self, event, duration, **kwargs):
    if event == _COMPILE_EVENT:
      self.count += 1


@contextlib.contextmanager
def count_compiles():
  counter = CompileCounter()
  jax.monitoring.register_event_duration_secs_listener(counter._listener)
  try:
    yield counter
  finally:
    jax.monitoring.unregister_event_duration_listener(counter._listener)
