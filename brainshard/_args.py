"""Static and dynamic arguments of a ``shard_map``-ed call.

Static arguments are hashable Python values that steer tracing (as in
``jax.jit``): they are part of cache keys and are closed over by the traced
function, so they take no spec. Only the dynamic arguments are split.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple, Sequence

from brainshard._jit import _resolve_static
from brainshard._stateful import (
    _normalize_argnames, _normalize_argnums, fun_name)

__all__ = ["Call", "split_call", "static_args", "check_kwarg_specs"]


class Call(NamedTuple):
  """One call's arguments, split into the static and the dynamic ones."""
  args: tuple      # dynamic positional arguments, in order
  kwargs: dict     # dynamic keyword arguments
  static: tuple    # ((position, value), ...), ((name, value), ...)

  def rebuild(self, args: Sequence[Any], kwargs: dict) -> tuple[tuple, dict]:
    """The full ``(args, kwargs)`` of the user function."""
    pos, named = self.static
    it = iter(args)
    fixed = dict(pos)
    full = [fixed[i] if i in fixed else next(it)
            for i in range(len(args) + len(fixed))]
    return tuple(full), {**kwargs, **dict(named)}


def split_call(args: tuple, kwargs: dict, static_argnums: tuple[int, ...],
               static_argnames: tuple[str, ...]) -> Call:
  """Separates static arguments (hashed into cache keys, closed over by the
  traced function) from dynamic ones (split per in_specs)."""
  n = len(args)
  pos = tuple((i, args[i]) for i in static_argnums if i < n)
  named = tuple(sorted((k, kwargs[k]) for k in static_argnames
                       if k in kwargs))
  if not pos and not named:
    return Call(args, kwargs, ((), ()))
  fixed = {i for i, _ in pos}
  return Call(tuple(a for i, a in enumerate(args) if i not in fixed),
              {k: v for k, v in kwargs.items() if k not in static_argnames},
              (pos, named))


def static_args(fun: Callable, nums: Any, names: Any
                ) -> tuple[tuple[int, ...], tuple[str, ...]]:
  """Static argnums/argnames completed from each other (as in ``jax.jit``),
  with negative argnums made non-negative from the function's signature."""
  nums, names = _resolve_static(fun, _normalize_argnums(nums),
                                _normalize_argnames(names))
  if any(i < 0 for i in nums):
    try:
      params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
      params = ()
    if any(p.kind == p.VAR_POSITIONAL for p in params) or not params:
      raise ValueError(
          f"bs.shard_map({fun_name(fun)}): negative static_argnums {nums} "
          "need a function with a fixed number of positional parameters; "
          "give non-negative positions.")
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in params)
    nums = tuple(sorted({i % n if i < 0 else i for i in nums}))
  return nums, names


def check_kwarg_specs(kwarg_specs: Any, static_argnames: tuple) -> dict:
  """Validates ``kwarg_specs`` ({name: spec pytree prefix}) up front."""
  if kwarg_specs is None:
    return {}
  if not isinstance(kwarg_specs, dict) or not all(
      isinstance(k, str) for k in kwarg_specs):
    raise TypeError(
        "kwarg_specs must be a dict {keyword argument name: PartitionSpec or "
        f"spec pytree prefix}}; got {kwarg_specs!r}.")
  static = sorted(set(kwarg_specs) & set(static_argnames))
  if static:
    raise ValueError(
        f"kwarg_specs names {static[0]!r}, which is a static argument; static "
        "arguments are Python values and take no spec.")
  return dict(kwarg_specs)
