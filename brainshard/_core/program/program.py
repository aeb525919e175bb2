"""The compiled program: one ``jax.jit`` of a pure function, one call path.

A :class:`Program` is fixed by the states a function reads and writes. Its
pure function ``pure(*cand_vals, rest_vals, *args, **kwargs) -> (out,
written_vals)`` (:func:`results`) re-runs the user function with the state
values injected (or evaluates the discovery's jaxpr, when traced for
exactly this signature). Per call, :meth:`Program.call` is the whole runtime:

1. read the states' values (their global slots at top level, the frame when
   traced);
2. choose what to donate (``donate_states='auto'``: see donation.py);
3. place inputs where the program expects them (placement.py);
4. call the ``jax.jit`` whose C++ fast path checks avals and shardings;
5. write the written states back (slots at top level, the frame when traced).

For a few states, fastcall.py generates a straight-line copy of the top-level
case of exactly these steps. :class:`StatefulJit` owns the program of one
function and grows it when a new trace touches new states.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import jax

from brainshard._core import caches, compat, interrupts
from brainshard._core.program import donation, fastcall, generated
from brainshard._core.args import StaticArgs, program_name
from brainshard._core.discovery import DiscoveryCache, evaluate
from brainshard._core.errors import Rediscover
from brainshard._core.frames import (
    ReplayFrame, current_signature, gather_values, replay, union,
    write_results)
from brainshard._core.program.held import flush_unheld
from brainshard._core.program.placement import HintedPlacement
from brainshard._core.state.state import State
from brainshard._core.threads import (
    hold_slots, let_go_slots, thread_frames as _frames)

__all__ = ["Program", "StatefulJit", "Rediscover"]

_getrefcount = sys.getrefcount

_MAX_VARIANTS = 8  # donation choices compiled per program before giving up

# From this many donation candidates, a call that donates all of them (or
# none) passes their values as one list: JAX 0.10's dispatch costs more than
# linearly in donated positional arguments (+6-15% at 1000, sixth pass in
# benchmarks/ANALYSIS.md), and a program reading and writing the same States
# holds its results in that list (held.py; 2% of a call at 64-100, ninth
# pass). Below, the list's pytree node costs what the slots cost, and a kept
# reference's variant is a plain jax.jit, not an adapter unpacking the list.
PACK_FROM = 64


def _rediscover(frame: ReplayFrame, extra: list[State]) -> Rediscover:
  return Rediscover(frame.input_states(), frame.written_states())


class Program:
  """The compiled pure function for a fixed set of read/written states.

  The read states are split, once, into donation *candidates* (read and
  written) and the rest. Each candidate's value is its own positional
  argument, so that a donation choice is just ``donate_argnums`` over the
  candidates. Each choice is its own ``jax.jit`` of the *same* function and
  argument structure; JAX shares the trace between them, so a new choice
  compiles once but never re-runs the user's function.

  From :data:`PACK_FROM` candidates on, a call donating all of them or none
  passes their values as one list (*packed*); a choice donating some keeps
  the positional form (a function of its own: traced once more).
  """

  def __init__(self, owner: "StatefulJit", reads: Sequence[State],
               writes: Sequence[State]):
    self.owner = owner
    interrupts.protect()  # a Ctrl-C waits for the write-back (interrupts.py)
    write_ids = {id(s) for s in writes}
    donate, can, hints = owner.donate_states, owner.can_donate, owner.placements
    self.cand = tuple(
        s for s in reads
        if donate is not False and id(s) in write_ids and (can is None or can(s))
        and (id(s) not in hints or hints[id(s)].keeps_layout()))
    cand_ids = {id(s) for s in self.cand}
    self.rest = tuple(s for s in reads if id(s) not in cand_ids)
    self.reads = self.cand + self.rest
    self.writes = tuple(writes)
    self.write_ids = frozenset(write_ids)
    self.auto = donate == "auto"
    self.place, self.place_targets = owner.place, owner.place_targets
    if self.place is None and any(id(s) in hints for s in self.reads):
      placement = HintedPlacement(hints, owner.name)
      self.place, self.place_targets = placement.place, placement.fast_targets
    nc = self.nc = len(self.cand)
    # The other states' values travel as one list argument after the
    # candidates; with none, no such argument (an empty list costs JAX a
    # pytree flatten and a cache-key entry per call: 5% of a one-state call).
    self.has_rest = bool(self.rest)
    has_rest = self.has_rest
    self.packed = nc >= PACK_FROM

    def pure(*call_args, **kwargs):  # (*cand_vals, [rest_vals], *args)
      rest = call_args[nc] if has_rest else ()
      return results(*self._pure(call_args[:nc], rest,
                                 call_args[nc + has_rest:], kwargs))

    def pure_packed(cand_vals, *call_args, **kwargs):  # (cand_vals, ...)
      rest = call_args[0] if has_rest else ()
      return results(*self._pure(cand_vals, rest, call_args[has_rest:],
                                 kwargs))

    self._funs = {False: pure, True: pure_packed}
    for f in self._funs.values():
      f.__name__ = f.__qualname__ = program_name(owner.fun)
    self._jitted: dict[tuple[bool, ...], tuple[Any, bool]] = {}
    # (mask_for returns these very objects: no N-long tuple hashed per call)
    self._mask_all, self._mask_none = (True,) * nc, (False,) * nc
    self._v_none = self.variant(self._mask_none)
    # 'auto' where counts are unreliable (free-threaded builds): never donate.
    self.donates_all = nc > 0 and (
        donate is True or (self.auto and donation.AUTO_SUPPORTED))
    self._v_all = (self.variant(self._mask_all) if self.donates_all
                   else self._v_none)
    self.j_all = self._v_all[0]  # the generated call's usual program
    self.check_refs = self.auto and self.donates_all
    self.entry = fastcall.make_entry(self)  # entry(*args, **kwargs)

  @property
  def source(self) -> str:
    """The Python source of :attr:`entry` (fastcall.py)."""
    return generated.source_of(self.entry)

  def variant(self, mask: tuple[bool, ...]) -> tuple[Any, bool]:
    """``(jitted, packed)``: the ``jax.jit`` that donates the candidates
    where ``mask`` is True (or none, past ``_MAX_VARIANTS``), and whether
    it takes their values as one list (:data:`PACK_FROM`) or one positional
    argument each."""
    v = self._jitted.get(mask)
    if v is None:
      if len(self._jitted) >= _MAX_VARIANTS and any(mask):
        return self.variant(self._mask_none)
      packed = self.packed and len(set(mask)) == 1  # all donated, or none
      owner = self.owner
      shift = (1 if packed else self.nc) + self.has_rest
      kwargs = dict(owner.jit_kwargs)
      if "in_shardings" in kwargs:
        kwargs["in_shardings"] = (None,) * shift + tuple(kwargs["in_shardings"])
      donated = (((0,) if any(mask) else ()) if packed else
                 tuple(i for i, m in enumerate(mask) if m))
      v = self._jitted[mask] = jax.jit(
          self._funs[packed],
          static_argnums=tuple(i + shift if i >= 0 else i
                               for i in owner.static.argnums),
          static_argnames=owner.static.argnames,
          donate_argnums=donated + tuple(
              i + shift for i in owner.donate_argnums),
          **kwargs), packed
    return v

  def _pure(self, cand_vals, rest_vals, args, kwargs):
    read_vals = [*cand_vals, *rest_vals]
    if self.owner.stateful is not None:
      evaluated = self._evaluate_discovery(read_vals, args, kwargs)
      if evaluated is not None:
        return evaluated
    return replay(ReplayFrame(self.owner.name), self.owner.fun, args, kwargs,
                  zip(self.reads, read_vals, strict=True), self.writes,
                  _rediscover)

  def _evaluate_discovery(self, read_vals: list, args, kwargs):
    """Evaluates the discovery's jaxpr when it was traced for exactly this
    signature and state set, so the first call runs the Python body once.
    Returns None where a fresh trace of the function is needed."""
    d, leaves = _discovered(self.owner.stateful, args, kwargs)
    if d is None or d.write_states != self.writes or (
        {id(s) for s in d.read_states} != {id(s) for s in self.reads}) or any(
            compat.is_traced(c) for c in d.jaxpr.consts):
      return None  # (a jaxpr closed over another trace's values is stale)
    by_id = dict(zip(map(id, self.reads), read_vals, strict=True))
    return evaluate(d, leaves, [by_id[id(s)] for s in d.read_states])

  def mask_for(self, cand_vals: list) -> tuple[bool, ...]:
    """Which candidates this top-level call may donate (see donation.py).

    ``cand_vals`` must be a fresh list of the candidates' values, holding the
    only references this module has to them.
    """
    if not self.donates_all:
      return self._mask_none
    if not self.auto:
      return self._mask_all
    counts = list(map(_getrefcount, cand_vals))
    if counts.count(donation.SOLE) == self.nc and (
        donation.ARRAY_TYPES.issuperset(map(type, cand_vals))):
      return self._mask_all
    return donation.sole_mask(cand_vals, counts)

  def prepare(self, args, kwargs, fixed_mask=None):
    """``(mask, jitted, jit_args, jit_kwargs)`` of a call: steps 1-3."""
    top = not _frames.stack and compat.at_top_level()
    if top:  # an unset slot (a state created in a transform) fails in jit
      flush_unheld()  # a program's held results first (held.py)
      # (comprehensions: about half the cost per state of map(attrgetter))
      cand = [s._value for s in self.cand]
      rest = [s._value for s in self.rest]
    else:
      cand = gather_values(self.cand, self.owner.name)
      rest = gather_values(self.rest, self.owner.name)
    if fixed_mask is None:
      mask = self.mask_for(cand) if top else self._mask_none
    else:  # a Compiled donates as lowered: copy what others still refer to
      mask = fixed_mask
      if top and self.auto and any(mask):
        sole = self.mask_for(cand)
        cand = [jax.tree.map(lambda a: a.copy(), x) if m and not ok else x
                for x, m, ok in zip(cand, mask, sole, strict=True)]
    if self.place is not None:
      cand, rest, args, kwargs = self.place(self, cand, rest, args, kwargs)
    jitted, packed = (self._v_all if mask is self._mask_all else
                      self._v_none if mask is self._mask_none else
                      self.variant(mask))
    return mask, jitted, (*self.state_args(cand, rest, packed), *args), kwargs

  def state_args(self, cand: list, rest: list, packed: bool) -> tuple:
    """The states' values as the jitted program takes them: the
    candidates' (one list where ``packed``, else one argument each), then
    the other states' as one list, where there are some."""
    return ((cand,) if packed else tuple(cand)) + (
        (rest,) if self.has_rest else ())

  def state_values(self, mask: tuple[bool, ...], jit_args: tuple) -> list:
    """The states' values, in ``reads`` order, among the arguments
    :meth:`prepare` gave for a call donating by ``mask`` (the inverse of
    :meth:`state_args`)."""
    if self.variant(mask)[1]:
      cand, n = jit_args[0], 1
    else:
      cand, n = jit_args[:self.nc], self.nc
    return [*cand, *(jit_args[n] if self.has_rest else ())]

  @compat.api_boundary
  def call(self, args, kwargs, compiled=None, fixed_mask=None):
    """Runs the program once: prepare, call, write back (steps 1-5)."""
    if _frames.stack:  # traced: the values read are tracers, no donation
      return self._run(args, kwargs, compiled, fixed_mask)
    locked = hold_slots()  # see threads.py: donation must not race others
    try:
      return self._run(args, kwargs, compiled, fixed_mask)
    finally:
      let_go_slots(locked)

  def _run(self, args, kwargs, compiled, fixed_mask):
    _, jitted, jargs, jkwargs = self.prepare(args, kwargs, fixed_mask)
    try:
      res = (compiled or jitted)(*jargs, **jkwargs)
    except TypeError:
      self.on_type_error()
      raise
    out, new_vals = (None, res) if res.__class__ is list else res  # results()
    write_results(self.writes, new_vals, self.owner.name)
    return out

  def on_type_error(self) -> None:
    gather_values(self.reads, self.owner.name)  # the State's own error, if any


