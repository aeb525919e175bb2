"""``bs.jit``: compile a function that reads and writes States.

A thin layer over the core: a :class:`~brainshard._core.discovery.
DiscoveryCache` finds the states on the first call, and a
:class:`~brainshard._core.program.program.StatefulJit` compiles and calls the
program (one ``jax.jit`` of a pure function, see program.py). ``jax.jit``
re-traces by itself when avals or static arguments change; a trace that
touches new states grows the program and the call is retried.
"""

from __future__ import annotations

import functools
import inspect
import operator
import weakref
from typing import Any, Callable, Sequence

import jax

from brainshard._core.args import (
    StaticArgs, copy_metadata, fun_name, normalize_argnums)
from brainshard._core.discovery import DiscoveryCache
from brainshard._core.program.program import Program, StatefulJit

__all__ = ["jit", "JittedFunction", "Lowered", "Compiled"]


class JittedFunction:
  """The result of :func:`jit`: call it like the function it wraps."""

  def __init__(self, fun: Callable, *, static_argnums=(), static_argnames=(),
               donate_argnums=(), donate_states: bool | str = "auto",
               in_shardings=None, out_shardings=None,
               static: StaticArgs | None = None, name: str | None = None):
    self.fun = fun
    self._given_name = name
    self.name = f"bs.jit({name or fun_name(fun)})"
    self.static = static or StaticArgs(fun, static_argnums, static_argnames,
                                       owner=self.name)
    self.static_argnums = self.static.argnums
    self.static_argnames = self.static.argnames
    self.donate_argnums = _check_donate_argnums(self.name, donate_argnums)
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
    self.stateful = DiscoveryCache(fun, name=self.name, static=self.static)
    self._core = StatefulJit(
        fun, self.name, stateful=self.stateful,
        donate_argnums=self.donate_argnums, donate_states=core_donate,
        jit_kwargs=_sharding_kwargs(
            self.name, _one_sharding_per_argument(self, in_shardings),
            out_shardings))
    self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    copy_metadata(self, fun)
    # Calling the object calls the core's current entry (the plan's
    # generated call, _core/program/fastcall.py) with no frame of ours between:
    # Python looks ``__call__`` up on the type, so each object gets a type
    # of its own whose ``__call__`` is that entry, replaced when the plan
    # changes. Measured here, a staticmethod there costs half of a property
    # that fetches ``self._core.entry`` on every call.
    cls = type(self)
    self.__class__ = own = type(cls.__name__, (cls,), dict(
        __slots__=(), __module__=cls.__module__, __qualname__=cls.__qualname__))
    self._core.on_entry = functools.partial(_set_call, own)
    _set_call(own, self._core.entry)

  # An object whose type is JittedFunction itself (made without __init__,
  # so without a type of its own): the core's entry, fetched per call.
  __call__ = property(operator.attrgetter("_core.entry"))

  def __get__(self, instance, owner=None):
    if instance is None:
      return self
    try:
      bound = self._bound.get(instance)
    except TypeError:  # unhashable instance: cache in its __dict__
      bound = instance.__dict__.get(self._dict_key)
    if bound is None:
      method = functools.partial(self.fun, instance)
      bound = JittedFunction(
          method, static=self.static.shifted_for_self(method),
          donate_argnums=tuple(i - 1 for i in self.donate_argnums if i > 0),
          donate_states=self.donate_states, in_shardings=self.in_shardings,
          out_shardings=self.out_shardings, name=self._given_name)
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

  def clear_cache(self) -> None:
    """Forgets this function's discoveries and compiled program: the next
    call discovers its States and compiles again (``bs.clear_caches()``
    does this for every function)."""
    self.stateful.clear_cache()
    self._core.clear()
    self._bound.clear()

  def with_program(self, args: tuple, kwargs: dict,
                   action: Callable[[Program], Any]) -> Any:
    """``action(program)`` on the compiled program for these arguments
    (discovered and grown as a call would), e.g. to inspect its inputs."""
    return self._core.with_program(args, kwargs, action)

  def call_source(self, *args, **kwargs) -> str:
    """The Python that calling this function runs around the compiled
    program: read the States' slots, choose what to donate, call, write the
    results back. It is generated for the States the function touches
    (_core/program/fastcall.py) and made again when that set grows; a
    traceback through a call shows its lines (``<generated call
    bs.jit(step)>``), and pdb steps through them. Before the first call,
    the States are found from a call with these arguments, traced, not run
    (as :meth:`lower` does).

    Example:
      >>> import brainshard as bs, jax.numpy as jnp
      >>> count = bs.State(jnp.int32(0), name='count')
      >>> def tick():
      ...   count.value += 1
      >>> source = bs.jit(tick).call_source()
      >>> print(source.splitlines()[0])     # made for a call without arguments
      def entry():
      >>> print(*[line.strip() for line in source.splitlines()
      ...         if "= donating_all(" in line])
      new = donating_all(count._value)
    """
    return self._core.with_program(args, kwargs, lambda p: p.source)

  def trace(self, *args, **kwargs) -> Any:
    """``jax.stages.Traced`` of the program for these arguments and the
    States' current values (its jaxpr takes the States' values first)."""
    def trace_program(program):
      _, jitted, jargs, jkwargs = program.prepare(args, kwargs)
      return jitted.trace(*jargs, **jkwargs)
    return self._core.with_program(args, kwargs, trace_program)

  def lower(self, *args, **kwargs) -> "Lowered":
    """Lowers for these arguments and the states' current values."""
    def lower_program(program):
      mask, jitted, jargs, jkwargs = program.prepare(args, kwargs)
      return Lowered(jitted.lower(*jargs, **jkwargs), program, mask)
    return self._core.with_program(args, kwargs, lower_program)

  def compile(self, *args, **kwargs) -> "Compiled":
    """``self.lower(*args, **kwargs).compile()`` (brainstate's
    ``jitted.compile(x)``)."""
    return self.lower(*args, **kwargs).compile()

  def __repr__(self) -> str:
    return f"<{self.name}>"


