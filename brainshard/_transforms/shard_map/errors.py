"""Explaining errors JAX raises while a ``bs.shard_map`` body is traced.

JAX reports them at per-shard types and names nothing of the caller's: a
collective over an axis the mesh lacks is a bare ``AssertionError`` (or
``unbound axis name``), a wrong argument shape is ``add got incompatible
shapes for broadcasting: (8,), (16,)``, a ``state_out_specs`` mistake reads
as a wrong write. These helpers re-raise such errors with what was meant:
the argument or State, its global shape, its spec, the mesh axes, the
per-shard shape, and the fix. JAX's own words stay at the start of the
message; an error that is not one of these passes through unchanged.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import jax
from jax.sharding import PartitionSpec as P

from brainshard._core import compat
from brainshard._core.specs import manual_spec, shard_aval
from brainshard._core.state.state import State
from brainshard._core.state.values import describe_signature

__all__ = ["explain_axis_error", "explain_plan_error", "explain_shape_error",
           "explain_write", "input_rows"]


def _with_message(e: Exception, message: str, cls: type | None = None):
  """``e`` as ``cls`` (default its own type) with ``message``, keeping the
  traceback that points at the user's line."""
  cls = cls or type(e)
  try:
    new = cls(message)
  except TypeError:  # an exception type with another signature
    e.add_note(message[len(str(e)):].strip())
    return e
  return new.with_traceback(e.__traceback__)


def _mesh_text(mesh: Any) -> str:
  return f"{tuple(mesh.axis_names)} (shape {dict(mesh.shape)})"


# -- collectives over axes the mesh lacks -------------------------------------


def explain_axis_error(e: Exception, name: str, mesh: Any,
                       manual: Sequence[str]) -> None:
  """Re-raises a collective's error over a mesh axis this shard_map lacks
  (JAX: an empty ``AssertionError``, or ``NameError: unbound axis name``)
  as one that names the axis, the mesh's axes and the fix."""
  if not isinstance(e, (AssertionError, NameError, ValueError)):
    return
  named = set(re.findall(r"unbound axis name: (\w+)", str(e)))
  if isinstance(e, AssertionError) or "axis_name" in str(e):
    named |= compat.collective_axis_names(e)
  unknown = sorted(a for a in named if a not in manual)
  if not unknown:
    return
  where = ("the mesh has no such axis" if unknown[0] not in mesh.axis_names
           else "it is not one of this shard_map's manual axes (axis_names)")
  message = (
      f"{e}\n\n{name}: a collective in the function (jax.lax.psum, pmean, "
      f"all_gather, ppermute, axis_index, ...) names mesh axis "
      f"{unknown[0]!r}, but {where}. The mesh has axes {_mesh_text(mesh)}; "
      f"inside this shard_map collectives may name {tuple(manual)}. Use one "
      f"of those (e.g. jax.lax.psum(x, {tuple(manual)[0]!r})), or pass a "
      f"mesh that has axis {unknown[0]!r}.").lstrip()
  raise _with_message(e, message, ValueError if isinstance(
      e, AssertionError) else None) from None


# -- per-shard shapes that do not fit -----------------------------------------


def input_rows(mesh: Any, manual: frozenset | None, args: Any,
                arg_specs: Sequence[Sequence[P]], kwargs: dict,
                kwarg_specs: dict, touched) -> list[tuple[str, str, Any]]:
  """``(who, 'global ... spec ... per shard ...', per-shard shape, split)``
  for every argument leaf and every State the body touched."""
  rows = []

  def add(who, aval, spec, which):
    block = shard_aval(aval, manual_spec(spec, manual), mesh)
    rows.append((who, f"{_short(aval)}, {which} {spec} -> per shard "
                      f"{_short(block)}", tuple(block.shape),
                 block.shape != aval.shape))
  for i, (arg, specs) in enumerate(zip(args, arg_specs)):
    for (path, leaf), spec in zip(
        jax.tree_util.tree_flatten_with_path(arg)[0], specs):
      add(f"positional argument {i}{jax.tree_util.keystr(path)}",
          jax.typeof(leaf), spec, "in_specs")
  for k, v in kwargs.items():
    for (path, leaf), spec in zip(
        jax.tree_util.tree_flatten_with_path(v)[0], kwarg_specs[k]):
      add(f"keyword argument {k!r}{jax.tree_util.keystr(path)}",
          jax.typeof(leaf), spec, "kwarg_specs")
  for state, specs, sig in touched:
    for aval, spec in zip(sig[1], specs):
      add(state.label(), aval, spec, "state_in_specs")
  return rows


def _short(aval: Any) -> str:
  return re.sub(r"\{V:[^}]*\}", "", compat.ShapedArray(
      aval.shape, aval.dtype).str_short())


def _mentioned(shape: tuple, message: str) -> bool:
  if not shape:
    return False  # "()" is too common to mean a scalar input
  return (str(shape) in message
          or f"[{','.join(map(str, shape))}]" in message)


