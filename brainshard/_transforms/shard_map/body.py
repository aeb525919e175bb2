"""The functions a ``bs.shard_map``'s ``jax.shard_map`` maps.

Each takes ``(read_vals, dyn_args, dyn_kwargs)`` at per-shard shapes and
returns ``(out, written values)``. :func:`discovery_body` runs the user
function once in a :class:`DiscoveryShardFrame` to find its States;
:func:`plan_body` runs a plan: it evaluates the discovered body (in the
trace the plan was made for, so a first call runs the Python function once)
or replays the function in a :class:`ShardFrame`, and checks that each
written value can be stored under its out spec.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from brainshard._core import compat
from brainshard._core.args import Call, fun_name
from brainshard._core.discovery import Discovery, discover, evaluate
from brainshard._core.frames import replay
from brainshard._core.specs import spec_axes
from brainshard._transforms.shard_map.errors import explain_axis_error
from brainshard._transforms.shard_map.frames import (
    DiscoveryShardFrame, ShardFrame)

__all__ = ["discovery_body", "plan_body"]


def discovery_body(fun: Callable, name: str, call: Call,
                   frame: DiscoveryShardFrame,
                   found: list[Discovery]) -> Callable:
  """A body that discovers ``fun`` at the per-shard types of the real call
  (a State's block, cut from its whole value by ``frame``, becomes an
  input) and appends the :class:`Discovery` to ``found``; it maps to
  nothing."""
  manual = tuple(a for a, _ in frame.manual_axes)

  def body(read_vals, dyn_args, dyn_kwargs):
    leaves, treedef = jax.tree.flatten((dyn_args, dyn_kwargs))

    def run(*leaves):
      args, kwargs = call.unflatten(treedef, leaves)
      try:
        return fun(*args, **kwargs)
      except (AssertionError, NameError, ValueError) as e:
        # Here JAX's frames (which name the axis) are still in the
        # traceback; above, its filtering drops them.
        explain_axis_error(e, name, frame.mesh, manual)
        raise

    with frame:
      found.append(discover(run, leaves, name))
    return (), []
  return body


def plan_body(fun: Callable, name: str, mesh: Any, plan: Any, call: Call,
              manual_axes: tuple[tuple[str, int], ...],
              manual: frozenset | None, evaluated: bool,
              check_vma: bool) -> Callable:
  """The body of a call by ``plan``: its discovered body evaluated where
  ``evaluated``, else ``fun`` replayed in a :class:`ShardFrame`."""

  def body(read_vals, dyn_args, dyn_kwargs):
    if evaluated:
      out, new_vals = evaluate(
          plan.body, jax.tree.leaves((dyn_args, dyn_kwargs)), read_vals)
    else:
      args, kwargs = call.rebuild(dyn_args, dyn_kwargs)
      frame = ShardFrame(name, mesh, plan, manual_axes, manual)
      out, new_vals = replay(
          frame, fun, args, kwargs, zip(plan.reads, read_vals, strict=True),
          plan.writes, "inside shard_map")
    if check_vma:
      _check_storable(name, plan, new_vals, {a for a, _ in manual_axes})
    return out, new_vals
  body.__name__ = body.__qualname__ = fun_name(fun)
  return body


def _check_storable(name: str, plan: Any, new_vals: list[Any],
                    manual: set[str]) -> None:
  """Each written value must be one value under its out spec: it may vary
  only over the manual axes that spec splits it over."""
  for s, v in zip(plan.writes, new_vals, strict=True):
    for spec, x in zip(plan.write_specs[id(s)], jax.tree.leaves(v), strict=True):
      varying = compat.varying_axes(jax.typeof(x)) & manual
      missing = varying - set(spec_axes(spec))
      if missing:
        axis = sorted(missing)[0]
        raise ValueError(
            f"{name}: {s.label()} leaves with spec {spec}, but the "
            f"value written to it differs across mesh axis {axis!r} (it "
            "was computed from per-shard data), so it cannot be stored as "
            f"one value. Declare where it lives, e.g. state_out_specs="
            f"{{{s.name or 'state'}: P({axis!r})}} (and state_in_specs to "
            "match), or make it equal on every shard with jax.lax.psum or "
            f"pmean over {axis!r} (an all_gather result still counts as "
            "per-shard data; pass check_vma=False to store it).")
