"""A program's top-level call, written out as Python for its States.

For a program with a few states, the generic call path's list building,
``map``/``zip`` iteration and star-argument packing cost more than the rest
of brainshard's work per call (measured: about 3 us of a 10 us dispatch on a
2-core machine). Knowing the states up front, a program can instead run a
straight-line function: read each state's slot as an argument, count the
references of the candidates whose value may be shared (donation.py), call
the jitted program with the values as positional arguments, unpack the
results straight into the slots. This is how ``dataclasses`` and ``attrs``
make their ``__init__``: generate the code once, run it many times.

The source is one template, :data:`ENTRY`, and a few fragments below it,
filled per program by :func:`make_entry`; each names what it reads (``window``,
``lends``, ``donating_all``) and each State by its own name. It is
registered in :mod:`linecache` under ``<generated call bs.jit(step)>`` in
this folder, so a traceback shows its lines and pdb steps through it, and
``bs.jit(step).call_source()`` returns it.

The generated function falls back to the program's generic path for anything
unusual: a frame on the stack or a foreign JAX trace (nested calls), or
inputs that need placing. A reference the user keeps to a state's value (the
notebook pattern ``v_now = v.value`` after each step) stays on the fast path:
it only selects the compiled variant that does not donate that state.

Example:
  >>> import linecache
  >>> import brainshard as bs, jax.numpy as jnp
  >>> v = bs.State(jnp.zeros(2), name="v")
  >>> @bs.jit
  ... def step():
  ...   v.value = v.value + 1.0
  >>> step()
  >>> code = type(step).__call__.__code__  # calling step calls the entry
  >>> linecache.getline(code.co_filename, 1)
  'def entry():\\n'
  >>> "donating_all(v._value)" in step.call_source()
  True
"""

from __future__ import annotations

import functools
import inspect
import keyword
import os
import re
import sys
from typing import Any, Callable

from brainshard._core import compat
from brainshard._core.program import donation, held, placement_source
from brainshard._core.program.generated import compiled, fill
from brainshard._core.args import fun_name
from brainshard._core.errors import Rediscover
from brainshard._core.threads import (
    OWNER, WINDOW, acquire_slots, release_slots, thread_frames)

__all__ = ["MAX_STATES", "CLOCK_FROM", "SOURCE_PRIVATE_NAMES", "make_entry"]

# Beyond this many states, the generic path. At N = 1000 the generated call
# costs about 45 ns per state against the generic path's 115 (JAX's own cost
# is 1.6 us per array), but compiling its source takes 60-90 ms, once, and
# grows faster than N (0.5 s at 4096).
MAX_STATES = 1024

# From this many written states, the clock of lends (donation.LENDS) stands
# in for each State's mark test and reset; below it, those cost less than
# reading and noting the clock (measured: one State, 0.1 us more with it).
CLOCK_FROM = 4

# The private names the templates below use: State's slot and its mark
# (donation.py), read and reset per call. Both are State's declared surface
# inside _core; tests/test_architecture.py checks this tuple against the
# templates' text.
SOURCE_PRIVATE_NAMES = ("_value", "_sig")

_HERE = os.path.dirname(os.path.abspath(__file__))

# -- the templates ------------------------------------------------------------
# ``{name}`` alone on a line takes a block of lines (indented as the line;
# an empty block drops the line), anywhere else one string (generated.fill).
# Each global the source reads is one of _namespace's, or a State by its
# name.
#
# The slots are read and written back inside the owner's window or under
# SLOT_LOCK (threads.py: WINDOW). The window is two attribute stores; the
# lock's acquire and release cost a tenth of a small dispatch. The owner's
# window saves the count and sets it, and restores it after (calls nest: a
# host callback's call) instead of adding and taking one: five bytecodes
# fewer. Both in a try/finally, not ``with`` (a special-method lookup and a
# three-argument ``__exit__``, measured at twice the cost of the calls).
ENTRY = """\
def entry({params}):
  # {name}'s call, generated for its States (_core/program/fastcall.py)
  try:
    mode = thread.mode
    if not mode or not ({at_top_level}):  # a frame, or a foreign trace
      return generic_call({passed})
    if mode == {owner}:  # the owner thread: its lock-free window
      busy = window.busy
      window.busy = 1
      if not window.lockfree:  # another thread ended lock-free mode
        window.busy = busy
        busy = None  # (SLOT_LOCK held instead)
        acquire_slots()
      {usual_call}
    else:
      busy = None
      acquire_slots()
    try:
      {general_call}
    finally:
      if busy is None:
        release_slots()
      else:
        window.busy = busy
  except Rediscover as err:  # a trace found new States: grow, call again
    return retry(err, {passed})
"""

