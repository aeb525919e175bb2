"""Static and dynamic call arguments: the one split every transform uses.

Static arguments are hashable Python values that steer tracing (as in
``jax.jit``): they are part of cache keys and are closed over by the traced
function. Dynamic arguments are pytrees of arrays: they are flattened, their
avals keyed, and they become the traced function's inputs.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax

from brainshard._core.state.state import State

__all__ = ["StaticArgs", "Call", "fun_name", "program_name", "copy_metadata",
           "normalize_argnums", "normalize_argnames"]


def fun_name(fun: Callable) -> str:
  """The name errors and reprs use for a user function."""
  while hasattr(fun, "func") and hasattr(fun, "args"):  # functools.partial
    fun = fun.func
  return getattr(fun, "__qualname__", None) or getattr(fun, "__name__", repr(fun))


# JAX names a compiled program's file in the persistent compilation cache
# after it ("jit_<name>-<64 hex>-cache"): past ~190 characters the name is
# too long for a file system, and the program is not cached (a warning).
_MAX_PROGRAM_NAME = 100


def program_name(fun: Callable) -> str:
  """:func:`fun_name`, cut to a length the compilation cache can file
  (``bs.switch`` of nested local functions easily passes 200 characters).

  Example:
    >>> program_name(lambda: 0), len(program_name(type('f' * 300, (), {})))
    ('<lambda>', 100)
  """
  name = fun_name(fun)
  return name[:_MAX_PROGRAM_NAME]


_METADATA = ("__module__", "__name__", "__qualname__", "__doc__")


def copy_metadata(wrapper: Any, fun: Callable) -> None:
  """Gives a wrapper object ``fun``'s name, docstring and ``__wrapped__``.

  Unlike ``functools.update_wrapper`` it never copies ``fun.__dict__``: a
  ``jax.grad`` or ``functools.wraps`` function carries the attributes of the
  function *it* wraps there, and copying them would overwrite the wrapper's
  own (a ``bs.jit`` of ``jax.grad(bs.jit(f))`` would then call ``f``).
  """
  for attr in _METADATA:
    try:
      setattr(wrapper, attr, getattr(fun, attr))
    except (AttributeError, TypeError):  # absent, or read-only here
      pass
  wrapper.__wrapped__ = fun


def normalize_argnums(argnums: int | Sequence[int]) -> tuple[int, ...]:
  return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def normalize_argnames(argnames: str | Sequence[str]) -> tuple[str, ...]:
  return (argnames,) if isinstance(argnames, str) else tuple(argnames)


class Call(NamedTuple):
  """One call's arguments, split into the static and the dynamic ones."""
  args: tuple      # dynamic positional arguments, in order
  kwargs: dict     # dynamic keyword arguments
  static: tuple    # (((position, value), ...), ((name, value), ...))

  def rebuild(self, args: Sequence[Any], kwargs: dict) -> tuple[tuple, dict]:
    """The full ``(args, kwargs)`` of the user function, given new dynamic
    ones (e.g. tracers or per-shard values)."""
    pos, named = self.static
    if not pos and not named:
      return tuple(args), kwargs
    it = iter(args)
    fixed = dict(pos)
    full = [fixed[i] if i in fixed else next(it)
            for i in range(len(args) + len(fixed))]
    return tuple(full), {**kwargs, **dict(named)}

  def flat(self) -> tuple[list, Any]:
    """The leaves of the dynamic arguments and their treedef."""
    return jax.tree.flatten((self.args, self.kwargs))

  def unflatten(self, treedef: Any, leaves: Sequence[Any]) -> tuple[tuple, dict]:
    """The full user arguments with the dynamic leaves replaced."""
    args, kwargs = jax.tree.unflatten(treedef, list(leaves))
    return self.rebuild(args, kwargs)


class StaticArgs:
  """A function's static argument positions and names, completed from each
  other as ``jax.jit`` does (so a static argument may be passed by position
  or by keyword), with negative positions made non-negative where the
  function has a fixed number of positional parameters."""

  def __init__(self, fun: Callable, argnums: int | Sequence[int] = (),
               argnames: str | Sequence[str] = (), *, owner: str = ""):
    nums = normalize_argnums(argnums)
    names = normalize_argnames(argnames)
    self.owner = owner or fun_name(fun)
    try:
      params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
      params = None
    if params is not None:
      positional = [p.name for p in params if p.kind in (
          p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
      fixed = not any(p.kind == p.VAR_POSITIONAL for p in params)
      n = len(positional)
      if fixed:
        nums = tuple(i % n if -n <= i < 0 else i for i in nums)
      nums = tuple(set(nums) | {positional.index(a) for a in names
                                if a in positional})
      names = tuple(set(names) | {positional[i] for i in nums
                                  if -n <= i < n})
    self.argnums = tuple(sorted(nums))
    self.argnames = tuple(sorted(names))

  def __bool__(self) -> bool:
    return bool(self.argnums or self.argnames)

  def shifted_for_self(self, fun: Callable) -> "StaticArgs":
    """The static arguments of ``fun`` bound to an instance (a method)."""
    nums = tuple(i - 1 if i > 0 else i for i in self.argnums if i != 0)
    return StaticArgs(fun, nums, self.argnames, owner=self.owner)

  def split(self, args: tuple, kwargs: dict) -> Call:
    """Separates static arguments from dynamic ones. Passing a State as an
    argument is an error (States are closed over, not passed)."""
    n = len(args)
    names = self.argnames
    pos = tuple((i % n, args[i]) for i in self.argnums if -n <= i < n)
    named = tuple(sorted((k, kwargs[k]) for k in names if k in kwargs))
    if not pos and not named:
      call = Call(args, kwargs, ((), ()))
    else:
      at = {i for i, _ in pos}
      call = Call(tuple(a for i, a in enumerate(args) if i not in at),
                  {k: v for k, v in kwargs.items() if k not in names},
                  (tuple(sorted(pos)), named))
    return call

  def key(self, call: Call) -> tuple[Hashable, list, Any]:
    """``(cache key, dynamic leaves, treedef)`` of a split call: the static
    values, the treedef and the avals of the dynamic leaves."""
    leaves, treedef = call.flat()
    for leaf in leaves:
      if isinstance(leaf, State):
        raise TypeError(
            f"{self.owner} was passed {leaf.label()} as an argument. States "
            "are not arguments: close over the State in the function (read "
            "`state.value` inside it) and brainshard threads it through the "
            "transform.")
    key = (call.static, treedef, tuple(map(jax.typeof, leaves)))
    try:
      hash(key)
    except TypeError as e:
      raise TypeError(
          f"{self.owner}: static arguments must be hashable and the other "
          f"arguments pytrees of arrays ({e}).") from None
    return key, leaves, treedef
