"""Stateful ``jit``: compile a function that reads and writes States.

The compiled program is ``jax.jit`` of a pure function
``pure(donated_vals, kept_vals, *args) -> (out, written_vals)`` that re-runs
the user function with the state values injected. Per call, brainshard only
gathers the read states' values, calls that ``jax.jit`` object (whose C++
fast path checks avals and shardings) and stores the written values.

The set of states is found once, by discovery on the first call. ``jax.jit``
re-traces ``pure`` by itself when avals or static arguments change; every
such trace checks that the function still touches only the known states, and
if it touches new ones the state set grows and the call is retried.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
import weakref
from typing import Any, Callable, Sequence

import jax
from jax.extend.core import jaxpr_as_fun

from brainshard import _compat, _donation, _fastcall
from brainshard._placement import HintedPlacement
from brainshard._state import (
    _UNSET, SLOT_LOCK, Frame, State, StateTraceError, _frames,
    current_signature, frame_stack, write_results)
from brainshard._stateful import (
    StatefulFunction, _normalize_argnames, _normalize_argnums, copy_metadata,
    fun_name)

__all__ = ["jit", "JittedFunction", "StatefulJit", "ReplayFrame"]

_getrefcount = sys.getrefcount
_get_value = operator.attrgetter("_value")


class _Rediscover(Exception):
  """Raised out of a trace that touched states outside the known set."""

  def __init__(self, reads: list[State], writes: list[State]):
    super().__init__("internal: brainshard state set changed")
    self.reads = reads
    self.writes = writes


class ReplayFrame(Frame):
  """Re-runs the user function inside a JAX transform with known states.

  States outside the known sets are recorded; the transform decides whether
  that means rediscovery (``jit``) or an error.
  """

  def __init__(self, name: str):
    super().__init__(name)
    self.unknown_reads: list[State] = []

  def first_read(self, state: State, outer_value: Any) -> Any:
    self.unknown_reads.append(state)
    return outer_value


def replay(frame: ReplayFrame, fun: Callable, args: tuple, kwargs: dict,
           inputs: Sequence[tuple[State, Any]], outputs: Sequence[State],
           where: str) -> tuple[Any, list[Any]]:
  """Runs ``fun(*args, **kwargs)`` in ``frame`` with ``inputs`` injected.

  Returns its output and the values of ``outputs`` afterwards (a state the
  function did not write keeps the value it was given). The function must
  touch no state beyond those found when it was discovered for the same
  arguments; ``where`` says where it was traced, for the error.
  """
  with frame:
    for state, value in inputs:
      frame.inject(state, value)
    out = fun(*args, **kwargs)
    known = {id(s) for s in outputs}
    extra = frame.unknown_reads + [
        s for s in frame.written_states() if id(s) not in known]
    if extra:
      raise StateTraceError(
          f"{frame.name} touched {extra[0]._label()} when traced {where}, but "
          "not when its states were discovered for the same arguments. The "
          "function must touch the same States every time it is traced with "
          "the same argument shapes.")
    return out, [frame.lookup(s) for s in outputs]


def union(*groups: Sequence[State]) -> tuple[State, ...]:
  """The states of all ``groups``, each once, in first-seen order."""
  seen: dict[int, State] = {}
  for group in groups:
    for s in group:
      seen.setdefault(id(s), s)
  return tuple(seen.values())


def gather_values(states: Sequence[State], where: str) -> list[Any]:
  """Current values of ``states``: frame-aware, with a fast top-level path."""
  if frame_stack():
    return [s.value for s in states]
  values = [s._value for s in states]
  for s, v in zip(states, values):
    if v is _UNSET:
      s._global_value()  # raises the "created inside a transform" error
  return values


_MAX_VARIANTS = 8  # donation choices compiled per plan before falling back


class _Plan:
  """The compiled pure function for a fixed set of read/written states.

  The read states are split, once, into donation *candidates* (read and
  written) and the rest. The pure function takes each candidate's value as
  its own positional argument, then a list of the other read states' values,
  then the call's arguments::

    pure(*cand_vals, rest_vals, *args, **kwargs) -> (out, written_vals)

  so that a donation choice is just ``donate_argnums`` over the candidates.
  Each choice is its own ``jax.jit`` of the *same* function and argument
  structure; JAX shares the trace between them, so a new choice compiles
  once but never re-runs the user's function.
  """

  def __init__(self, core: "StatefulJit", reads: Sequence[State],
               writes: Sequence[State]):
    self.core = core
    write_ids = {id(s) for s in writes}
    donate = core.donate_states
    can = core.can_donate
    hints = core.placements
    self.cand = tuple(
        s for s in reads
        if donate is not False and id(s) in write_ids and (can is None or can(s))
        and (id(s) not in hints or hints[id(s)].keeps_layout()))
    cand_ids = {id(s) for s in self.cand}
    self.rest = tuple(s for s in reads if id(s) not in cand_ids)
    self.reads = self.cand + self.rest
    self.writes = tuple(writes)
    self.auto = donate == "auto"
    self.place = core.place
    self.place_targets = core.place_targets
    if self.place is None and any(id(s) in hints for s in self.cand):
      placement = HintedPlacement(hints)
      self.place, self.place_targets = placement.place, placement.fast_targets
    nc = self.nc = len(self.cand)

    def pure(*call_args, **kwargs):
      return self._pure(call_args[:nc], call_args[nc], call_args[nc + 1:],
                        kwargs)

    pure.__name__ = pure.__qualname__ = fun_name(core.fun)
    self._fun = pure
    self._jitted: dict[tuple[bool, ...], Any] = {}
    self.j_none = self.jitted_for((False,) * nc)
    # 'auto' where counts are unreliable (free-threaded builds): never donate.
    self.donates_all = nc > 0 and (
        donate is True or (self.auto and _donation.AUTO_SUPPORTED))
    self.j_all = (self.jitted_for((True,) * nc) if self.donates_all
                  else self.j_none)
    self.check_refs = self.auto and self.donates_all
    # `entry(*args, **kwargs)`: the call, generated for these states.
    self.entry = _fastcall.make_entry(
        self, self.j_all, self.call, self._call_nested, self._on_type_error,
        core._retry, _Rediscover)

  def jitted_for(self, mask: tuple[bool, ...]) -> Any:
    """The ``jax.jit`` that donates the candidates where ``mask`` is True."""
    j = self._jitted.get(mask)
    if j is None:
      if len(self._jitted) >= _MAX_VARIANTS and any(mask):
        return self.jitted_for((False,) * self.nc)
      core, shift = self.core, self.nc + 1
      kwargs = dict(core.jit_kwargs)
      if "in_shardings" in kwargs:
        kwargs["in_shardings"] = (None,) * shift + tuple(kwargs["in_shardings"])
      j = self._jitted[mask] = jax.jit(
          self._fun,
          static_argnums=tuple(i + shift if i >= 0 else i
                               for i in core.static_argnums),
          static_argnames=core.static_argnames,
          donate_argnums=tuple(i for i, m in enumerate(mask) if m) + tuple(
              i + shift for i in core.donate_argnums),
          **kwargs)
    return j

  def _pure(self, cand_vals, rest_vals, args, kwargs):
    core = self.core
    if core.stateful is not None:
      replayed = self._replay_discovery([*cand_vals, *rest_vals], args, kwargs)
      if replayed is not None:
        return replayed
    frame = ReplayFrame(core.name)
    with frame:
      for s, v in zip(self.cand, cand_vals):
        frame.inject(s, v)
      for s, v in zip(self.rest, rest_vals):
        frame.inject(s, v)
      out = core.fun(*args, **kwargs)
      written = frame.written_states()
      known = {id(s) for s in self.writes}
      if frame.unknown_reads or any(id(s) not in known for s in written):
        raise _Rediscover(frame.input_states(), written)
      # A known write this trace skipped keeps the value it came in with.
      new_vals = [frame.lookup(s) for s in self.writes]
    return out, new_vals

  def _replay_discovery(self, read_vals: list, args, kwargs):
    """Evaluates the discovery's jaxpr when it was traced for exactly this
    signature and state set, so the first call runs the Python body once.
    Returns None where a fresh trace of the function is needed."""
    stateful = self.core.stateful
    split = stateful._split(args, kwargs)
    d = stateful._cache.get(split.key)
    if d is None or {id(s) for s in d.read_states} != {
        id(s) for s in self.reads} or d.write_states != self.writes:
      return None
    if any(current_signature(s) != sig
           for s, sig in zip(d.states, d.state_sigs)):
      return None  # a state changed shape or dtype since that discovery
    by_id = {id(s): v for s, v in zip(self.reads, read_vals)}
    read_leaves = jax.tree.leaves([by_id[id(s)] for s in d.read_states])
    outs = jaxpr_as_fun(d.jaxpr)(*split.dyn_leaves, *read_leaves)
    return jax.tree.unflatten(d.out_tree, outs)

  # -- choosing what to donate ------------------------------------------------

  def mask_for(self, cand_vals: list) -> tuple[bool, ...]:
    """Which candidates this call may donate (see _donation.py).

    ``cand_vals`` must be a fresh list of the candidates' values, holding the
    only references this module has to them.
    """
    if not self.donates_all:
      return (False,) * self.nc
    if not self.auto:
      return (True,) * self.nc
    counts = list(map(_getrefcount, cand_vals))
    return _donation.sole_mask(cand_vals, counts)

  def prepare(self, args, kwargs):
    """``(mask, jitted, jit_args, jit_kwargs)`` for a call."""
    where = self.core.name
    cand = gather_values(self.cand, where)
    rest = gather_values(self.rest, where)
    if frame_stack() or not _compat.at_top_level():
      mask = (False,) * self.nc
    else:
      mask = self.mask_for(cand)
    if self.place is not None:
      cand, rest, args, kwargs = self.place(self, cand, rest, args, kwargs)
    return mask, self.jitted_for(mask), (*cand, rest, *args), kwargs

  # -- calling ----------------------------------------------------------------

  # Calls normally go through ``self.entry`` (made in __init__, see
  # _fastcall.py), which falls back to this for the unusual cases.

  def call(self, args, kwargs):
    if _frames.stack or not _compat.at_top_level():
      return self._call_nested(args, kwargs)
    with SLOT_LOCK:  # see _state.py: donation must not race other threads
      return self._call_top(args, kwargs)

  def _call_top(self, args, kwargs):
    # Top level: values are read straight from the States' global slots and
    # written straight back; a state created inside a transform holds
    # _UNSET, which jax rejects before running anything.
    cand = list(map(_get_value, self.cand))
    rest = list(map(_get_value, self.rest))
    jitted = self.j_all
    if self.check_refs:
      counts = list(map(_getrefcount, cand))
      if counts.count(_donation.SOLE) != self.nc or not (
          _donation.ARRAY_TYPES.issuperset(map(type, cand))):
        jitted = self.jitted_for(_donation.sole_mask(cand, counts))
    try:
      if self.place is not None:
        cand, rest, args, kwargs = self.place(self, cand, rest, args, kwargs)
      out, new_vals = jitted(*cand, rest, *args, **kwargs)
    except TypeError:
      self._on_type_error()
      raise
    for s, x in zip(self.writes, new_vals):
      s._value = x
      s._sig = None
    return out

  def _on_type_error(self) -> None:
    gather_values(self.reads, self.core.name)  # the State's own error, if any

  def _call_nested(self, args, kwargs):
    """Under a brainshard frame (or a foreign JAX trace): no donation, and
    writes go through the recording path (which refuses tracers at top
    level)."""
    if _frames.stack:  # tracing: the values read are tracers
      return self._run_prepared(args, kwargs)
    with SLOT_LOCK:  # a foreign trace captures concrete state values
      return self._run_prepared(args, kwargs)

  def _run_prepared(self, args, kwargs):
    _, jitted, jargs, jkwargs = self.prepare(args, kwargs)
    out, new_vals = jitted(*jargs, **jkwargs)
    write_results(self.writes, new_vals, self.core.name)
    return out


class StatefulJit:
  """The cached core of stateful jit, shared by ``jit`` and ``shard_map``.

  Args:
    fun: the function to re-run under ``jax.jit``.
    name: used in errors, e.g. ``bs.jit(step)``.
    discover: ``(args, kwargs) -> (read_states, write_states)`` for the first
      call.
    donate_states: ``'auto'`` (donate a read-and-written state's old buffer
      when only the State refers to it, see _donation.py), ``True``
      (always), ``False`` (never).
    can_donate: optional ``(state) -> bool`` excluding states whose buffer
      cannot be reused (e.g. their output sharding differs).
    place: optional ``(plan, cand_vals, rest_vals, args, kwargs) ->
      (cand_vals, rest_vals, args, kwargs)`` that puts inputs where the
      program expects them (``plan.cand`` / ``plan.rest`` are the states).
    place_targets: optional ``(plan) -> (state_targets, arg_target,
      place_args) | None``: the shardings ``place`` would leave alone, so the
      generated call can check them inline (see _fastcall.py).
    stateful: the StatefulFunction whose cached discoveries ``jax.jit`` may
      evaluate instead of running the Python function again.
  """

  def __init__(self, fun: Callable, name: str, *,
               discover: Callable, static_argnums=(), static_argnames=(),
               donate_argnums=(), donate_states: bool | str = "auto",
               jit_kwargs=None, place: Callable | None = None,
               place_targets: Callable | None = None,
               can_donate: Callable[[State], bool] | None = None,
               stateful: StatefulFunction | None = None):
    self.fun = fun
    self.name = name
    self.discover = discover
    self.static_argnums = static_argnums
    self.static_argnames = static_argnames
    self.donate_argnums = donate_argnums
    self.donate_states = donate_states
    self.can_donate = can_donate
    self.jit_kwargs = jit_kwargs or {}
    self.place = place
    self.place_targets = place_targets or (lambda plan: None)
    self.stateful = stateful
    # id(state) -> PlacementHint, from the shard_maps inside the function
    self.placements: dict[int, Any] = {}
    self.plan = None

  @property
  def plan(self) -> _Plan | None:
    return self._plan

  @plan.setter
  def plan(self, plan: _Plan | None) -> None:
    self._plan = plan
    self.entry = self._first_call if plan is None else plan.entry

  def _first_call(self, *args, **kwargs):
    return self.with_plan(args, kwargs, lambda p: p.call(args, kwargs))

  def _retry(self, err: _Rediscover, args, kwargs):
    self._grow(err)
    return self.with_plan(args, kwargs, lambda p: p.call(args, kwargs))

  def plan_for(self, args, kwargs) -> _Plan:
    if self.plan is None:
      reads, writes = self.discover(args, kwargs)
      self.plan = _Plan(self, reads, writes)
    return self.plan

  def _grow(self, err: _Rediscover) -> _Plan:
    """A trace touched new states: plan again for the union of both sets.

    A state written in one trace but not another must come in as an input so
    the other trace can pass it through unchanged.
    """
    old = self.plan
    writes = union(old.writes, err.writes)
    reads = union(old.reads, err.reads, writes)
    self.plan = _Plan(self, reads, writes)
    return self.plan

  def with_plan(self, args, kwargs, action: Callable[[_Plan], Any]) -> Any:
    """Runs ``action(plan)``, re-planning while traces find new states."""
    plan = self.plan or self.plan_for(args, kwargs)
    for _ in range(8):
      try:
        return action(plan)
      except _Rediscover as err:
        plan = self._grow(err)
    raise RuntimeError(  # pragma: no cover - needs a pathological function
        f"{self.name}: the set of States the function touches kept changing "
        "between traces.")

  def __call__(self, *args, **kwargs):
    return self.entry(*args, **kwargs)


class JittedFunction:
  """The result of :func:`jit`: call it like the function it wraps."""

  def __init__(self, fun: Callable, *, static_argnums=(), static_argnames=(),
               donate_argnums=(), donate_states: bool | str = "auto",
               in_shardings=None, out_shardings=None):
    self.fun = fun
    static_argnums, static_argnames = _resolve_static(
        fun, _normalize_argnums(static_argnums),
        _normalize_argnames(static_argnames))
    self.static_argnums = static_argnums
    self.static_argnames = static_argnames
    self.donate_argnums = _normalize_argnums(donate_argnums)
    self.donate_states = _check_donate_states(donate_states)
    self.in_shardings = in_shardings
    self.out_shardings = out_shardings
    core_donate = self.donate_states
    if core_donate == "auto" and (in_shardings is not None or
                                  out_shardings is not None):
      # The written states' output shardings are left to the compiler; next
      # to user-fixed shardings it may lay one out unlike its input, and
      # XLA then fails to alias the donated buffer (an INTERNAL error, not
      # JAX's usual "donated buffers were not usable" warning). 'auto' is
      # a promise of safety, so it does not donate here.
      core_donate = False
    self.name = f"bs.jit({fun_name(fun)})"
    self.stateful = StatefulFunction(
        fun, static_argnums=static_argnums,
        static_argnames=static_argnames, name=self.name)
    self._core = StatefulJit(
        fun, self.name, discover=self._discover,
        static_argnums=static_argnums, static_argnames=static_argnames,
        donate_argnums=self.donate_argnums, donate_states=core_donate,
        jit_kwargs=_sharding_kwargs(self.name, in_shardings, out_shardings),
        stateful=self.stateful)
    self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    copy_metadata(self, fun)

  def _discover(self, args, kwargs):
    d = self.stateful.discover(*args, **kwargs)
    self._core.placements.update(d.placements)
    return d.read_states, d.write_states

  # Calling the object calls ``self._core.entry`` directly: Python looks
  # ``__call__`` up on the type, and this property hands it the core's current
  # entry through a C-level getter, so no Python frame of ours sits between
  # the caller and the plan's generated call (see _fastcall.py).
  __call__ = property(operator.attrgetter("_core.entry"))

  def __get__(self, instance, owner=None):
    if instance is None:
      return self
    try:
      bound = self._bound.get(instance)
    except TypeError:  # unhashable instance: cache in its __dict__
      bound = instance.__dict__.get(self._dict_key)
    if bound is None:
      bound = JittedFunction(
          functools.partial(self.fun, instance),
          static_argnums=_shift_for_self(self.static_argnums),
          static_argnames=self.static_argnames,
          donate_argnums=_shift_for_self(self.donate_argnums),
          donate_states=self.donate_states, in_shardings=self.in_shardings,
          out_shardings=self.out_shardings)
      try:
        self._bound[instance] = bound
      except TypeError:
        instance.__dict__[self._dict_key] = bound
    return bound

  @property
  def _dict_key(self) -> str:
    return f"_brainshard_jit_{id(self)}"

  def eval_shape(self, *args, **kwargs) -> Any:
    """Output ShapeDtypeStructs of a call, without running or writing it."""
    return self.stateful.discover(*args, **kwargs).out_shapes

  def lower(self, *args, **kwargs) -> "Lowered":
    """Lowers for these arguments and the states' current values."""
    def lower_plan(plan):
      mask, jitted, jargs, jkwargs = plan.prepare(args, kwargs)
      return Lowered(jitted.lower(*jargs, **jkwargs), plan, mask)
    return self._core.with_plan(args, kwargs, lower_plan)

  def __repr__(self) -> str:
    return f"<{self.name}>"


