"""A per-program call function, generated as Python source.

For a program with a few states, the generic call path's list building,
``map``/``zip`` iteration and star-argument packing cost more than the rest
of brainshard's work per call (measured: about 3 us of a 10 us dispatch on a
2-core machine). Knowing the states up front, a program can instead run a
straight-line function: read each state's slot as an argument, count the
references of the candidates whose value may be shared (donation.py), call
the jitted program with the values as positional arguments, unpack the
results straight into the slots. This is
how ``dataclasses`` and ``attrs`` make their ``__init__``: generate the
code once, run it many times.

The generated function falls back to the program's generic path for anything
unusual: a frame on the stack or a foreign JAX trace (nested calls), or
inputs that need placing. A reference the user keeps to a state's value (the
notebook pattern ``v_now = v.value`` after each step) stays on the fast path:
it only selects the compiled variant that does not donate that state.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any, Callable

from brainshard._core import compat
from brainshard._core.program import donation, held, placement_source
from brainshard._core.args import fun_name
from brainshard._core.errors import Rediscover
from brainshard._core.threads import (
    OWNER, WINDOW, acquire_slots, release_slots, thread_frames as _frames)

__all__ = ["MAX_STATES", "CLOCK_FROM", "make_entry"]

# Beyond this many states, the generic path. At N = 1000 the generated call
# costs about 45 ns per state against the generic path's 115 (JAX's own cost
# is 1.6 us per array), but compiling its source takes 60-90 ms, once, and
# grows faster than N (0.5 s at 4096).
MAX_STATES = 1024

# From this many written states, the clock of lends (donation.LENDS) stands
# in for each State's mark test and reset; below it, those cost less than
# reading and noting the clock (measured: one State, 0.1 us more with it).
CLOCK_FROM = 4

_HERE = os.path.dirname(os.path.abspath(__file__))


def make_entry(program: Any) -> Callable:
  """``entry(*args, **kwargs)``: a call of ``program``, specialised to its
  states when they are few (else a thin wrapper of ``program.call``).

  The generated code is the top-level case of ``Program.call`` written out
  for these states; anything else (a frame on the stack, a foreign trace,
  inputs that are not placed right) calls
  ``program.call``. A trace that finds new states raises ``Rediscover``,
  which re-plans (``owner.retry``) and calls again.
  """
  ns: dict[str, Any] = dict(
      _frames=_frames, _rc=sys.getrefcount, _Array=compat.ArrayImpl,
      _jitted=program.j_all, _kept=(kept := {}),
      _keep=functools.partial(_kept_variant, program, kept),
      _sole_tree=donation.sole_tree, _generic=program.call,
      _on_type_error=program.on_type_error, _retry=program.owner.retry,
      _Rediscover=Rediscover, _acquire=acquire_slots,
      _release=release_slots, _w=WINDOW, _L=donation.LENDS,
      _noted=[None],  # the clock after the last write-back
      _flush=held.flush, _list=list,
      __name__=__name__)  # brainshard's code to interrupts.py's handler
  generic = max(len(program.reads), len(program.writes)) > MAX_STATES
  takes_args = generic or not _takes_nothing(program.owner.fun)
  # A step without parameters (a simulation step) gets an entry without
  # them: no argument tuple and keyword dict per call (measured at ~3% of a
  # one-state dispatch), and a call with arguments fails as calling the
  # function itself would ("step() takes 0 positional arguments ...").
  params = "*args, **kwargs" if takes_args else ""
  passed = _passed(takes_args)
  lines = [f"def entry({params}):", "  try:"]
  if generic:
    lines += [f"    return _generic({passed})"]
  else:
    lines += ["    " + line for line in _body(program, ns, takes_args)]
  lines += ["  except _Rediscover as err:",
            f"    return _retry(err, {passed})"]
  # Named inside the package, so filtered tracebacks leave it out too.
  filename = os.path.join(_HERE, f"<generated call {program.owner.name}>")
  code = compile("\n".join(lines), filename, "exec")
  exec(code, ns)
  entry = ns["entry"]
  if not takes_args:  # Python's own error for a call with arguments names it
    entry.__name__ = entry.__qualname__ = fun_name(program.owner.fun)
  return entry


def _passed(takes_args: bool) -> str:
  """What the generated code passes on as ``(args, kwargs)``."""
  return "args, kwargs" if takes_args else "(), {}"


def _takes_nothing(fun: Callable) -> bool:
  """Whether ``fun`` has no parameters at all (so no call passes any)."""
  try:
    return not inspect.signature(fun).parameters
  except (TypeError, ValueError):  # no signature to read: assume some
    return False


def _body(program: Any, ns: dict, takes_args: bool) -> list[str]:
  # Each slot is read straight into the call's arguments: a local per State
  # costs ~5 ns more (two instructions). The placement checks need locals;
  # a count then sees the local too (donation.SOLE_LOCAL, else SOLE_ATTR).
  direct = program.place is None
  cand = [f"C{i}._value" if direct else f"c{i}"
          for i in range(len(program.cand))]
  rest = [f"R{i}._value" if direct else f"r{i}"
          for i in range(len(program.rest))]
  sole = donation.SOLE_ATTR if direct else donation.SOLE_LOCAL
  for i, s in enumerate(program.cand):
    ns[f"C{i}"] = s
  for i, s in enumerate(program.rest):
    ns[f"R{i}"] = s
  for i, s in enumerate(program.writes):
    ns[f"W{i}"] = s
  # The slots are read and written back inside the owner's window or under
  # SLOT_LOCK (threads.py: WINDOW). The window is two attribute stores; the
  # lock's acquire and release cost a tenth of a small dispatch. Both in a
  # try/finally, not ``with`` (a special-method lookup and a three-argument
  # ``__exit__``, measured at twice the cost of the bound methods).
  top, names = compat.top_level_source()  # inlined: no call
  ns.update(names)
  generic = f"_generic({_passed(takes_args)})"
  head = ["_mode = _frames.mode",
          f"if not _mode or not ({top}):",  # a frame, or a foreign trace
          f"  return {generic}"]
  # Many States read and written, all donated as one list: the program
  # holds its results (held.py) and passes them back in as they came out.
  # (Fewer gain nothing in the loop: ANALYSIS.md, eighth to tenth passes.)
  holds = (direct and program.packed and program.donates_all and
           program.cand == program.writes)
  rest_arg = [f"[{', '.join(rest)}]"] if program.has_rest else []
  lines = ["_j = _jitted"]
  if holds:
    ns["_mine"] = held.Held(program.writes, ns["_noted"], program)
    lines += _held_call(takes_args, rest_arg)
  else:  # another program's results into the slots before they are read
    lines += ["if _w.held is not None:",
              "  _flush()"]
  if not direct:
    lines += ([f"c{i} = C{i}._value" for i in range(len(cand))] +
              [f"r{i} = R{i}._value" for i in range(len(rest))])
  counts = program.check_refs and bool(cand)
  clock = len(program.writes) >= CLOCK_FROM
  if counts:
    lines += (_lent_tests(program, ns, cand, sole) if clock
              else _sole_tests(cand, sole))
  # Many candidates travel as one list (program.PACK_FROM); a kept
  # reference's variant then unpacks it (_kept_variant).
  cand_args = [f"[{', '.join(cand)}]"] if program.packed else cand
  fast = program.place_targets(program) if program.place is not None else None
  if program.place is not None and fast is not None:
    lines += placement_source.placement_checks(fast, ns, cand + rest, generic,
                                                takes_args)
  lines += ["try:"]
  if program.place is None or fast is not None:
    lines += ["  " + line for line in _calls(cand_args + rest_arg, takes_args)]
  else:
    ns.update(_place=program.place, _program=program)
    lines += [f"  cl, rl, _a, _k = _place(_program, [{', '.join(cand)}], "
              f"[{', '.join(rest)}], {_passed(takes_args)})",
              "  " + _call(["cl" if program.packed else "*cl"] +
                           (["rl"] if program.has_rest else []),
                           "*_a", "**_k")]
  lines += _ON_TYPE_ERROR + _SPLIT
  targets = ", ".join(f"W{i}._value" for i in range(len(program.writes)))
  reset = " = ".join(f"W{i}._sig" for i in range(len(program.writes)))
  if program.writes:
    # This call's own outputs: nothing else refers to them (donation.py), and
    # their signature is computed when asked for. So their marks are reset
    # (None): with the clock, only where a State was lent since the last
    # write-back or during this call (a trace caches the old value's
    # signature there); else every mark is still None.
    if holds:  # all donated: keep the results (held.py)
      lines += ["if _j is _jitted:"] + ["  " + line for line in _HOLD]
    lines += [f"{targets}, = new"]
    lines += (_noting_reset(program, ns, reset) if clock and counts
              else _marks_reset(reset, clock))
  lines += ["return out"]
  # The owner's window saves the count and sets it, and restores it after
  # (calls nest: a host callback's call), instead of adding and taking
  # one: five bytecodes fewer. ``_b`` None: SLOT_LOCK is held instead.
  owner = [f"if _mode == {OWNER}:",
           "  _b = _w.busy",
           "  _w.busy = 1",
           "  if not _w.lockfree:",  # another thread ended lock-free mode
           "    _w.busy = _b",
           "    _b = None",
           "    _acquire()"]
  if direct and not holds:
    owner += _usual_call(cand, cand_args + rest_arg, takes_args, counts,
                         clock, targets, reset)
  return (head + owner + ["else:",
                          "  _b = None",
                          "  _acquire()",
                          "try:"] + ["  " + line for line in lines] +
          ["finally:",
           "  if _b is None:",
           "    _release()",
           "  else:",
           "    _w.busy = _b"])


def _usual_call(cand: list[str], values: list[str], takes_args: bool,
                counts: bool, clock: bool, targets: str,
                reset: str) -> list[str]:
  """The owner's call in the usual case, written out alone: nothing lent
  since this program's last write-back (no candidate to test, no kept
  variant), no other program's results held. It skips the general path's
  locals and branches: ~50 ns a call, 0.2% of a ten-State dispatch's
  machine instructions and 0.7% of a one-State one's (ANALYSIS.md, eleventh
  pass). Anything else falls through to the general path, inside the same
  window."""
  fresh = ["_w.held is None"]
  if counts:  # nothing lent: every candidate's value is this program's own
    fresh.insert(0, "_L.now is _noted[0]" if clock else " and ".join(
        f"C{i}._sig is None" for i in range(len(cand))))
  tail = [f"{targets}, = new"] + _marks_reset(reset, clock) if targets else []
  body = (["try:"] + ["  " + line for line in _calls(values, takes_args,
                                                      fn="_jitted")] +
          _ON_TYPE_ERROR +
          ["if new.__class__ is _list:"] +  # results(): written values alone
          ["  " + line for line in tail] +
          ["  return None",
           "out, new = new"] + tail + ["return out"])
  return ([f"  elif {' and '.join(fresh)}:",
           "    try:"] + ["      " + line for line in body] +
          ["    finally:",
           "      _w.busy = _b"])


# A TypeError from the program's call: the State's own error, if a State's
# value is what JAX refused (program.on_type_error), else JAX's.
_ON_TYPE_ERROR = ["except TypeError:",
                  "  _on_type_error()",
                  "  raise"]


# The program's results (program.results): the written values alone, as a
# list, where the function returns None; else (out, written).
_SPLIT = ["if new.__class__ is _list:",
          "  out = None",
          "else:",
          "  out, new = new"]


# A holding program's results kept (held.py). Whoever holds now is written
# back first: another program (a host callback's call), or none where a
# trace during this call read a State and so wrote this program's values
# back (the arrays just donated): the new ones are then held again.
_HOLD = ["if _w.held is not _mine:",
         "  _flush()",
         "  _w.held = _mine",
         "_mine.values = new",
         "return out"]


def _call(states: list[str], *extra: str, fn: str = "_j") -> str:
  """The program's call: the candidates (or their list), the other states
  as one list (only where there are some: Program.has_rest), then the
  call's own arguments."""
  return f"new = {fn}({', '.join([*states, *extra])})"


