"""The generated per-plan call path (brainshard/_core/program/fastcall.py)
keeps every behaviour of the generic one: pytree states and keyword
arguments, many states, plan growth, errors, the function's signature, and
no re-tracing. Its source is Python's to show: in linecache (tracebacks,
pdb), returned by ``call_source()``, each State named after itself.
Placement through the generated call is in test_placement.py."""

import inspect
import linecache
import traceback
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._core.program import fastcall as _fastcall, program as _program

from _util import step_while_a_thread_reads
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


@pytest.mark.parametrize("pack_from", [1, 10**6])  # one list; positional
def test_many_states_take_the_generic_path(monkeypatch, pack_from):
  monkeypatch.setattr(_fastcall, "MAX_STATES", 4)
  monkeypatch.setattr(_program, "PACK_FROM", pack_from)
  n = _fastcall.MAX_STATES + 5
  states = [bs.State(jnp.full(2, float(i))) for i in range(n)]
  read_only = bs.State(jnp.ones(2))

  @bs.jit
  def step():
    for s in states:
      s.value = s.value * 2 * read_only.value

  step()
  kept = states[1].value  # one kept, the others donated
  step()
  assert not kept.is_deleted()
  step()
  for i, s in enumerate(states):
    np.testing.assert_allclose(s.value, 8.0 * i)
  program = step._core.program
  assert program.packed == (pack_from == 1)
  # the entry only passes the call on to the generic path
  assert "donating_all" not in program.entry.__code__.co_names


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


# -- the owner's lock-free window (state.py: WINDOW) --------------------------


def test_the_owner_thread_calls_and_reads_without_the_lock():
  """While only the test thread uses States it takes no lock: a call and a
  read finish while another thread holds SLOT_LOCK (without the window they
  would wait for it)."""
  import threading
  from brainshard._core import threads as _state
  assert _state.thread_frames.owner and _state.WINDOW.lockfree
  v = bs.State(jnp.zeros(3), name="v")

  @bs.jit
  def step():
    v.value = v.value + 1.0

  step()
  held, release = threading.Event(), threading.Event()

  def hold_the_lock():
    with _state.SLOT_LOCK:  # the raw lock: does not end lock-free mode
      held.set()
      release.wait(30)

  holder = threading.Thread(target=hold_the_lock)
  holder.start()
  try:
    assert held.wait(30)
    start = time.monotonic()
    step()  # with the lock: waits until the holder gives up, 30 s
    np.testing.assert_allclose(v.value, 2.0)
    assert time.monotonic() - start < 15
  finally:
    release.set()
    holder.join(30)
  assert _state.WINDOW.lockfree and _state.WINDOW.busy == 0


def test_the_owner_thread_takes_no_lock_on_the_generic_path_or_a_draw(
    monkeypatch):
  """The generic call path (too many states for a generated call) and an
  eager random draw hold the slots as the generated call does: the owner's
  window, not SLOT_LOCK, while it alone uses States."""
  import threading
  from brainshard._core import threads as _state
  monkeypatch.setattr(_fastcall, "MAX_STATES", 0)
  v = bs.State(jnp.zeros(3), name="v")

  @bs.jit
  def step():
    v.value = v.value + 1.0

  step()
  rng = bs.random.RandomState(0)
  held, release = threading.Event(), threading.Event()

  def hold_the_lock():
    with _state.SLOT_LOCK:  # the raw lock: does not end lock-free mode
      held.set()
      release.wait(30)

  holder = threading.Thread(target=hold_the_lock)
  holder.start()
  try:
    assert held.wait(30)
    start = time.monotonic()
    step()  # with the lock: each waits until the holder gives up, 30 s
    rng.normal(size=2)
    rng.seed(1)
    np.testing.assert_allclose(v.value, 2.0)
    assert time.monotonic() - start < 15
  finally:
    release.set()
    holder.join(30)
  assert _state.WINDOW.lockfree and _state.WINDOW.busy == 0


