"""The generated call's inline placement checks, as Python source.

A program whose States or arguments have a placement (``bs.jit`` under a
mesh, ``in_shardings``) checks, before its call, that each value already
sits where the program wants it: an attribute test per value instead of a
``device_put``. Anything not placed right takes the program's generic path,
which places it (_core/program/placement.py). ``fastcall`` inlines these lines.

Example:
  >>> import jax
  >>> from jax.sharding import NamedSharding, PartitionSpec as P
  >>> mesh = jax.make_mesh((1,), ("x",))
  >>> short_spelling(NamedSharding(mesh, P("x", None))).spec == P("x")
  True
"""

from __future__ import annotations

from typing import Any

__all__ = ["placement_checks", "short_spelling"]


def placement_checks(fast: tuple, ns: dict, local_names: list[str],
                      generic: str, takes_args: bool) -> list[str]:
  """Inline "already placed right?" checks; anything else takes the generic
  path, which places (device_put) what needs it.

  ``fast`` is ``(state_targets, arg_targets, place_args)``: one target
  sharding per state of ``program.reads``; for positional arguments either one
  target for all, or None and a ``place_args(args) -> args`` function.
  ``generic`` is the fallback call; without ``takes_args`` the entry has no
  parameters and there are no arguments to check.
  """
  state_targets, arg_target, place_args = fast
  tests = []
  for i, (name, target) in enumerate(zip(local_names, state_targets)):
    if target is None:  # a state the placement leaves as it is
      continue
    ns[f"T{i}"] = target
    test = f"type({name}) is not _Array or {name}.sharding != T{i}"
    short = short_spelling(target)
    if short is not None:  # placed by hand as P(), not P(None, ...)
      ns[f"S{i}"] = short
      test = f"{test} and {name}.sharding != S{i}"
    tests.append(test)
  if takes_args:
    tests.append("kwargs")
  if not tests:
    return []
  lines = [f"if {' or '.join(tests)}:"]
  if local_names:
    lines += [f"  del {', '.join(local_names)}"]
  lines += [f"  return {generic}"]
  if not takes_args:
    return lines
  if arg_target is not None:
    ns["TA"] = arg_target
    lines += ["for a in args:",
              "  if type(a) is not _Array or a.sharding != TA:",
              "    del a" + "".join(f", {n}" for n in local_names),
              f"    return {generic}"]
  elif place_args is not None:
    ns["_place_args"] = place_args
    lines += ["if args:", "  args = _place_args(args)"]
  return lines


def short_spelling(target: Any) -> Any:
  """``target`` spelled without trailing Nones (P('x') for P('x', None)),
  or None where that is the same spelling or ``target`` is not a
  NamedSharding. JAX spells outputs full-rank, ``bs.place`` and
  ``device_put(x, NamedSharding(mesh, P()))`` short: both must pass the
  inline check, or a State placed by hand would take the generic path on
  every call."""
  spec = getattr(target, "spec", None)
  if spec is None or not spec or spec[-1] is not None:
    return None
  entries = list(spec)
  while entries and entries[-1] is None:
    entries.pop()
  return type(target)(target.mesh, type(spec)(*entries))