def _calls(values: list[str], takes_args: bool, fn: str = "_j") -> list[str]:
  """The call, with the star-arguments only where there are some: a call
  without arguments (a simulation step) skips building the argument tuple
  and passing an empty dict, measured at about 3% of a one-state dispatch."""
  if not takes_args:
    return [_call(values, fn=fn)]
  return ["if kwargs:",
          "  " + _call(values, "*args", "**kwargs", fn=fn),
          "elif args:",
          "  " + _call(values, "*args", fn=fn),
          "else:",
          "  " + _call(values, fn=fn)]


def _held_call(takes_args: bool, rest_arg: list[str]) -> list[str]:
  """The call of a program that holds its results (held.py): when they are
  still held, straight from the held list to the next results, no slot
  read or written. Else whoever holds writes back first."""
  return (["_h = _w.held",
           "if _h is _mine:",
           "  try:"] +
          ["    " + line for line in _calls(["_mine.values"] + rest_arg,
                                            takes_args)] +
          ["  " + line for line in _ON_TYPE_ERROR + _SPLIT + _HOLD] +
          ["if _h is not None:",
           "  _flush()"])


def _marks_reset(reset: str, clock: bool) -> list[str]:
  """The written States' marks reset: without the clock, every one; with
  it, only where it moved since the last write-back (a lend before or
  during this call), and the clock noted."""
  if not clock:
    return [f"{reset} = None"]
  return ["if _L.now is not _noted[0]:",
          f"  {reset} = None",
          "  _noted[0] = _L.now"]