def test_a_second_thread_waits_for_the_owners_call_then_everyone_locks():
  """Another thread's first slot access ends lock-free mode, and waits while
  the owner is between reading a slot and writing it back."""
  import threading
  from brainshard._core import threads as _state
  v = bs.State(jnp.arange(3.0), name="v")
  window = _state.WINDOW
  window.busy += 1  # the owner, inside a call
  got = []
  readers = [threading.Thread(target=lambda: got.append(v.value))
             for _ in range(2)]  # the second finds lock-free mode ended
  try:
    for reader in readers:
      reader.start()
      reader.join(0.3)
      assert reader.is_alive() and not got  # waiting for the owner
    assert not window.lockfree
  finally:
    window.busy -= 1
  for reader in readers:
    reader.join(30)
  assert len(got) == 2
  for value in got:
    np.testing.assert_allclose(value, [0.0, 1.0, 2.0])


def test_a_write_from_another_thread_waits_for_the_owners_call():
  """A write is a slot access too: it marks the State for counting
  (donation.py), and the mark and the value must change together, not in
  the middle of the owner's call. What the writer still holds is never
  donated."""
  import threading
  from brainshard._core import threads as _state
  v = bs.State(jnp.zeros(3), name="v")

  @bs.jit
  def step():
    v.value = v.value + 1.0

  step()
  window = _state.WINDOW
  window.busy += 1  # the owner, inside a call
  mine = jnp.full(3, 10.0)
  writer = threading.Thread(target=lambda: setattr(v, "value", mine))
  try:
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and not window.lockfree
  finally:
    window.busy -= 1
  writer.join(30)
  step()
  step()
  assert not mine.is_deleted()
  np.testing.assert_allclose(mine, 10.0)
  np.testing.assert_allclose(v.value, 12.0)


def test_the_owner_stepping_while_another_thread_starts_reading():
  """The owner donates on every step while a thread starts reading and using
  the value mid-run: no array a thread holds is ever deleted, no step lost."""
  from brainshard._core import threads as _state
  s = bs.State(jnp.zeros(64), name="shared")

  @bs.jit
  def step():
    s.value = s.value + 1.0

  # reading fails if the buffer was donated under the reader
  errors = step_while_a_thread_reads(step, lambda: float(s.value.sum()),
                                     steps=300, start_at=100)
  assert not errors, errors
  assert not _state.WINDOW.lockfree
  np.testing.assert_allclose(s.value, np.full(64, 300.0))


# -- a step without parameters ------------------------------------------------


def test_a_step_without_parameters_called_with_arguments():
  """The generated call of a function without parameters takes none: a call
  with arguments fails as calling the function would, and changes nothing."""
  v = bs.State(jnp.zeros(2))

  @bs.jit
  def step():
    v.value = v.value + 1.0

  step()
  with pytest.raises(TypeError, match=r"step\(\) takes 0 positional"):
    step(1.0)
  with pytest.raises(TypeError, match=r"step\(\) got an unexpected keyword"):
    step(x=1.0)
  np.testing.assert_allclose(v.value, 1.0)
  step()
  np.testing.assert_allclose(v.value, 2.0)


def test_each_jitted_function_calls_its_own_current_program():
  """Calling the object runs its own plan's entry, also after the plan grew
  (the entry is replaced) and for methods bound per instance."""
  a, b = bs.State(jnp.zeros(())), bs.State(jnp.zeros(()))
  flag = [False]

  @bs.jit
  def f():
    a.value = a.value + 1.0
    if flag[0]:
      b.value = b.value + 10.0

  @bs.jit
  def g():
    b.value = b.value + 100.0

  f(), g()
  first = type(f).__call__
  flag[0] = True
  f.clear_cache()  # the next trace touches b too: a new plan
  f(), g()
  assert type(f).__call__ is not first and type(f) is not type(g)
  from brainshard._transforms.jit import JittedFunction
  assert isinstance(f, JittedFunction) and type(f).__name__ == "JittedFunction"
  np.testing.assert_allclose([a.value, b.value], [2.0, 210.0])

  class Model:
    def __init__(self, x):
      self.s = bs.State(jnp.full((), x))

    @bs.jit
    def step(self):
      self.s.value = self.s.value * 2.0

  m1, m2 = Model(1.0), Model(3.0)
  m1.step(), m2.step(), m1.step()
  np.testing.assert_allclose([m1.s.value, m2.s.value], [4.0, 6.0])