# Beyond MAX_STATES: the generic path alone.
GENERIC_ENTRY = """\
def entry({params}):
  # {name}: its call (too many States to write out)
  try:
    return generic_call({passed})
  except Rediscover as err:
    return retry(err, {passed})
"""

# The owner's call in the usual case, written out alone: nothing lent since
# this program's last write-back (no candidate to test, no kept variant), no
# other program's results held. It skips the general path's locals and
# branches: ~50 ns a call, 0.2% of a ten-State dispatch's machine
# instructions and 0.7% of a one-State one's (ANALYSIS.md, eleventh pass).
# Anything else falls through to the general path, inside the same window.
USUAL_CALL = """\
elif {usual}:  # the usual call: nothing lent or held
  try:
    {call}
    if new.__class__ is list:  # the step returned None: its written values
      {write_back}
      return None
    out, new = new
    {write_back}
    return out
  finally:
    window.busy = busy
"""

# Any other call: a State lent since the last write-back (its references
# counted: donation.py), results held (held.py), inputs placed (placement.py).
GENERAL_CALL = """\
jitted = donating_all
{held_call}
{read_values}
{donation_tests}
{placement_checks}
{call}
if new.__class__ is list:  # the step returned None: its written values
  out = None
else:
  out, new = new
{write_back}
return out
"""

# The jitted program's call: a TypeError is the State's own error where a
# State's value is what JAX refused (program.on_type_error), else JAX's.
CALL = """\
try:
  {jitted_call}
except TypeError:
  on_type_error()
  raise
"""

# The star-arguments only where there are some: building an empty argument
# tuple and passing an empty dict cost ~3% of a one-State dispatch.
CALL_WITH_ARGS = """\
if kwargs:
  new = {jitted}({states}*args, **kwargs)
elif args:
  new = {jitted}({states}*args)
else:
  new = {jitted}({states_alone})
"""

# A program reading and writing the same many States, donating them all
# (held.py): while its results are still held, they go straight back in, no
# slot read or written.
HELD_CALL = """\
holder = window.held
if holder is results:  # our results, still held
  {call}
  if new.__class__ is list:
    out = None
  else:
    out, new = new
  {hold}
if holder is not None:  # another program's results into the slots first
  flush_held()
"""

# Before the slots are read: another program's results into them.
FLUSH_HELD = """\
if window.held is not None:
  flush_held()
"""

# The general path of a holding program: its results kept if all were
# donated (no reference kept).
KEEP_IF_ALL_DONATED = """\
if jitted is donating_all:
  {hold}
"""

# The results kept (held.py). Whoever holds now writes back first: another
# program (a host callback's call), or none where a trace during this call
# read a State and so wrote this program's values back (the arrays just
# donated): the new ones are then held again.
HOLD = """\
if window.held is not results:
  flush_held()
  window.held = results
results.values = new
return out
"""

# Which candidates to keep (not donate), tested only where the clock moved
# since the last write-back (donation.LENDS): after one lend, that State
# alone (the notebook's read after each step), else each one.
LENT_TESTS = """\
lends_before = lends.now
lent_one = None
if lends_before is not noted[0]:
  if lends_before - 1 == noted[0]:  # one lend (never true before a note)
    lent_one = lends.last
    lent = candidate_at.get(lent_one)
    if lent is not None and {lent_shared}:
      jitted = variants.get(lent[1]) or variant_keeping(lent[1])
  else:
    {sole_tests}
"""

