"""The generated call's inline placement checks, as Python source.

A program whose States or arguments have a placement (``bs.jit`` under a
mesh, ``in_shardings``) checks, before its call, that each value already
sits where the program wants it: an attribute test per value instead of a
``device_put``. Anything not placed right takes the program's generic path,
which places it (_core/program/placement.py). ``fastcall`` inlines these
lines; a State named ``v`` in the generated source has its value in the local
``v_value`` and its target sharding in the global ``v_target`` (and
``v_short``, see :func:`short_spelling`).

Example:
  >>> import jax
  >>> from jax.sharding import NamedSharding, PartitionSpec as P
  >>> mesh = jax.make_mesh((1,), ("x",))
  >>> short_spelling(NamedSharding(mesh, P("x", None))).spec == P("x")
  True
"""

from __future__ import annotations

from typing import Any

from brainshard._core.program.generated import fill

__all__ = ["DERIVED", "TEMPLATES", "placement_checks", "place_and_call",
           "short_spelling"]

# The names made from a State's name in the generated source: the State
# itself, its value read into a local, its target shardings.
DERIVED = ("{}", "{}_value", "{}_target", "{}_short")

# A value not where the program wants it: the generic path places it. The
# locals go first, or its reference counts would see them.
MISPLACED = """\
if {misplaced}:
  {drop_values}
  return generic_call({passed})
"""

# One target for every positional argument (``in_shardings``).
ARGS_MISPLACED = """\
for arg in args:
  if type(arg) is not ArrayImpl or arg.sharding != args_target:
    del arg{and_values}
    return generic_call({passed})
"""

# The arguments put in place by a function of the placement.
PLACE_ARGS = """\
if args:
  args = place_args(args)
"""

# No inline check possible: the program's place() puts every input where
# it goes, on every call.
PLACE_AND_CALL = """\
cand_placed, rest_placed, args_placed, kwargs_placed = place(
    program, [{cand}], [{rest}], {passed})
new = jitted({states}*args_placed, **kwargs_placed)
"""

TEMPLATES = (MISPLACED, ARGS_MISPLACED, PLACE_ARGS, PLACE_AND_CALL)


def placement_checks(fast: tuple, ns: dict, names: list[str], passed: str,
                     takes_args: bool) -> str:
  """Inline "already placed right?" checks; anything else takes the generic
  path, which places (device_put) what needs it.

  ``fast`` is ``(state_targets, arg_targets, place_args)``: one target
  sharding per state of ``program.reads``, whose globals are ``names`` (and
  their values the locals ``{name}_value``); for positional arguments
  either one target for all, or None and a ``place_args(args) -> args``
  function. ``passed`` is what the fallback passes on as ``(args, kwargs)``;
  without ``takes_args`` the entry has no parameters and there are no
  arguments to check.
  """
  state_targets, arg_target, place_args = fast
  values = [f"{name}_value" for name in names]
  tests = []
  for name, value, target in zip(names, values, state_targets):
    if target is None:  # a state the placement leaves as it is
      continue
    ns[f"{name}_target"] = target
    test = (f"type({value}) is not ArrayImpl or "
            f"{value}.sharding != {name}_target")
    short = short_spelling(target)
    if short is not None:  # placed by hand as P(), not P(None, ...)
      ns[f"{name}_short"] = short
      test = f"{test} and {value}.sharding != {name}_short"
    tests.append(test)
  if takes_args:
    tests.append("kwargs")
  if not tests:
    return ""
  lines = [fill(MISPLACED, misplaced=" or ".join(tests), passed=passed,
                drop_values=f"del {', '.join(values)}" if values else "")]
  if takes_args and arg_target is not None:
    ns["args_target"] = arg_target
    lines.append(fill(ARGS_MISPLACED, passed=passed,
                      and_values="".join(f", {v}" for v in values)))
  elif takes_args and place_args is not None:
    ns["place_args"] = place_args
    lines.append(PLACE_ARGS)
  return "\n".join(lines)


def place_and_call(ns: dict, program: Any, cand: list[str], rest: list[str],
                   passed: str) -> str:
  """The call of a program whose placement has no inline check: its
  ``place`` first, then the call with what it returns."""
  ns.update(place=program.place, program=program)
  states = ["cand_placed" if program.packed else "*cand_placed"] + (
      ["rest_placed"] if program.has_rest else [])
  return fill(PLACE_AND_CALL, cand=", ".join(cand), rest=", ".join(rest),
              passed=passed, states="".join(f"{s}, " for s in states))


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