def _noting_reset(program: Any, ns: dict, reset: str) -> list[str]:
  """:func:`_marks_reset` with the clock where the candidates were tested
  before the call (_lent_tests): after one lend before this call and none
  during it, only that State's mark."""
  ns["_write_at"] = {s._order: s for s in program.writes}
  return ["_n = _L.now",
          "if _n is not _noted[0]:",
          "  if _one is not None and _n is _n0:",
          "    _s = _write_at.get(_one)",
          "    if _s is not None:",
          "      _s._sig = None",
          "  else:",
          f"    {reset} = None",
          "  _noted[0] = _n"]


def _lent_tests(program: Any, ns: dict, cand: list[str],
                sole: int) -> list[str]:
  """Which candidates to keep (not donate), tested only where the clock
  moved since the last write-back (donation.LENDS): after one lend, that
  State alone (the notebook's read after each step), else each one."""
  ns["_cand_at"] = {s._order: (s, (i,)) for i, s in enumerate(program.cand)}
  value = "_c[0]._value"
  return ["_n0 = _L.now",
          "_one = None",
          "if _n0 is not _noted[0]:",
          "  if _n0 - 1 == _noted[0]:",  # (never true before a note)
          "    _one = _L.last",
          "    _c = _cand_at.get(_one)",
          f"    if _c is not None and {_shared(value, sole)}:",
          "      _j = _kept.get(_c[1]) or _keep(_c[1])",
          "  else:"] + ["    " + line for line in _sole_tests(cand, sole)]