class Lowered:
  """``jax.stages.Lowered`` for a stateful function; ``.compile()`` it."""

  def __init__(self, lowered, plan: _Plan, mask: tuple[bool, ...]):
    self._lowered = lowered
    self._plan = plan
    self._mask = mask

  def compile(self, *args, **kwargs) -> "Compiled":
    """Compiles; the result is called like the jitted function."""
    return Compiled(self._lowered.compile(*args, **kwargs), self._plan,
                    self._mask)

  def __getattr__(self, name):  # as_text, cost_analysis, ...
    return getattr(self._lowered, name)


class Compiled:
  """``jax.stages.Compiled`` for a stateful function: calling it reads and
  writes the States like the jitted function does.

  Its donation is fixed when lowered. Under ``donate_states='auto'`` a state
  it donates whose value is also referenced elsewhere at call time is passed
  as a copy, so the other reference stays valid.
  """

  def __init__(self, compiled, plan: _Plan, mask: tuple[bool, ...]):
    self._compiled = compiled
    self._plan = plan
    self._mask = mask

  def __call__(self, *args, **kwargs):
    with SLOT_LOCK:  # see _state.py: donation must not race other threads
      return self._call(args, kwargs)

  def _call(self, args, kwargs):
    plan = self._plan
    where = plan.core.name
    cand = gather_values(plan.cand, where)
    rest = gather_values(plan.rest, where)
    if any(self._mask) and plan.auto:
      sole = plan.mask_for(cand)
      cand = [jax.tree.map(lambda a: a.copy(), x) if m and not ok else x
              for x, m, ok in zip(cand, self._mask, sole)]
    if plan.place is not None:
      cand, rest, args, kwargs = plan.place(plan, cand, rest, args, kwargs)
    out, new_vals = self._compiled(*cand, rest, *args, **kwargs)
    write_results(plan.writes, new_vals, where)
    return out

  def __getattr__(self, name):  # memory_analysis, as_text, ...
    return getattr(self._compiled, name)


