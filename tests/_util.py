"""Helpers shared by the test files: cached meshes, a compile counter, a
check of where a State's value lives and NEST's kernel reset."""

import contextlib
import functools

import jax
import jax.monitoring
from jax.sharding import AxisType, NamedSharding

import brainshard as bs

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


def reset_nest(nest, resolution: float) -> None:
  """NEST's kernel reset at ``resolution`` ms, printing only errors."""
  nest.verbosity = nest.VerbosityLevel.ERROR
  nest.ResetKernel()
  nest.resolution = resolution


@contextlib.contextmanager
def every_program_compiled():
  """The run's persistent compilation cache (conftest.py) off: a program
  loaded from it fires no compile event, so a counter would miss it."""
  folder = bs.compilation_cache()
  bs.compilation_cache(None)
  try:
    yield
  finally:
    bs.compilation_cache(folder)


@contextlib.contextmanager
def count_compiles():
  counter = CompileCounter()
  jax.monitoring.register_event_duration_secs_listener(counter._listener)
  try:
    with every_program_compiled():
      yield counter
  finally:
    jax.monitoring.unregister_event_duration_listener(counter._listener)


def assert_on_mesh(state, m, spec):
  """Every leaf of the state's value has a NamedSharding on ``m`` equivalent
  to ``spec`` (JAX may spell it with trailing Nones: P('x', None) is P('x'))."""
  leaves = jax.tree.leaves(state.value)
  shardings = jax.tree.leaves(state.sharding)
  specs = spec if isinstance(spec, list) else [spec] * len(leaves)
  assert len(shardings) == len(leaves) == len(specs)
  for x, sh, sp in zip(leaves, shardings, specs):
    assert isinstance(sh, NamedSharding), sh
    assert sh.mesh == m
    assert canonical_spec(sh.spec) == canonical_spec(sp), (sh.spec, sp)
    assert sh.is_equivalent_to(NamedSharding(m, sp), x.ndim)


def canonical_spec(spec):
  entries = list(spec)
  while entries and entries[-1] is None:
    entries.pop()
  return tuple(entries)


def step_while_a_thread_reads(step, read, steps: int, start_at: int) -> list:
  """Calls ``step()`` ``steps`` times; from call ``start_at`` on, another
  thread calls ``read()`` in a loop. Returns what that thread raised."""
  import threading
  errors, stop = [], threading.Event()

  def reader():
    try:
      while not stop.is_set():
        read()
    except BaseException as e:  # reported by the caller
      errors.append(e)

  watcher = threading.Thread(target=reader)
  for i in range(steps):
    if i == start_at:
      watcher.start()
    step()
  stop.set()
  watcher.join(60)
  return errors