def _sole_tests(cand: list[str], sole: int) -> list[str]:
  """Counts the references of the candidates whose value may be referenced
  elsewhere (``C{i}._sig`` is not None: see donation.py), usually none, or
  the one a notebook reads after each step. A kept reference selects the
  variant that leaves that state's buffer alone, without leaving this
  function. Inline, not a helper: right after a dispatch a Python call costs
  several times what it costs in a loop (measured: a 10-line helper, 1.1 us)."""
  fresh = " and ".join(f"C{i}._sig is None" for i in range(len(cand)))
  tests = [f"  if C{i}._sig is not None and {_shared(c, sole)}: _k += ({i},)"
           for i, c in enumerate(cand)]
  return ([f"if not ({fresh}):", "  _k = ()"] + tests +
          ["  if _k:",  # looked up by the kept indices: usually one
           "    _j = _kept.get(_k) or _keep(_k)"])


def _shared(value: str, sole: int) -> str:
  """The donation rule's test, as source: may ``value`` be referenced
  elsewhere? ``sole`` is its count when only the State holds it, written
  as a literal: a constant load, not a global one."""
  return (f"not (_rc({value}) == {sole} and (type({value}) is _Array or "
          f"_sole_tree({value})))")


def _kept_variant(program: Any, cache: dict, kept: tuple[int, ...]) -> Any:
  """The jitted program donating every candidate but those at ``kept``,
  called as the generated call calls ``_jitted``."""
  kept_ids = set(kept)
  mask = tuple(i not in kept_ids for i in range(len(program.cand)))
  j, packed = program.variant(mask)
  if program.packed and not packed:  # the list in, one argument each
    jitted = j

    def j(cand_vals, *args, **kwargs):
      return jitted(*cand_vals, *args, **kwargs)
  cache[kept] = j
  return j