_SHAPE_ERRORS = ("requires contracting dimensions to have the same shape",
                 "cannot reshape array of shape")


def explain_shape_error(e: Exception, name: str, mesh: Any,
                        manual_axes: Sequence[str], rows, touched) -> None:
  """Re-raises a shape error met at per-shard types with the inputs whose
  per-shard shapes it mentions (global shape, spec, per-shard shape), and
  for replicated States meeting split data, how to declare their spec.
  ``rows`` come from :func:`input_rows`; ``touched`` is ``(state, specs,
  signature)`` per State the body read."""
  message = str(e)
  # JAX's shape errors; a user's own exception arrives exactly as raised.
  clash = "broadcast" in message or "incompatible shapes" in message.lower()
  if not clash and not any(m in message for m in _SHAPE_ERRORS):
    return
  replicated = [(s, sig) for s, specs, sig in touched
                if all(len(p) == 0 for p in specs)
                and any(a.shape and str(tuple(a.shape)) in message
                        for a in sig[1])] if clash else []
  mentioned = [row for row in rows if _mentioned(row[2], message)]
  # Only where a split input is involved do per-shard shapes explain it;
  # then every input is listed, or those the message names if many.
  shown = rows if len(rows) <= 8 else mentioned
  listed = [(who, text) for who, text, _, _ in shown] if any(
      split for *_, split in mentioned) else []
  if not listed and not replicated:
    return
  parts = [message]
  if replicated:
    names = ", ".join(f"{s.label()} ({describe_signature(sig)})"
                      for s, sig in replicated)
    example = replicated[0][0].name or "state"
    parts.append(
        f"{name} runs the function on per-shard values. These states were "
        f"read replicated (whole on every shard, spec P()): {names}. If a "
        "state should be split across the mesh like the data, declare it: "
        f"state_in_specs={{{example}: P({manual_axes[0]!r})}} (or give the "
        "State a spec= or axes=).")
  if listed:
    lines = "\n".join(f"  {who}: {text}" for who, text in listed)
    parts.append(
        f"{name} splits its inputs over mesh axes {_mesh_text(mesh)}; the "
        f"shapes above are per shard:\n{lines}\nA per-shard shape is the "
        "global shape divided along each dimension its spec splits: check "
        "that each argument has the global shape you meant (the shape of "
        "the State or argument it meets), and that each spec splits the "
        "dimension you meant.")
  raise _with_message(e, "\n\n".join(parts)) from None


# -- writes that do not fit state_out_specs -----------------------------------


def explain_write(e: ValueError, name: str, state: State, sig: Any,
                  in_specs: Sequence[P], out_specs: Sequence[P], mesh: Any,
                  manual: frozenset | None) -> None:
  """Re-raises a wrong-shape write to a State whose ``state_out_specs``
  differ from how it came in, pointing at that spec."""
  changed = [(a, b, aval) for a, b, aval in zip(in_specs, out_specs, sig[1])
             if a != b]
  if not changed:
    return
  spec_in, spec_out, aval = changed[0]
  block_in = shard_aval(aval, manual_spec(spec_in, manual), mesh)
  block_out = shard_aval(aval, manual_spec(spec_out, manual), mesh)
  label = state.name or "state"
  raise _with_message(e, (
      f"{e}\n\n{state.label()} ({_short(aval)}) leaves {name} with "
      f"state_out_specs {spec_out}, so each shard must write its block of "
      f"that spec, {_short(block_out)}; its state_in_specs is {spec_in}, whose "
      f"block is {_short(block_in)}. If it should leave as it came, drop "
      f"it from state_out_specs (or set {{{label}: {spec_in}}}); to store "
      f"it as {spec_out}, write that block (e.g. gather the shards' values "
      "with jax.lax.all_gather(..., tiled=True)).")) from None


# -- a plan's discovery trace ---------------------------------------------------


def explain_plan_error(e: Exception, name: str, mesh: Any,
                       manual_axes: Sequence[str], manual: frozenset | None,
                       call: Any, arg_specs: list, kwarg_specs: dict,
                       touched) -> None:
  """Re-raises an error of the trace that discovers a plan: a write that
  does not fit a State's ``state_out_specs``, or a per-shard shape error,
  naming the inputs and specs involved. ``touched`` is ``(state, in specs,
  out specs or None, signature)`` per State the trace met."""
  for s, specs, out, sig in touched:
    if out is not None and f"{s.label()} holds " in str(e):
      # frames.py's wrong-write error (the write's out specs were resolved
      # before it was checked)
      explain_write(e, name, s, sig, specs, out, mesh, manual)
  touched = [(s, specs, sig) for s, specs, _, sig in touched]
  rows = input_rows(mesh, manual, call.args, arg_specs, call.kwargs,
                    kwarg_specs, touched)
  explain_shape_error(e, name, mesh, manual_axes, rows, touched)