# Counts the references of the candidates whose value may be referenced
# elsewhere (``state._sig`` is not None: see donation.py), usually none, or
# the one a notebook reads after each step. A kept reference selects the
# variant that leaves that State's buffer alone, looked up by the kept
# indices. Inline, not a helper: right after a dispatch a Python call costs
# several times what it costs in a loop (measured: a 10-line helper, 1.1 us).
SOLE_TESTS = """\
if not ({unmarked}):
  kept = ()
  {kept_tests}
  if kept:
    jitted = variants.get(kept) or variant_keeping(kept)
"""

# This call's own outputs: nothing else refers to them (donation.py), and
# their signature is computed when asked for, so their marks are reset
# (None). With the clock, only where a State was lent since the last
# write-back or during this call (a trace caches the old value's signature
# there); without it every mark is reset.
RESET_IF_LENT = """\
if lends.now is not noted[0]:
  {marks} = None
  noted[0] = lends.now
"""

# The same after LENT_TESTS: after one lend before this call and none
# during it, only that State's mark.
RESET_AFTER_TESTS = """\
lends_after = lends.now
if lends_after is not noted[0]:
  if lent_one is not None and lends_after is lends_before:
    written = written_at.get(lent_one)
    if written is not None:
      written._sig = None
  else:
    {marks} = None
  noted[0] = lends_after
"""

TEMPLATES = (ENTRY, GENERIC_ENTRY, USUAL_CALL, GENERAL_CALL, CALL,
             CALL_WITH_ARGS, HELD_CALL, FLUSH_HELD, KEEP_IF_ALL_DONATED, HOLD,
             LENT_TESTS, SOLE_TESTS,
             RESET_IF_LENT, RESET_AFTER_TESTS, *placement_source.TEMPLATES)
# Names a State's global may not take: the templates' own.
_TAKEN = frozenset(re.findall(r"[A-Za-z_]\w*", re.sub(
    r"#.*", "", "".join(TEMPLATES))))


def make_entry(program: Any) -> Callable:
  """``entry(*args, **kwargs)``: a call of ``program``, specialised to its
  states when they are few (else a thin wrapper of ``program.call``).

  The generated code is the top-level case of ``Program.call`` written out
  for these states; anything else (a frame on the stack, a foreign trace,
  inputs that are not placed right) calls ``program.call``. A trace that
  finds new states raises ``Rediscover``, which re-plans (``owner.retry``)
  and calls again.
  """
  ns = _namespace(program)
  generic = max(len(program.reads), len(program.writes)) > MAX_STATES
  takes_args = generic or not _takes_nothing(program.owner.fun)
  # A step without parameters (a simulation step) gets an entry without
  # them: no argument tuple and keyword dict per call (measured at ~3% of a
  # one-state dispatch), and a call with arguments fails as calling the
  # function itself would ("step() takes 0 positional arguments ...").
  head = dict(name=program.owner.name, passed=_passed(takes_args),
              params="*args, **kwargs" if takes_args else "")
  source = (fill(GENERIC_ENTRY, **head) if generic else
            fill(ENTRY, **head, **_Parts(program, ns, takes_args).entry()))
  # Named inside the package: filtered tracebacks leave it out too.
  entry = compiled(source, os.path.join(
      _HERE, f"<generated call {program.owner.name}>"), ns, "entry")
  if not takes_args:  # Python's own error for a call with arguments names it
    entry.__name__ = entry.__qualname__ = fun_name(program.owner.fun)
  return entry


def _namespace(program: Any) -> dict[str, Any]:
  """The generated source's globals, but the States (_Parts names those)."""
  variants: dict[tuple[int, ...], Any] = {}
  return dict(
      thread=thread_frames, getrefcount=sys.getrefcount,
      ArrayImpl=compat.ArrayImpl, donating_all=program.j_all,
      variants=variants,  # a kept reference's variant, by the kept indices
      variant_keeping=functools.partial(_kept_variant, program, variants),
      sole_tree=donation.sole_tree, generic_call=program.call,
      on_type_error=program.on_type_error, retry=program.owner.retry,
      Rediscover=Rediscover, acquire_slots=acquire_slots,
      release_slots=release_slots, window=WINDOW, lends=donation.LENDS,
      noted=[None],  # the clock of lends after the last write-back
      flush_held=held.flush,
      list=list,  # a global, as the other names (not a builtins lookup)
      __name__=__name__)  # brainshard's code to interrupts.py's handler