def test_a_placed_step_without_parameters():
  """A step without parameters through the generated call's placement checks
  (jit of a shard_map, and an eager shard_map): same values as unsharded."""
  mesh = make_mesh((4,), ("x",))
  v = bs.State(jnp.arange(8.0), name="v", spec=P("x"))
  w = bs.State(jnp.arange(8.0), name="w", spec=P("x"))

  def body(s):
    s.value = s.value * 2.0 + 1.0

  jitted = bs.jit(bs.shard_map(lambda: body(v), mesh=mesh))
  eager = bs.shard_map(lambda: body(w), mesh=mesh)
  for _ in range(3):
    jitted()
    eager()
  want = np.arange(8.0)
  for _ in range(3):
    want = want * 2.0 + 1.0
  np.testing.assert_allclose(v.value, want)
  np.testing.assert_allclose(w.value, want)


@pytest.mark.parametrize(  # the usual call without and with the clock;
    "n", [1, _fastcall.CLOCK_FROM + 6, _program.PACK_FROM + 2])  # holding
def test_what_a_step_returns_comes_back_as_it_was(n):
  """A step returning None gets its written values back as a bare list from
  the program (program.results); any other return value, a list included,
  is the caller's, on the generated call and on the generic path."""
  states = [bs.State(jnp.zeros(2)) for _ in range(n)]
  returns = {"none": lambda: None, "list": lambda: [states[0].value],
             "tuple": lambda: (None, states[0].value)}
  for kind, ret in returns.items():
    @bs.jit
    def step(ret=ret):
      for s in states:
        s.value = s.value + 1.0
      return ret()
    outs = [step() for _ in range(3)]
    for i, out in enumerate(outs):
      if kind == "none":
        assert out is None
      elif kind == "list":
        assert isinstance(out, list) and len(out) == 1
        np.testing.assert_array_equal(out[0], states[0].value - 2 + i)
      else:
        assert isinstance(out, tuple) and out[0] is None
        np.testing.assert_array_equal(out[1], states[0].value - 2 + i)
  np.testing.assert_array_equal(states[-1].value, 9.0)


@pytest.mark.parametrize("n", [1, _fastcall.CLOCK_FROM + 6])
def test_a_call_from_a_host_callback_inside_a_call(n):
  """A host callback that runs another ``bs.jit`` step while the outer
  step's program runs: both write their States, the owner's window is
  closed again after both (the inner call nests in the outer's window)
  and no lock was taken or left taken."""
  from jax.experimental import io_callback
  from brainshard._core import threads as _threads
  outer_states = [bs.State(jnp.zeros(2)) for _ in range(n)]
  inner_state = bs.State(jnp.zeros(2))

  @bs.jit
  def inner():
    inner_state.value = inner_state.value + 1.0

  def host(x):
    inner()
    assert _threads.WINDOW.busy  # still inside the outer call's window
    return np.asarray(x)

  @bs.jit
  def outer():
    for s in outer_states:
      s.value = io_callback(host, jax.ShapeDtypeStruct((2,), jnp.float32),
                            s.value + 1.0, ordered=True)

  for _ in range(3):
    outer()
  np.testing.assert_array_equal(outer_states[-1].value, [3.0, 3.0])
  np.testing.assert_array_equal(inner_state.value, [3.0 * n] * 2)
  assert _threads.WINDOW.busy == 0 and _threads.WINDOW.lockfree
  assert not _threads.SLOT_LOCK._is_owned()


# -- the generated source: in linecache, printable, named for the States -------


def _generated_frames(tb):
  return [f for f in traceback.extract_tb(tb)
          if "<generated call bs.jit(" in f.filename]


