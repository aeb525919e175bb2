"""A large program's results, kept between its calls instead of written back.

A top-level call reads every State's slot and writes every result back. At
hundreds of States that is most of brainshard's own cost: right after JAX's
dispatch the State objects are cold, and the reads and writes cost ~100 ns
per State where a loop costs ~20 (benchmarks/ANALYSIS.md, seventh pass).
So a program that reads and writes the same many States, donating all of
them and passing them as one list (``program.PACK_FROM`` or more: the
results then go back in as they came out), keeps its results in a list of
its own (:class:`Held`) and passes that list straight to its next call. Its
States' slots meanwhile hold the donated arrays of the call before.

One program holds at a time (``WINDOW.held``). Anything else that touches a
State first writes the held values back (:func:`flush`): a ``state.value``
read or write, any other program's call, a trace, a copy, a pickle, a
checkpoint, ``repr``; so does the program's collection on the owner's
thread, once nothing calls it. So nobody ever sees a slot that is behind,
and no value can be shared with the held list: donating it again needs no
count.

Example:
  >>> import brainshard as bs, jax.numpy as jnp
  >>> from brainshard._core.program import held, program
  >>> states = [bs.State(jnp.zeros(2)) for _ in range(program.PACK_FROM)]
  >>> @bs.jit
  ... def step():
  ...   for s in states:
  ...     s.value = s.value + 1.0
  >>> step(); step(); step()
  >>> held.WINDOW.held is not None  # the results of the third call
  True
  >>> states[0].value  # written back first
  Array([3., 3.], dtype=float32)
  >>> held.WINDOW.held is None
  True
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

from brainshard._core.program.donation import LENDS
from brainshard._core.threads import (
    WINDOW, hold_slots, let_go_slots, thread_frames)

__all__ = ["Held", "flush", "flush_unheld", "WINDOW"]


class Held:
  """The results a program keeps for its States (``values``, in ``states``
  order) while it is ``WINDOW.held``; ``noted`` is the program's note of the
  clock of lends at its last write-back (fastcall.py)."""
  __slots__ = ("states", "values", "noted")

  def __init__(self, states: Sequence[Any], noted: list, program: Any):
    self.states = tuple(states)
    self.values: Any = None
    self.noted = noted
    # A program dropped while it holds writes back when Python collects it
    # (its call would have): else WINDOW.held would keep its States and
    # their arrays alive until some other State is touched.
    weakref.finalize(program, _written_back_if_held, self).atexit = False

  def write_back(self) -> None:
    """The values into the slots, as the program's own write-back does:
    this program's outputs, referenced by nothing else (unmarked)."""
    values = self.values
    if values is None:  # written back already: a collection ran the
      return            # program's own (see Held) as this one began
    for state, value in zip(self.states, values, strict=True):
      state._value = value
      state._sig = None
    self.noted[0] = LENDS.now  # no lend since: the next call tests nothing


def flush() -> None:
  """Writes the held values back; the caller holds the slots
  (threads.hold_slots, or the owner's window)."""
  held = WINDOW.held
  if held is not None:
    held.write_back()  # (if this failed, the values stay held)
    WINDOW.held = None
    held.values = None


def _written_back_if_held(held: Held) -> None:
  # (A program not holding has nothing to write.) Python collects on
  # whichever thread allocates (in Jupyter, often the kernel's own): there,
  # taking the slots would end the owner's lock-free mode for good, so the
  # values stay held until the next access, as they would without this.
  if WINDOW.held is held and (thread_frames.owner or not WINDOW.lockfree):
    flush_unheld()


def flush_unheld() -> None:
  """:func:`flush` for a caller that does not hold the slots."""
  if WINDOW.held is not None:
    locked = hold_slots()
    try:
      flush()
    finally:
      let_go_slots(locked)