class _Parts:
  """What fills the templates for one program: its States' names and the
  values, calls and write-backs written with them."""

  def __init__(self, program: Any, ns: dict, takes_args: bool):
    self.program, self.ns, self.takes_args = program, ns, takes_args
    self.top, names = compat.top_level_source()  # inlined: no call
    ns.update(names)
    self.names = _state_names(program.reads + program.writes, ns)
    # Each slot is read straight into the call's arguments: a local per
    # State costs ~5 ns more (two instructions). The placement checks need
    # locals; a count then sees the local too (donation.SOLE_LOCAL, else
    # SOLE_ATTR).
    self.direct = program.place is None
    self.sole = donation.SOLE_ATTR if self.direct else donation.SOLE_LOCAL
    value = "{}._value" if self.direct else "{}_value"
    self.cand = [value.format(self.name(s)) for s in program.cand]
    self.rest = [value.format(self.name(s)) for s in program.rest]
    # Many candidates travel as one list (program.PACK_FROM); a kept
    # reference's variant then unpacks it (_kept_variant). The other States
    # as one list, where there are some (Program.has_rest).
    self.rest_arg = [f"[{', '.join(self.rest)}]"] if program.has_rest else []
    self.states = ([f"[{', '.join(self.cand)}]"] if program.packed
                   else self.cand) + self.rest_arg
    self.counts = program.check_refs and bool(self.cand)
    self.clock = len(program.writes) >= CLOCK_FROM
    # Many States read and written, all donated as one list: the program
    # holds its results (held.py). (Fewer gain nothing in the loop:
    # ANALYSIS.md, eighth to tenth passes.)
    self.holds = (self.direct and program.packed and program.donates_all
                  and program.cand == program.writes)

  def name(self, state: Any) -> str:
    return self.names[id(state)]

  def entry(self) -> dict[str, Any]:
    """ENTRY's parts."""
    usual = self.direct and not self.holds
    return dict(at_top_level=self.top, owner=OWNER,
                usual_call=self.usual_call() if usual else "",
                general_call=self.general_call())

  def usual_call(self) -> str:
    usual = ["window.held is None"]
    if self.counts:  # nothing lent: every candidate's value is its own
      usual.insert(0, "lends.now is noted[0]" if self.clock else " and ".join(
          f"{self.name(s)}._sig is None" for s in self.program.cand))
    return fill(USUAL_CALL, usual=" and ".join(usual),
                call=self.call(self.states, "donating_all"),
                write_back=self.write_back(self.reset_marks()))

  def general_call(self) -> str:
    program, ns = self.program, self.ns
    if self.holds:
      ns["results"] = held.Held(program.writes, ns["noted"], program)
      held_call = fill(HELD_CALL, call=self.call(
          ["results.values"] + self.rest_arg), hold=HOLD)
    else:
      held_call = FLUSH_HELD
    read = [] if self.direct else [
        f"{self.name(s)}_value = {self.name(s)}._value" for s in program.reads]
    fast = program.place_targets(program) if not self.direct else None
    checks = "" if fast is None else placement_source.placement_checks(
        fast, ns, [self.name(s) for s in program.reads], _passed(
            self.takes_args), self.takes_args)
    if self.direct or fast is not None:
      call = self.call(self.states)
    else:  # placed by the program's own place(), then called
      call = fill(CALL, jitted_call=placement_source.place_and_call(
          ns, program, self.cand, self.rest, _passed(self.takes_args)))
    hold = fill(KEEP_IF_ALL_DONATED, hold=HOLD) if self.holds else ""
    return fill(GENERAL_CALL, held_call=held_call, read_values=read,
                donation_tests=self.donation_tests(), placement_checks=checks,
                call=call, write_back=self.write_back(
                    self.reset_after_tests() if self.clock and self.counts
                    else self.reset_marks(), hold))

  def call(self, states: list[str], jitted: str = "jitted") -> str:
    """CALL, with the star-arguments where the entry takes them."""
    if not self.takes_args:
      return fill(CALL, jitted_call=f"new = {jitted}({', '.join(states)})")
    return fill(CALL, jitted_call=fill(
        CALL_WITH_ARGS, jitted=jitted, states_alone=", ".join(states),
        states="".join(f"{s}, " for s in states)))

  def write_back(self, reset: str, hold: str = "") -> str:
    """The results into the written States' slots (after ``hold``, which
    may keep them instead), and their marks reset."""
    if not self.program.writes:
      return ""
    slots = ", ".join(f"{self.name(s)}._value" for s in self.program.writes)
    return "\n".join(filter(None, [hold, f"{slots}, = new", reset]))

  def marks(self) -> str:
    return " = ".join(f"{self.name(s)}._sig" for s in self.program.writes)

  def reset_marks(self) -> str:
    if not self.clock:
      return f"{self.marks()} = None"
    return fill(RESET_IF_LENT, marks=self.marks())

  def reset_after_tests(self) -> str:
    self.ns["written_at"] = {s._order: s for s in self.program.writes}
    return fill(RESET_AFTER_TESTS, marks=self.marks())

  def donation_tests(self) -> str:
    if not self.counts:
      return ""
    if not self.clock:
      return self.sole_tests()
    self.ns["candidate_at"] = {
        s._order: (s, (i,)) for i, s in enumerate(self.program.cand)}
    return fill(LENT_TESTS, lent_shared=self.shared("lent[0]._value"),
                sole_tests=self.sole_tests())

  def sole_tests(self) -> str:
    cand = self.program.cand
    return fill(
        SOLE_TESTS, unmarked=" and ".join(
            f"{self.name(s)}._sig is None" for s in cand),
        kept_tests=[f"if {self.name(s)}._sig is not None and "
                    f"{self.shared(value)}: kept += ({i},)"
                    for i, (s, value) in enumerate(zip(cand, self.cand))])

  def shared(self, value: str) -> str:
    """The donation rule's test, as source: may ``value`` be referenced
    elsewhere? Its count when only the State holds it is a literal: a
    constant load, not a global one."""
    return (f"not (getrefcount({value}) == {self.sole} and (type({value}) is "
            f"ArrayImpl or sole_tree({value})))")


