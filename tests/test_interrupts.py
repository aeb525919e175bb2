"""Ctrl-C during a loop of calls loses nothing (_core/interrupts.py).

Each test sends real SIGINTs to this process from a timer thread while the
main thread loops. Python raises the ``KeyboardInterrupt`` at its first check
after a C call returns; without brainshard's handler that was, most of the
time, the check right after the compiled program's dispatch: the new values
were dropped after the old buffers had been donated (25-28 of 30 loops lost
every State). Every test catches its own interrupts.
"""

import _thread
import gc
import os
import signal
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brainshard as bs
from brainshard._core import interrupts
from brainshard._core.program import fastcall
from brainshard._core.state import state as state_module
from brainshard._core.threads import SLOT_LOCK, WINDOW

TRIALS = 12


@pytest.fixture(autouse=True)
def brainshard_handles_sigint():
  """Python's default handler, then brainshard's, as a fresh program sees
  them; put back after the test."""
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  interrupts.protect()
  assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
  yield
  signal.signal(signal.SIGINT, before)


def _press_ctrl_c(after: float) -> threading.Timer:
  """A timer that sends SIGINT; start it where its interrupt is caught (on
  a loaded machine it can fire before ``start()`` returns)."""
  return threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT))


def _loop_until_interrupted(call, trial: int) -> int:
  """Calls ``call()`` until a SIGINT sent 2-8 ms in stops it; returns how
  many calls returned. An interrupt that is lost fails the test (after a
  minute) instead of looping forever."""
  done = 0
  timer = _press_ctrl_c(0.002 + 0.001 * (trial % 7))
  deadline = time.monotonic() + 60.0
  try:
    timer.start()
    while time.monotonic() < deadline:
      call()
      done += 1
    pytest.fail(f"the SIGINT of trial {trial} was lost: {done} calls ran on")
  except KeyboardInterrupt:
    pass
  timer.join()
  return done


def _counting_states(n: int):
  states = [bs.State(jnp.zeros(4), name=f"s{i}") for i in range(n)]

  def step():
    for s in states:
      s.value = s.value + 1.0
  return states, step


def _assert_counted(states, steps: int) -> int:
  """Every State is whole and counted the same calls: those that returned,
  or one more (the call the interrupt landed in, written back in full)."""
  values = [np.asarray(s.value) for s in states]  # raises if donated and lost
  first = float(values[0][0])
  for s, v in zip(states, values):
    np.testing.assert_array_equal(v, first, err_msg=s.name)
  assert first in (steps, steps + 1), (first, steps)
  return int(first)


@pytest.mark.parametrize("n", [1, 10, 200])  # 200: the packed call
def test_interrupted_jit_loop_loses_no_state(n):
  states, step = _counting_states(n)
  step = bs.jit(step)
  step()
  steps = 1
  for trial in range(TRIALS):
    steps = _assert_counted(states, steps + _loop_until_interrupted(step, trial))
  assert WINDOW.busy == 0 and not SLOT_LOCK._is_owned()


def test_interrupted_generic_call_loses_no_state(monkeypatch):
  """The program's generic path (here: every program, as past MAX_STATES)
  writes back in Python after the dispatch too."""
  monkeypatch.setattr(fastcall, "MAX_STATES", 0)
  states, step = _counting_states(3)
  step = bs.jit(step)
  step()
  steps = 1
  for trial in range(TRIALS):
    steps = _assert_counted(states, steps + _loop_until_interrupted(step, trial))


def test_interrupted_call_under_the_lock_loses_no_state():
  """Once another thread has used States, the owner takes SLOT_LOCK too."""
  states, step = _counting_states(4)
  step = bs.jit(step)
  step()
  WINDOW.lockfree = False  # as after another thread's first slot access
  steps = 1
  for trial in range(TRIALS):
    steps = _assert_counted(states, steps + _loop_until_interrupted(step, trial))
  assert not SLOT_LOCK._is_owned()


class _Press(int):
  # `_Press(SIGINT).now` presses Ctrl-C without Python handling it in the
  # same line: a getter, not a call (see interrupts._Signal).
  now = property(_thread.interrupt_main)