def _check_donate_states(value: Any) -> bool | str:
  if value is True or value is False or (
      isinstance(value, str) and value == "auto"):
    return value
  raise ValueError(
      f"donate_states must be 'auto', True or False; got {value!r}.")


def _sharding_kwargs(name: str, in_shardings: Any, out_shardings: Any) -> dict:
  kw = {}
  if in_shardings is not None:
    if not isinstance(in_shardings, (tuple, list)):
      raise TypeError(
          f"{name}: in_shardings must be a tuple with one entry (a sharding, a "
          "pytree of them, or None) per positional argument; got "
          f"{type(in_shardings).__name__}.")
    kw["in_shardings"] = tuple(in_shardings)  # _Plan prefixes the states
  if out_shardings is not None:
    kw["out_shardings"] = (out_shardings, None)
  return kw


def _resolve_static(fun: Callable, nums: tuple[int, ...],
                    names: tuple[str, ...]) -> tuple[tuple, tuple]:
  """Completes static argnums from argnames and back, as ``jax.jit`` does,
  so a static argument may be passed by position or by keyword."""
  try:
    params = list(inspect.signature(fun).parameters.values())
  except (TypeError, ValueError):
    return nums, names
  positional = [p.name for p in params if p.kind in (
      p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  nums_out = set(nums) | {positional.index(n) for n in names if n in positional}
  names_out = set(names) | {positional[i] for i in nums
                            if -len(positional) <= i < len(positional)}
  return tuple(sorted(nums_out)), tuple(sorted(names_out))


def _shift_for_self(argnums: tuple[int, ...]) -> tuple[int, ...]:
  return tuple(i - 1 if i > 0 else i for i in argnums if i != 0)


def jit(fun: Callable | None = None, *,
        static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (),
        donate_argnums: int | Sequence[int] = (),
        donate_states: bool | str = "auto",
        in_shardings: Any = None,
        out_shardings: Any = None):
  """Compiles ``fun``, threading every State it reads or writes.

  Reads see each State's current value on every call; writes persist. One
  trace and one compile per call signature, as with ``jax.jit``.

  Args:
    fun: the function; may close over States. Usable as ``@bs.jit``,
      ``@bs.jit(static_argnums=...)`` and on methods.
    static_argnums, static_argnames, donate_argnums: as in ``jax.jit``.
    donate_states: whether a state that is read and written hands its old
      buffer to the call that replaces it (no second copy per step).
      ``'auto'`` (default): only when nothing but the State refers to the
      old value at that call, so ``old = s.value; step(); old`` keeps working
      (docs/donation.md has the exact rule). ``True``: always (a kept
      ``old`` is deleted). ``False``: never.
    in_shardings: None, or a tuple with one sharding (pytree) per positional
      argument; states keep the sharding they have.
    out_shardings: sharding(s) of the function's output.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(3), name='v')
    >>> @bs.jit
    ... def step(dt):
    ...   v.value = v.value + dt
    ...   return v.value.sum()
    >>> step(0.5), step(0.5)
    (Array(1.5, dtype=float32), Array(3., dtype=float32))
  """
  kwargs = dict(static_argnums=static_argnums, static_argnames=static_argnames,
                donate_argnums=donate_argnums, donate_states=donate_states,
                in_shardings=in_shardings, out_shardings=out_shardings)
  if fun is None:
    return lambda f: JittedFunction(f, **kwargs)
  return JittedFunction(fun, **kwargs)