def _state_names(states: tuple, ns: dict) -> dict[int, str]:
  """``{id(state): name}``: each State's global in the generated source, put
  in ``ns``. Its own name where that is an identifier (``v``), else
  ``state``; with its number where taken, so that it and the locals named
  after it (placement_source.DERIVED) are the source's alone."""
  names: dict[int, str] = {}
  taken = set(_TAKEN) | set(ns)
  for i, state in enumerate(states):
    if id(state) in names:
      continue
    base = re.sub(r"\W", "_", str(state.name or "")).lstrip("_")[:32]
    if not base or base[0].isdigit() or keyword.iskeyword(base):
      base = f"state_{base}" if base else "state"
    name, k = base, i
    while taken & {d.format(name) for d in placement_source.DERIVED}:
      name, k = f"{base}_{k}", k + 1
    taken.update(d.format(name) for d in placement_source.DERIVED)
    names[id(state)] = name
    ns[name] = state
  return names


def _passed(takes_args: bool) -> str:
  """What the generated code passes on as ``(args, kwargs)``."""
  return "args, kwargs" if takes_args else "(), {}"


def _takes_nothing(fun: Callable) -> bool:
  """Whether ``fun`` has no parameters at all (so no call passes any)."""
  try:
    return not inspect.signature(fun).parameters
  except (TypeError, ValueError):  # no signature to read: assume some
    return False


def _kept_variant(program: Any, cache: dict, kept: tuple[int, ...]) -> Any:
  """The jitted program donating every candidate but those at ``kept``,
  called as the generated call calls ``donating_all``."""
  kept_ids = set(kept)
  mask = tuple(i not in kept_ids for i in range(len(program.cand)))
  j, packed = program.variant(mask)
  if program.packed and not packed:  # the list in, one argument each
    jitted = j

    def j(cand_vals, *args, **kwargs):
      return jitted(*cand_vals, *args, **kwargs)
  cache[kept] = j
  return j
