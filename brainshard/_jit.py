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
import weakref
from typing import Any, Callable, Sequence

import jax
from jax.extend.core import jaxpr_as_fun

from brainshard._state import (
    _UNSET, Frame, State, current_signature, frame_stack, write_results)
from brainshard._stateful import (
    StatefulFunction, _normalize_argnames, _normalize_argnums, fun_name)

__all__ = ["jit", "JittedFunction", "StatefulJit", "ReplayFrame"]


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


def gather_values(states: Sequence[State], where: str) -> list[Any]:
  """Current values of ``states``: frame-aware, with a fast top-level path."""
  if frame_stack():
    return [s.value for s in states]
  values = [s._value for s in states]
  for s, v in zip(states, values):
    if v is _UNSET:
      s._global_value()  # raises the "created inside a transform" error
  return values


class _Plan:
  """One compiled pure function for a fixed set of read/written states."""

  def __init__(self, core: "StatefulJit", reads: Sequence[State],
               writes: Sequence[State]):
    self.core = core
    write_ids = {id(s) for s in writes}
    donate = core.donate_states
    self.donated = tuple(s for s in reads if donate and id(s) in write_ids)
    donated_ids = {id(s) for s in self.donated}
    self.kept = tuple(s for s in reads if id(s) not in donated_ids)
    self.writes = tuple(writes)
    self.reads = self.donated + self.kept

    def pure(donated_vals, kept_vals, *args, **kwargs):
      return self._pure(donated_vals, kept_vals, *args, **kwargs)

    pure.__name__ = pure.__qualname__ = fun_name(core.fun)
    self.jitted = jax.jit(
        pure,
        static_argnums=tuple(i + 2 if i >= 0 else i for i in core.static_argnums),
        static_argnames=core.static_argnames,
        donate_argnums=((0,) if self.donated else ()) + tuple(
            i + 2 for i in core.donate_argnums),
        **core.jit_kwargs)

  def _pure(self, donated_vals, kept_vals, *args, **kwargs):
    core = self.core
    if core.stateful is not None:
      replayed = self._replay_discovery(donated_vals, kept_vals, args, kwargs)
      if replayed is not None:
        return replayed
    frame = ReplayFrame(core.name)
    with frame:
      for s, v in zip(self.donated, donated_vals):
        frame.inject(s, v)
      for s, v in zip(self.kept, kept_vals):
        frame.inject(s, v)
      out = core.fun(*args, **kwargs)
      written = frame.written_states()
      known = {id(s) for s in self.writes}
      if frame.unknown_reads or any(id(s) not in known for s in written):
        raise _Rediscover(frame.input_states(), written)
      # A known write this trace skipped keeps the value it came in with.
      new_vals = [frame.read(s) for s in self.writes]
    return out, new_vals

  def _replay_discovery(self, donated_vals, kept_vals, args, kwargs):
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
    by_id = {id(s): v for s, v in zip(self.reads, [*donated_vals, *kept_vals])}
    read_leaves = jax.tree.leaves([by_id[id(s)] for s in d.read_states])
    outs = jaxpr_as_fun(d.jaxpr)(*split.dyn_leaves, *read_leaves)
    return jax.tree.unflatten(d.out_tree, outs)

  def jit_args(self, args, kwargs) -> tuple:
    """The positional and keyword arguments of ``self.jitted``."""
    where = self.core.name
    donated = gather_values(self.donated, where)
    kept = gather_values(self.kept, where)
    if self.core.place is not None:
      return self.core.place(self, donated, kept, args, kwargs)
    return (donated, kept, *args), kwargs

  def call(self, args, kwargs):
    jargs, jkwargs = self.jit_args(args, kwargs)
    out, new_vals = self.jitted(*jargs, **jkwargs)
    write_results(self.writes, new_vals, self.core.name)
    return out


class StatefulJit:
  """The cached core of stateful jit, shared by ``jit`` and ``shard_map``.

  Args:
    fun: the function to re-run under ``jax.jit``.
    name: used in errors, e.g. ``bs.jit(step)``.
    discover: ``(args, kwargs) -> (read_states, write_states)`` for the first
      call.
    place: optional ``(plan, donated, kept, args, kwargs) -> (jit_args,
      jit_kwargs)`` that puts inputs where the program expects them.
    stateful: the StatefulFunction whose cached discoveries ``jax.jit`` may
      evaluate instead of running the Python function again.
  """

  def __init__(self, fun: Callable, name: str, *,
               discover: Callable, static_argnums=(), static_argnames=(),
               donate_argnums=(), donate_states=False, jit_kwargs=None,
               place: Callable | None = None,
               stateful: StatefulFunction | None = None):
    self.fun = fun
    self.name = name
    self.discover = discover
    self.static_argnums = static_argnums
    self.static_argnames = static_argnames
    self.donate_argnums = donate_argnums
    self.donate_states = donate_states
    self.jit_kwargs = jit_kwargs or {}
    self.place = place
    self.stateful = stateful
    self.plan: _Plan | None = None

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
    writes = _union(old.writes, err.writes)
    reads = _union(old.reads, err.reads, writes)
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
    plan = self.plan
    if plan is not None:
      try:
        return plan.call(args, kwargs)
      except _Rediscover as err:
        self._grow(err)
    return self.with_plan(args, kwargs, lambda p: p.call(args, kwargs))