def test_an_interrupt_inside_a_read_leaves_the_window_closed(monkeypatch):
  """A ``state.value`` read marks a freshly written value with a call
  (``next_lend``), inside the owner's window. An interrupt there used to
  leave the window busy, so that any other thread touching a State then
  waited for ever."""
  s = bs.State(jnp.zeros(4), name="s")
  step = bs.jit(lambda: setattr(s, "value", s.value + 1.0))
  step()
  step()  # the generated call: its write-back leaves the value unmarked
  pressed = []

  def ctrl_c_on(n):
    pressed.append(n)
    _Press(signal.SIGINT).now  # noqa: B018 - handled after the C call below
    return n
  # The clock's own counter, as a C call (Python checks for signals where a
  # C call returns; a Python function would return to the read unchecked).
  counter = state_module.next_lend.__self__
  monkeypatch.setattr(state_module, "next_lend",
                      map(ctrl_c_on, counter).__next__)
  with pytest.raises(KeyboardInterrupt):  # raised at the next check past
    np.asarray(s.value)  # the window: here, where this call returns
  monkeypatch.undo()
  assert pressed and WINDOW.busy == 0
  got = []
  reader = threading.Thread(target=lambda: got.append(s.value))
  reader.start()
  reader.join(30)
  assert not reader.is_alive()
  np.testing.assert_array_equal(got[0], 2.0)


def test_an_interrupt_in_a_traced_body_is_raised_at_once():
  """Nothing is donated while the function is traced: Ctrl-C there stops
  the trace at once, and the States keep their values."""
  v = bs.State(jnp.ones(3), name="v")

  @bs.jit
  def slow_to_trace():
    time.sleep(2.0)  # the user's Python, run while tracing
    v.value = v.value * 2.0

  timer = _press_ctrl_c(0.05)
  start = time.perf_counter()
  with pytest.raises(KeyboardInterrupt):
    timer.start()
    slow_to_trace()
  assert time.perf_counter() - start < 1.5
  timer.join()
  assert WINDOW.busy == 0 and not SLOT_LOCK._is_owned()
  np.testing.assert_array_equal(v.value, 1.0)


def test_outside_brainshard_sigint_raises_as_python_does():
  timer = _press_ctrl_c(0.01)
  start = time.perf_counter()
  with pytest.raises(KeyboardInterrupt):
    timer.start()
    time.sleep(2.0)
  assert time.perf_counter() - start < 1.5
  timer.join()


def test_an_interrupt_in_a_gc_callback_is_not_dropped():
  """Python prints an exception raised in a gc callback (JAX runs one after
  every collection) as "ignored" and goes on: a Ctrl-C there was lost, and
  a loop of calls ran on. It is raised once the collection is over."""
  def press_during(phase, info):
    if phase == "start":
      signal.raise_signal(signal.SIGINT)  # handled inside this callback
      for _ in range(100):  # ... at its next check
        pass

  gc.callbacks.append(press_during)
  try:
    with pytest.raises(KeyboardInterrupt):
      gc.collect()
      for _ in range(10_000):  # the re-delivered one lands here
        pass
  finally:
    gc.callbacks.remove(press_during)


def test_a_handler_of_the_users_own_is_left_alone():
  pressed = []

  def mine(signum, frame):
    pressed.append(signum)
  signal.signal(signal.SIGINT, mine)
  bs.jit(lambda x: x + 1)(jnp.ones(2))  # builds a program: protect() runs
  assert signal.getsignal(signal.SIGINT) is mine
  os.kill(os.getpid(), signal.SIGINT)
  deadline = time.monotonic() + 5
  while not pressed and time.monotonic() < deadline:
    time.sleep(0.001)
  assert pressed == [signal.SIGINT]


def test_off_the_main_thread_protect_changes_nothing():
  signal.signal(signal.SIGINT, signal.default_int_handler)
  worker = threading.Thread(target=interrupts.protect)
  worker.start()
  worker.join(30)
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_program_built_on_the_main_thread_installs_the_handler():
  signal.signal(signal.SIGINT, signal.default_int_handler)
  bs.jit(lambda x: x * 2)(jnp.ones(2))
  assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
  jax.effects_barrier()


def test_in_ipython_each_cell_gets_the_handler_back():
  """ipykernel puts Python's default handler back before each cell; the
  ``pre_run_cell`` hook puts brainshard's back for the cell."""
  shell_module = pytest.importorskip("IPython.core.interactiveshell")
  shell = shell_module.InteractiveShell.instance()
  try:
    interrupts.protect()  # now that IPython runs: the hook
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as ipykernel
    shell.run_cell("import signal; seen = signal.getsignal(signal.SIGINT)",
                   store_history=False)
    assert shell.user_ns["seen"] is interrupts.on_sigint
  finally:
    shell.events.unregister("pre_run_cell", interrupts._before_cell)
    interrupts._ipython_hooked[0] = False
    shell_module.InteractiveShell.clear_instance()


def test_making_a_state_installs_the_handler_once(monkeypatch):
  """Reads and writes hold the owner's window too: covered before any
  program is built, from the first State on."""
  monkeypatch.setattr(interrupts, "_once", [False])
  signal.signal(signal.SIGINT, signal.default_int_handler)
  bs.State(jnp.zeros(2))
  assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
  signal.signal(signal.SIGINT, signal.default_int_handler)
  bs.State(jnp.zeros(2))  # once only: a handler put back later stays
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
