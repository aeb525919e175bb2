"""Eager ``bs.shard_map``: one cached ``jax.jit`` of the traced call per mesh.

Called at top level, a ``bs.shard_map``'d function runs as a
:class:`~brainshard._core.program.program.StatefulJit` (one per mesh and
axis rules) whose traced body is the planner's traced call, so repeated
calls re-run no Python and compile nothing new. Its States are the plan's,
its inputs are placed where the plan's specs say (``placement.py``), and a
State's buffer is donated only where it leaves with the layout it came in
with.
"""

from __future__ import annotations

from typing import Any

import jax

from brainshard._core.args import fun_name
from brainshard._core.program.program import StatefulJit
from brainshard._core.specs import same_spec
from brainshard._core.state.state import State
from brainshard._transforms.shard_map.placement import Placement
from brainshard._transforms.shard_map.plan import ShardPlanner

__all__ = ["eager_runner"]


def eager_runner(planner: ShardPlanner, mesh: Any) -> StatefulJit:
  """The compiled program that runs ``planner``'s function eagerly on
  ``mesh`` (a concrete mesh: an eager call places its inputs)."""
  if not isinstance(mesh, jax.sharding.Mesh):
    raise ValueError(
        f"{planner.name} was called eagerly with an abstract mesh {mesh}; "
        "pass a concrete jax.sharding.Mesh (e.g. from jax.make_mesh).")

  def run(*args, **kwargs):
    return planner.run(mesh, args, kwargs)

  run.__name__ = run.__qualname__ = fun_name(planner.fun)

  def discover(args, kwargs):
    plan = planner.plan(mesh, args, kwargs)
    return plan.reads, plan.writes

  def can_donate(state: State) -> bool:
    # A buffer is reusable only where the state leaves with the layout it
    # came in with.
    for key, plan in planner.plans.items():
      if key.mesh is mesh or key.mesh == mesh:
        out_specs = plan.write_specs.get(id(state))
        in_specs = plan.read_specs.get(id(state))
        if out_specs is not None and in_specs is not None and not all(
            map(same_spec, in_specs, out_specs)):
          return False
    return True

  placement = Placement(planner, mesh)
  return StatefulJit(run, planner.name, discover=discover,
                     static=planner.static, place=placement.place,
                     place_targets=placement.fast_targets,
                     can_donate=can_donate)