def _set_call(cls: type, entry: Callable) -> None:
  cls.__call__ = staticmethod(entry)


class Lowered:
  """``jax.stages.Lowered`` for a stateful function; ``.compile()`` it."""

  def __init__(self, lowered, plan: Program, mask: tuple[bool, ...]):
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

  def __init__(self, compiled, plan: Program, mask: tuple[bool, ...]):
    self._compiled = compiled
    self._plan = plan
    self._mask = mask

  def __call__(self, *args, **kwargs):
    return self._plan.call(args, kwargs, compiled=self._compiled,
                           fixed_mask=self._mask)

  def __getattr__(self, name):  # memory_analysis, as_text, ...
    return getattr(self._compiled, name)


def _check_donate_states(value: Any) -> bool | str:
  if value is True or value is False or (
      isinstance(value, str) and value == "auto"):
    return value
  raise ValueError(
      f"donate_states must be 'auto', True or False; got {value!r}.")


def _check_donate_argnums(name: str, donate_argnums: Any) -> tuple[int, ...]:
  nums = normalize_argnums(donate_argnums)
  # the program's arguments start with the States' values: a negative
  # position would count from the end into them
  if any(i < 0 for i in nums):
    raise ValueError(
        f"{name}: donate_argnums must be non-negative positions; got "
        f"{donate_argnums!r}.")
  return nums


def _one_sharding_per_argument(jf: JittedFunction, in_shardings: Any) -> Any:
  """As in ``jax.jit``, one Sharding stands for every positional argument;
  that needs a fixed number of them (no ``*args``)."""
  if not isinstance(in_shardings, jax.sharding.Sharding):
    return in_shardings
  try:
    params = inspect.signature(jf.fun).parameters.values()
  except (TypeError, ValueError):
    params = None
  if params is None or any(p.kind == p.VAR_POSITIONAL for p in params):
    raise TypeError(
        f"{jf.name}: one sharding as in_shardings needs a function with a "
        "fixed number of positional parameters; give a tuple with one entry "
        "per positional argument.")
  n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
          for p in params)
  return (in_shardings,) * (n - len(jf.static_argnums))


def _sharding_kwargs(name: str, in_shardings: Any, out_shardings: Any) -> dict:
  kw = {}
  if in_shardings is not None:
    if not isinstance(in_shardings, (tuple, list)):
      raise TypeError(
          f"{name}: in_shardings must be a Sharding (for every positional "
          "argument) or a tuple with one entry (a sharding, a pytree of them, "
          f"or None) per positional argument; got "
          f"{type(in_shardings).__name__}.")
    kw["in_shardings"] = tuple(in_shardings)  # Program prefixes the states
  if out_shardings is not None:
    kw["out_shardings"] = (out_shardings, None)
  return kw


def jit(fun: Callable | None = None, *,
        static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (),
        donate_argnums: int | Sequence[int] = (),
        donate_states: bool | str = "auto",
        in_shardings: Any = None,
        out_shardings: Any = None,
        name: str | None = None):
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
    in_shardings: None, one Sharding for every positional argument, or a
      tuple with one sharding (pytree) per positional argument; states keep
      the sharding they have.
    out_shardings: sharding(s) of the function's output.
    name: the name errors and the repr use (brainstate's ``name=``;
      default: the function's).

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
                in_shardings=in_shardings, out_shardings=out_shardings,
                name=name)
  if fun is None:
    return lambda f: JittedFunction(f, **kwargs)
  return JittedFunction(fun, **kwargs)
