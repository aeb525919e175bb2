"""Ctrl-C never lands between a donation and its write-back.

A top-level call reads the States' slots, donates their buffers to the
compiled program, and writes the new values back. Python raises
``KeyboardInterrupt`` at the first check after a C call returns: after the
program's dispatch, that check comes before the write-back, so the new values
were dropped with the old buffers already donated (measured before this
module: 25-28 of 30 interrupted ``bs.jit`` loops left every State holding a
deleted array). The same check inside a ``state.value`` read could leave the
owner's window (threads.py) marked busy, and any other thread then waited
for it forever.

So while this thread holds the slots (the owner's window or ``SLOT_LOCK``)
and the interrupted code is brainshard's, SIGINT is delivered again at the
next check: once the slots are let go (microseconds later), the usual
``KeyboardInterrupt`` is raised, with every State written.

Python drops an exception raised where nothing can catch it (a garbage
collector callback, which JAX runs after every collection, a weakref
callback, a ``__del__``): it hands it to ``sys.unraisablehook``, prints
"Exception ignored" and goes on, so a Ctrl-C that landed there was lost
and a loop of calls ran on. A hook put in front of the one in place (all
else is passed on to it) delivers such a ``KeyboardInterrupt`` again. An interrupt that
lands in JAX's or the user's code (a first call's trace or compile, a
function being traced) is raised at once, before anything is donated.

Only Python's default handler is replaced (on the main thread, where Python
runs signal handlers): a handler of the user's own, or a run's stop button
(``_simulation/runner/progress.py``), stays as it is. IPython resets the
default handler around each cell; a hook puts this one back for the cell.

Example:
  >>> import signal
  >>> from brainshard._core import interrupts
  >>> before = signal.signal(signal.SIGINT, signal.default_int_handler)
  >>> interrupts.protect()  # (as building a program does)
  >>> signal.getsignal(signal.SIGINT) is interrupts.on_sigint
  True
  >>> _ = signal.signal(signal.SIGINT, before)
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from typing import Any

from brainshard._core.threads import SLOT_LOCK, WINDOW, thread_frames

__all__ = ["protect", "protect_once", "on_sigint"]

_OWN_CODE = "brainshard."  # the modules whose frames a handler may defer in
_ipython_hooked = [False]
_once = [False]


def _holding_slots() -> bool:
  """Whether this thread holds the slots (threads.py): the owner's window
  (only the owner marks it busy) or ``SLOT_LOCK``."""
  return bool(thread_frames.owner and WINDOW.busy) or SLOT_LOCK._is_owned()


class _Signal(int):
  # `sig.again` delivers the signal again. An attribute, not a call: Python
  # checks for pending signals after each call, which would run the handler
  # again inside itself, and again; a property's getter runs without that
  # check, so the signal waits for the interrupted code's next one.
  again = property(_thread.interrupt_main)


_SIGINT = _Signal(signal.SIGINT)


def on_sigint(signum: int, frame: Any) -> None:
  """SIGINT's handler: Python's own, except that inside brainshard code
  holding the slots it is delivered again at the next check."""
  if (frame is not None and
      frame.f_globals.get("__name__", "").startswith(_OWN_CODE) and
      _holding_slots()):
    _SIGINT.again  # noqa: B018 - a getter with an effect (see _Signal)
    return
  signal.default_int_handler(signum, frame)


def _redeliver_dropped(hook: Any) -> Any:
  """``sys.unraisablehook`` that delivers a dropped ``KeyboardInterrupt``
  again and passes everything else to ``hook``."""
  def unraisable(args: Any) -> None:
    if args.exc_type is KeyboardInterrupt:
      _SIGINT.again  # noqa: B018 - see _Signal: the next check raises it
      return
    hook(args)
  unraisable.brainshard = True
  return unraisable


def protect() -> None:
  """Puts :func:`on_sigint` in place of Python's default SIGINT handler,
  and a ``sys.unraisablehook`` in front of the one in place. Called as each program is built (and the first State is made); does
  nothing off the main thread or where another handler is installed."""
  if threading.current_thread() is not threading.main_thread():
    return
  try:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
      signal.signal(signal.SIGINT, on_sigint)
    if (signal.getsignal(signal.SIGINT) is on_sigint
        and not getattr(sys.unraisablehook, "brainshard", False)):
      sys.unraisablehook = _redeliver_dropped(sys.unraisablehook)
  except ValueError:  # pragma: no cover - an interpreter without signals
    return
  _hook_ipython()


def protect_once() -> None:
  """:func:`protect`, the first time only: called as each State is made,
  so that reads and writes are covered before any program is built."""
  if not _once[0]:
    _once[0] = True
    protect()


def _hook_ipython() -> None:
  """ipykernel puts Python's default handler back before each cell runs;
  IPython's ``pre_run_cell`` event comes after that and puts this one back."""
  if _ipython_hooked[0] or "IPython" not in sys.modules:
    return
  shell = getattr(sys.modules["IPython"], "get_ipython", lambda: None)()
  if shell is None:
    return
  shell.events.register("pre_run_cell", _before_cell)
  _ipython_hooked[0] = True


def _before_cell(*_info: Any) -> None:
  protect()