@pytest.mark.parametrize("cleared", [False, True])
def test_a_traceback_through_a_cached_call_shows_the_generated_line(cleared):
  """A cached call that traces again (a new shape) runs the step's Python
  from the generated call's line that calls the program: the traceback
  shows that line, also after ``linecache.clearcache()`` (found again
  through the frame's globals)."""
  v = bs.State(jnp.zeros(3), name="v")

  @bs.jit
  def step(x):
    if x.shape[0] > 3:
      raise ValueError("too long")
    v.value = v.value + x.sum()

  step(jnp.ones(3))
  step(jnp.ones(3))  # the generated call, compiled for float32[3]
  if cleared:
    linecache.clearcache()
  with pytest.raises(ValueError, match="too long") as info:
    step(jnp.ones(4))
  (frame,) = _generated_frames(info.value.__traceback__)
  assert frame.line == "new = donating_all(v._value, *args)"
  assert "\n    new = donating_all(v._value, *args)\n" in "".join(
      traceback.format_exception(info.value))
  assert linecache.getline(frame.filename, frame.lineno).strip() == frame.line
  assert step.call_source().splitlines()[frame.lineno - 1].strip() == frame.line
  np.testing.assert_allclose(v.value, 6.0)


def test_pdb_steps_through_the_generated_call():
  """pdb stops in the generated call and lists its lines (linecache)."""
  import io
  import pdb
  v = bs.State(jnp.zeros(3), name="v")

  @bs.jit
  def step():
    v.value = v.value + 1.0

  step()
  out = io.StringIO()
  debugger = pdb.Pdb(stdin=io.StringIO("next\nlist\ncontinue\n"), stdout=out,
                     nosigint=True)
  debugger.runcall(step)
  shown = out.getvalue()
  assert ".step)>(3)entry()\n-> try:" in shown
  assert "->\t    mode = thread.mode" in shown
  assert "if mode == 1:" in shown  # listed around the current line
  np.testing.assert_allclose(v.value, 2.0)


def test_call_source_names_each_state_and_keeps_them_apart():
  """Each State is one global named after it: unnamed States ``state``,
  names that are not identifiers made into one, names taken (by another
  State, a keyword, the source's own names, a name the placement derives
  from another) numbered. The call still reads and writes the right ones."""
  names = [None, "v", "v", "window", "new", "class", "1x", "a b", "v_value",
           "_hidden"]
  states = [bs.State(jnp.full(2, float(i)), name=n)
            for i, n in enumerate(names)]

  @bs.jit
  def step(x):
    for i, s in enumerate(states):
      s.value = s.value + x * (i + 1)

  source = step.call_source(1.0)  # before the first call: traced, not run
  for _ in range(3):
    step(1.0)
  entry = step._core.program.entry
  named = {k: v for k, v in entry.__globals__.items()
           if isinstance(v, bs.State)}
  assert sorted(named) == sorted(
      ["state", "v", "v_2", "window_3", "new_4", "state_class",
       "state_1x", "a_b", "v_value_8", "hidden"])
  assert {id(s) for s in named.values()} == {id(s) for s in states}
  assert "v._value, v_2._value, window_3._value" in source
  assert source == step.call_source()
  for i, s in enumerate(states):
    np.testing.assert_allclose(s.value, i + 3.0 * (i + 1))


def test_call_source_of_a_placed_step_names_targets_after_states():
  mesh = make_mesh((4,), ("x",))
  v = bs.State(jnp.arange(8.0), name="v", spec=P("x"))

  def body():
    v.value = v.value * 2.0

  step = bs.jit(bs.shard_map(body, mesh=mesh))
  step()
  source = step.call_source()
  assert "v_value = v._value" in source
  assert "v_value.sharding != v_target" in source
  step()
  np.testing.assert_allclose(v.value, np.arange(8.0) * 4.0)


def test_the_generated_source_leaves_linecache_with_its_program():
  """linecache keeps the source while the entry lives, not after; a
  program made again meanwhile takes a name of its own."""
  import gc
  v = bs.State(jnp.zeros(2), name="v")

  @bs.jit
  def step():
    v.value = v.value + 1.0

  step()
  entry = step._core.program.entry
  first = entry.__code__.co_filename
  assert first.endswith(".step)>") and first in linecache.cache
  step.clear_cache()
  step()
  second = step._core.program.entry.__code__.co_filename
  assert second == first[:-1] + " #2>"
  del entry
  gc.collect()
  assert first not in linecache.cache and second in linecache.cache
  assert linecache.getline(second, 1) == "def entry():\n"