def results(out: Any, written: Sequence[Any]) -> Any:
  """``(out, written)``, or for a function returning None the written values
  alone as a list: JAX builds one list, not a tuple with a None node (1.3% of
  a ten-state dispatch), and it goes back into a next call as is (held.py)."""
  return list(written) if out is None else (out, list(written))


def _discovered(stateful: DiscoveryCache, args, kwargs):
  """The cached discovery of this call and its argument leaves, valid while
  each state keeps its shape and dtype: placing a state (placement.py's
  ``keep_placed``) changes its aval's sharding on an Explicit mesh, not
  what the jaxpr computes, so the first call still runs the body once."""
  d, call, key, leaves = stateful.lookup(args, kwargs)
  if d is None:
    d = stateful.cached(key)
    if d is not None and not all(
        map(_same_but_placement, map(current_signature, d.states),
            d.state_sigs)):
      d = None
  return d, leaves


def _same_but_placement(a, b) -> bool:
  return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
      (x.shape, x.dtype, x.weak_type) == (y.shape, y.dtype, y.weak_type)
      for x, y in zip(a[1], b[1]))


class StatefulJit:
  """The compiled program of one function, grown as traces find states.

  Shared by ``bs.jit``, eager ``bs.shard_map`` and eager loops/branches.

  Args:
    fun: the function to re-run under ``jax.jit``.
    name: used in errors, e.g. ``bs.jit(step)``.
    stateful: the function's DiscoveryCache: its discoveries give the
      first program's states (and placement hints), and ``jax.jit`` may
      evaluate them instead of running the Python function again.
    discover: instead of ``stateful``, ``(args, kwargs) -> (reads, writes)``.
    static: the static arguments (``StaticArgs``).
    donate_states: ``'auto'`` (donate a read-and-written state's old buffer
      when only the State refers to it, see donation.py), ``True``
      (always), ``False`` (never).
    can_donate: optional ``(state) -> bool`` excluding states whose buffer
      cannot be reused (e.g. their output sharding differs).
    place: optional ``(program, cand_vals, rest_vals, args, kwargs) ->
      (cand_vals, rest_vals, args, kwargs)`` that puts inputs where the
      program expects them; ``place_targets(program)`` gives the shardings
      it would leave alone, for the generated call's inline check.
  """

  def __init__(self, fun: Callable, name: str, *,
               stateful: DiscoveryCache | None = None,
               discover: Callable | None = None,
               static: StaticArgs | None = None, donate_argnums=(),
               donate_states: bool | str = "auto", jit_kwargs=None,
               place: Callable | None = None,
               place_targets: Callable | None = None,
               can_donate: Callable[[State], bool] | None = None):
    self.fun = fun
    self.name = name
    self.stateful = stateful
    self._discover = discover or self._discover_stateful
    self.static = static or (stateful.static if stateful else StaticArgs(fun))
    self.donate_argnums = donate_argnums
    self.donate_states = donate_states
    self.can_donate = can_donate
    self.jit_kwargs = jit_kwargs or {}
    self.place = place
    self.place_targets = place_targets or (lambda program: None)
    # id(state) -> PlacementHint, from the shard_maps inside the function
    self.placements: dict[int, Any] = {}
    self.on_entry: Callable | None = None  # told each new entry (jit.py)
    self.program = None
    caches.register(self)  # bs.clear_caches() forgets the program too

  @property
  def program(self) -> Program | None:
    return self._program

  @program.setter
  def program(self, program: Program | None) -> None:
    self._program = program
    self.entry = self._first_call if program is None else program.entry
    if self.on_entry is not None:
      self.on_entry(self.entry)

  def _discover_stateful(self, args, kwargs):
    d = self.stateful.discover(*args, **kwargs)
    self.placements.update(d.placements)
    return d.read_states, d.write_states

  @compat.api_boundary
  def _first_call(self, *args, **kwargs):
    return self.with_program(args, kwargs, lambda p: p.call(args, kwargs))

  @compat.api_boundary
  def retry(self, err: Rediscover, args, kwargs):
    self._grow(err)
    return self.with_program(args, kwargs, lambda p: p.call(args, kwargs))

  def _grow(self, err: Rediscover) -> Program:
    """A trace touched new states: a program for the union of both sets.

    A state written in one trace but not another must come in as an input so
    the other trace can pass it through unchanged.
    """
    old = self.program
    writes = union(old.writes, err.writes)
    reads = union(old.reads, err.reads, writes)
    self.program = Program(self, reads, writes)
    return self.program

  def with_program(self, args, kwargs, action: Callable[[Program], Any]) -> Any:
    """Runs ``action(program)``, growing the program while traces find new
    states."""
    program = self.program
    if program is None:
      program = self.program = Program(self, *self._discover(args, kwargs))
    for _ in range(8):
      try:
        return action(program)
      except Rediscover as err:
        program = self._grow(err)
    raise RuntimeError(  # pragma: no cover - needs a pathological function
        f"{self.name}: the set of States the function touches kept changing "
        "between traces.")

  def clear(self) -> None:
    """Forgets the program (the next call discovers and compiles again)."""
    self.placements.clear()
    self.program = None

  def __call__(self, *args, **kwargs):
    return self.entry(*args, **kwargs)