class JittedFunction:
  """The result of :func:`jit`: call it like the function it wraps."""

  def __init__(self, fun: Callable, *, static_argnums=(), static_argnames=(),
               donate_argnums=(), donate_states=False, in_shardings=None,
               out_shardings=None):
    self.fun = fun
    static_argnums, static_argnames = _resolve_static(
        fun, _normalize_argnums(static_argnums),
        _normalize_argnames(static_argnames))
    self.static_argnums = static_argnums
    self.static_argnames = static_argnames
    self.donate_argnums = _normalize_argnums(donate_argnums)
    self.donate_states = bool(donate_states)
    self.in_shardings = in_shardings
    self.out_shardings = out_shardings
    self.name = f"bs.jit({fun_name(fun)})"
    self.stateful = StatefulFunction(
        fun, static_argnums=static_argnums,
        static_argnames=static_argnames, name=self.name)
    self._core = StatefulJit(
        fun, self.name, discover=self._discover,
        static_argnums=static_argnums, static_argnames=static_argnames,
        donate_argnums=self.donate_argnums, donate_states=self.donate_states,
        jit_kwargs=_sharding_kwargs(self.name, in_shardings, out_shardings),
        stateful=self.stateful)
    self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    functools.update_wrapper(self, fun)

  def _discover(self, args, kwargs):
    d = self.stateful.discover(*args, **kwargs)
    return d.read_states, d.write_states

  def __call__(self, *args, **kwargs):
    return self._core(*args, **kwargs)

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
      jargs, jkwargs = plan.jit_args(args, kwargs)
      return Lowered(plan.jitted.lower(*jargs, **jkwargs), plan)
    return self._core.with_plan(args, kwargs, lower_plan)

  def __repr__(self) -> str:
    return f"<{self.name}>"


class Lowered:
  """``jax.stages.Lowered`` for a stateful function; ``.compile()`` it."""

  def __init__(self, lowered, plan: _Plan):
    self._lowered = lowered
    self._plan = plan

  def compile(self, *args, **kwargs) -> "Compiled":
    """Compiles; the result is called like the jitted function."""
    return Compiled(self._lowered.compile(*args, **kwargs), self._plan)

  def __getattr__(self, name):  # as_text, cost_analysis, ...
    return getattr(self._lowered, name)


class Compiled:
  """``jax.stages.Compiled`` for a stateful function: calling it reads and
  writes the States like the jitted function does."""

  def __init__(self, compiled, plan: _Plan):
    self._compiled = compiled
    self._plan = plan

  def __call__(self, *args, **kwargs):
    plan = self._plan
    jargs, jkwargs = plan.jit_args(args, kwargs)
    out, new_vals = self._compiled(*jargs, **jkwargs)
    write_results(plan.writes, new_vals, plan.core.name)
    return out

  def __getattr__(self, name):  # memory_analysis, as_text, ...
    return getattr(self._compiled, name)


def _union(*groups: Sequence[State]) -> tuple[State, ...]:
  seen: dict[int, State] = {}
  for group in groups:
    for s in group:
      seen.setdefault(id(s), s)
  return tuple(seen.values())


def _sharding_kwargs(name: str, in_shardings: Any, out_shardings: Any) -> dict:
  kw = {}
  if in_shardings is not None:
    if not isinstance(in_shardings, (tuple, list)):
      raise TypeError(
          f"{name}: in_shardings must be a tuple with one entry (a sharding, a "
          "pytree of them, or None) per positional argument; got "
          f"{type(in_shardings).__name__}.")
    kw["in_shardings"] = (None, None, *in_shardings)
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
        donate_states: bool = False,
        in_shardings: Any = None,
        out_shardings: Any = None):
  """Compiles ``fun``, threading every State it reads or writes.

  Reads see each State's current value on every call; writes persist. One
  trace and one compile per call signature, as with ``jax.jit``.

  Args:
    fun: the function; may close over States. Usable as ``@bs.jit``,
      ``@bs.jit(static_argnums=...)`` and on methods.
    static_argnums, static_argnames, donate_argnums: as in ``jax.jit``.
    donate_states: donate the old buffers of states that are read and written.
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
