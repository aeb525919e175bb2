"""This thread's frame stack, and who may touch the States' global slots
without a lock.

Each thread keeps its own stack of brainshard frames (``thread_frames``):
while a transform traces, ``state.value`` goes to the innermost frame, so
two threads can trace functions over the same States at once. At top level
a call reads the slots, may donate a buffer only the State holds, and writes
its results back; ``SLOT_LOCK`` keeps other threads from taking a reference
in between, unless one thread alone uses States (``WINDOW``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, Iterator

__all__ = [
    "SLOT_LOCK", "WINDOW", "FRAME_ACTIVE", "OWNER", "OTHER", "GIL_ENABLED",
    "thread_frames", "frame_stack", "current_frame", "outside_frames",
    "acquire_slots", "release_slots", "slots_locked", "hold_slots",
    "let_go_slots",
]


# Held by a top-level brainshard call from reading the states' slots until
# its results are written back, and by top-level `.value` reads. A call may
# donate a state's buffer once its reference count shows that only the State
# holds it; without the lock another thread could take a reference between
# that check and the dispatch, and find the array deleted.
SLOT_LOCK = threading.RLock()
_acquire_lock, release_slots = SLOT_LOCK.acquire, SLOT_LOCK.release


# While only one thread touches the slots, that thread (the owner: the first
# to use brainshard, normally the main thread) needs no lock. Measured on a
# small dispatch, the lock's acquire and release cost half a microsecond, a
# tenth of the call; the owner instead marks `WINDOW.busy` around its slot
# accesses and checks `WINDOW.lockfree`. Any other thread that touches a slot
# first clears `lockfree` (for good: from then on every thread takes the
# lock) and waits until the owner is not busy (Dekker's handshake: each side
# writes its flag, then reads the other's). Free-threaded Python has no GIL to
# order those flags: there every thread takes the lock from the start.
GIL_ENABLED = getattr(sys, "_is_gil_enabled", lambda: True)()


class _Window:
  __slots__ = ("busy", "lockfree", "held")

  def __init__(self):
    self.busy = 0  # a count: a call can nest in another (a host callback)
    self.lockfree = GIL_ENABLED
    self.held = None  # the program whose results are not written back (held.py)


WINDOW = _Window()
_owner_claimed = [False]
_claim_lock = threading.Lock()

# thread_frames.mode: what a top-level call on this thread may do.
FRAME_ACTIVE, OWNER, OTHER = 0, 1, 2


def _claim_owner() -> bool:
  with _claim_lock:
    first = not _owner_claimed[0]
    _owner_claimed[0] = True
  return first


def acquire_slots() -> None:
  """Takes ``SLOT_LOCK``; on a thread that is not the owner, first ends the
  owner's lock-free mode and waits until its slot accesses finish."""
  if not thread_frames.owner:
    # Every other thread waits, not only the first: a call the owner began
    # before the switch may still be running when a third thread arrives.
    WINDOW.lockfree = False
    pause = 1e-5
    while WINDOW.busy:  # the owner is between a slot read and its write-back
      time.sleep(pause)  # (it releases the GIL in JAX's dispatch)
      pause = min(2 * pause, 1e-3)
  _acquire_lock()


def hold_slots() -> bool:
  """Holds the slots as a top-level call does: the owner's window while it
  is lock-free, else ``SLOT_LOCK``. Returns what ``let_go_slots`` undoes."""
  if thread_frames.owner:
    WINDOW.busy += 1
    if WINDOW.lockfree:
      return False
    WINDOW.busy -= 1
  acquire_slots()
  return True


def let_go_slots(locked: bool) -> None:
  if locked:
    release_slots()
  else:
    WINDOW.busy -= 1


@contextlib.contextmanager
def slots_locked() -> Iterator[None]:
  """``with slots_locked():`` holds the slots (see hold_slots)."""
  locked = hold_slots()
  try:
    yield
  finally:
    let_go_slots(locked)


class _ThreadFrames(threading.local):
  def __init__(self):
    self.stack: list = []  # of frames.Frame, which imports this module
    self.owner = _claim_owner()
    # FRAME_ACTIVE while a frame is on the stack, else OWNER or OTHER: one
    # attribute load tells a call both (Frame.__enter__/__exit__ keep it).
    self.mode = self.idle_mode = OWNER if self.owner else OTHER


# ``thread_frames.stack`` is this thread's frame stack, innermost last: the
# attribute itself, for the call paths that test it on every call (one
# attribute load; frame_stack() below is the same list behind a call).
thread_frames = _ThreadFrames()


def frame_stack() -> list:
  """This thread's active frames, innermost last."""
  return thread_frames.stack


@contextlib.contextmanager
def outside_frames() -> Iterator[None]:
  """This thread's frame stack set aside: code inside runs as at top level
  (where JAX's trace allows)."""
  frames = thread_frames
  stack = frames.stack
  saved, mode = stack[:], frames.mode
  del stack[:]
  frames.mode = frames.idle_mode
  try:
    yield
  finally:
    stack[:] = saved
    frames.mode = mode


def current_frame() -> Any:
  stack = thread_frames.stack
  return stack[-1] if stack else None
