"""State-aware ``shard_map``.

The user function is re-run inside ``jax.shard_map`` at per-shard shapes:
the per-shard values of the states it reads are injected into a frame, and
the values it writes are collected and returned as extra outputs. Which
states it touches is found by a discovery trace that also runs the function
inside ``jax.shard_map``, so per-shard shapes and varying axes are those of
the real call.

Called eagerly, the whole thing runs under one cached ``jax.jit`` per mesh
(see :class:`~brainshard._core.program.program.StatefulJit`), so repeated calls re-run no
Python and compile nothing new. Called under another brainshard transform, it
emits ``jax.shard_map`` into that trace.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core import compat
from brainshard._core.args import Call, StaticArgs, copy_metadata, fun_name
from brainshard._core.axes import (
    Rules, current_rules, freeze_rules, merged_rules, using_rules)
from brainshard._core.caches import Cache
from brainshard._core.discovery import evaluate
from brainshard._core.frames import (
    current_signature, gather_values, replay, write_results)
from brainshard._core.program.placement import PlacementHint
from brainshard._core.program.program import StatefulJit
from brainshard._core.specs import (
    StateSpecs, check_kwarg_specs, check_spec, check_state_specs_arg,
    has_explicit_axes, manual_spec, same_spec, spec_axes)
from brainshard._core.state.state import State
from brainshard._core.threads import thread_frames
from brainshard._transforms.shard_map.frames import ShardFrame, reshard
from brainshard._transforms.shard_map.placement import Placement
from brainshard._transforms.shard_map.plan import Plan, ShardPlanner, spec_tree

__all__ = ["shard_map", "ShardMappedFunction"]


class ShardMappedFunction:
  """The result of :func:`shard_map`: call it like the function it wraps."""

  def __init__(self, fun: Callable, mesh: Any, in_specs: Any, out_specs: Any,
               state_in_specs: StateSpecs, state_out_specs: StateSpecs,
               axis_names: frozenset, check_vma: bool,
               static_argnums: Any = (), static_argnames: Any = (),
               kwarg_specs: dict | None = None, axis_rules: Any = None):
    check_state_specs_arg(state_in_specs, "state_in_specs")
    check_state_specs_arg(state_out_specs, "state_out_specs")
    if not (in_specs is None or isinstance(in_specs, (P, tuple, list))):
      raise TypeError(
          "in_specs must be None, a PartitionSpec, or a tuple with one entry "
          f"per positional argument; got {type(in_specs).__name__}.")
    self.name = f"bs.shard_map({fun_name(fun)})"
    self.static = StaticArgs(fun, static_argnums, static_argnames,
                             owner=self.name)
    self.static_argnums = self.static.argnums
    self.static_argnames = self.static.argnames
    self.kwarg_specs = check_kwarg_specs(kwarg_specs, self.static_argnames)
    self.axis_rules = freeze_rules(axis_rules)
    self.fun = fun
    self.mesh = mesh
    self.in_specs = in_specs
    self.out_specs = out_specs
    self.state_in_specs = state_in_specs
    self.state_out_specs = state_out_specs
    self.axis_names = frozenset(axis_names)
    self.check_vma = check_vma
    self.planner = ShardPlanner(
        fun, self.name, mesh, in_specs, self.kwarg_specs, state_in_specs,
        state_out_specs, self.axis_names, self.static, self._map)
    self._eager: Cache = Cache()
    copy_metadata(self, fun)

  def __repr__(self) -> str:
    mesh = "from jax.set_mesh" if self.mesh is None else dict(self.mesh.shape)
    return f"<{self.name} mesh={mesh}>"

  # -- calling --------------------------------------------------------------

  @compat.api_boundary
  def __call__(self, *args, **kwargs):
    # Logical-axis rules are read while planning, so the rules this call
    # sees are part of every cache key (the eager runner's included).
    rules = current_rules()
    if self.axis_rules:
      rules = merged_rules(rules, self.axis_rules)
      with using_rules(rules):
        return self._call(rules, args, kwargs)
    return self._call(rules, args, kwargs)

  def _call(self, rules: Rules, args: tuple, kwargs: dict) -> Any:
    mesh = self.mesh if self.mesh is not None else self.planner.resolve_mesh()
    if thread_frames.stack or not compat.at_top_level():
      return self._traced_call(mesh, args, kwargs)
    self.planner.take_fresh(None)  # a plan left by a failed call is stale
    runner = self._eager.get((mesh, rules))
    if runner is None:
      runner = self._eager[(mesh, rules)] = self._eager_runner(mesh)
    return runner.entry(*args, **kwargs)

  def _eager_runner(self, mesh: Any) -> StatefulJit:
    if not isinstance(mesh, jax.sharding.Mesh):
      raise ValueError(
          f"{self.name} was called eagerly with an abstract mesh {mesh}; pass "
          "a concrete jax.sharding.Mesh (e.g. from jax.make_mesh).")

    def run(*args, **kwargs):
      return self._traced_call(mesh, args, kwargs)

    run.__name__ = run.__qualname__ = fun_name(self.fun)

    def discover(args, kwargs):
      plan = self.planner.plan(mesh, args, kwargs)
      return plan.reads, plan.writes

    def can_donate(state: State) -> bool:
      # A buffer is reusable only where the state leaves with the layout it
      # came in with.
      for key, plan in self.planner.plans.items():
        if key.mesh is mesh or key.mesh == mesh:
          out_specs = plan.write_specs.get(id(state))
          in_specs = plan.read_specs.get(id(state))
          if out_specs is not None and in_specs is not None and not all(
              map(same_spec, in_specs, out_specs)):
            return False
      return True

    placement = Placement(self, mesh)
    return StatefulJit(run, self.name, discover=discover,
                       static=self.static,
                       place=placement.place,
                       place_targets=placement.fast_targets,
                       can_donate=can_donate)

  # -- the traced call ------------------------------------------------------

  def _traced_call(self, mesh: Any, args: tuple, kwargs: dict) -> Any:
    call = self.static.split(args, kwargs)
    plan = self.planner.plan_call(mesh, call)
    # Only the trace a plan was made for may evaluate its discovered body: a
    # later trace may see other globals, another enclosing transform or
    # traced closures, so it runs the Python body again.
    fresh = self.planner.take_fresh(plan)
    if thread_frames.stack and isinstance(mesh, jax.sharding.Mesh):
      self._hint_placements(mesh, plan)
    read_vals = gather_values(plan.reads, self.name)
    # The states' values may have changed shape since planning.
    for s, v in zip(plan.reads, read_vals, strict=True):
      leaves = jax.tree.leaves(v)
      for spec, x in zip(plan.read_specs[id(s)], leaves, strict=True):
        check_spec(spec, jax.typeof(x).shape, mesh,
                   f"{self.name}: {s.label()}, state_in_specs {spec}")
    read_spec_trees = [
        spec_tree(jax.tree.structure(v), plan.read_specs[id(s)])
        for s, v in zip(plan.reads, read_vals, strict=True)]
    write_spec_trees = [
        spec_tree(current_signature(s)[0], plan.write_specs[id(s)])
        for s in plan.writes]
    out, new_vals = self._map(
        mesh, self._body(mesh, plan, call, fresh), call, plan.arg_specs,
        plan.kwarg_specs, read_vals, read_spec_trees,
        (self.out_specs, write_spec_trees))
    write_results(list(plan.writes), new_vals, self.name)
    return out

  def _hint_placements(self, mesh: Any, plan: Plan) -> None:
    """Tells the enclosing discoveries where each state is read and left,
    so the compiled program's inputs can be placed there up front."""
    frame = thread_frames.stack[-1]
    for s in plan.reads:
      out = plan.write_specs.get(id(s))
      frame.hint_placement(s, PlacementHint(
          tuple(NamedSharding(mesh, p) for p in plan.read_specs[id(s)]),
          None if out is None else tuple(NamedSharding(mesh, p) for p in out)))

  def _map(self, mesh: Any, body: Callable, call: Call,
           arg_specs: list[list[P]], kwarg_specs: dict[str, list[P]],
           read_vals: list[Any], read_spec_trees: list[Any],
           out_specs: Any) -> Any:
    """``jax.shard_map(body)(read_vals, dynamic args, dynamic kwargs)``.

    State specs are where the states live (global layouts); under a
    partially manual shard_map only their manual part goes to JAX. In
    Explicit mode, inputs whose sharding type differs are resharded first.
    """
    manual = self.planner.manual(mesh)
    arg_spec_trees = tuple(
        spec_tree(jax.tree.structure(a), specs)
        for a, specs in zip(call.args, arg_specs))
    kwarg_spec_trees = {
        k: spec_tree(jax.tree.structure(v), kwarg_specs[k])
        for k, v in call.kwargs.items()}
    dyn_args, dyn_kwargs = call.args, call.kwargs
    if has_explicit_axes(mesh):
      read_vals = [reshard(v, t, mesh, manual)
                   for v, t in zip(read_vals, read_spec_trees, strict=True)]
      dyn_args = tuple(reshard(a, t, mesh, manual)
                       for a, t in zip(dyn_args, arg_spec_trees, strict=True))
      dyn_kwargs = reshard(dyn_kwargs, kwarg_spec_trees, mesh, manual)

    def sm(tree):  # shard_map specs name only the manual axes
      if manual is None:
        return tree
      return jax.tree.map(lambda s: manual_spec(s, manual), tree,
                          is_leaf=lambda x: isinstance(x, P))

    out_user, out_states = out_specs
    mapped = jax.shard_map(
        body, mesh=mesh,
        in_specs=(sm(read_spec_trees), arg_spec_trees, kwarg_spec_trees),
        out_specs=(out_user, sm(out_states)),
        axis_names=set(manual) if manual is not None else set(),
        check_vma=self.check_vma)
    return mapped(read_vals, dyn_args, dyn_kwargs)

  def _body(self, mesh: Any, plan: Plan, call: Call, fresh: bool) -> Callable:
    axes = tuple((a, mesh.shape[a]) for a in self.planner.manual_axes(mesh))
    # In the trace the plan was just made for, its discovered body is
    # evaluated, so a first call runs the Python function once; any other
    # trace replays the function.
    evaluated = fresh and plan.body_is_usable()

    def body(read_vals, dyn_args, dyn_kwargs):
      if evaluated:
        out, new_vals = evaluate(
            plan.body, jax.tree.leaves((dyn_args, dyn_kwargs)), read_vals)
      else:
        args, kwargs = call.rebuild(dyn_args, dyn_kwargs)
        frame = ShardFrame(self.name, mesh, plan, axes,
                           self.planner.manual(mesh))
        out, new_vals = replay(
            frame, self.fun, args, kwargs,
            zip(plan.reads, read_vals, strict=True), plan.writes,
            "inside shard_map")
      if self.check_vma:
        self._check_replicated_writes(mesh, plan, new_vals)
      return out, new_vals
    body.__name__ = body.__qualname__ = fun_name(self.fun)
    return body

  def _check_replicated_writes(self, mesh: Any, plan: Plan,
                               new_vals: list[Any]) -> None:
    manual = set(self.planner.manual_axes(mesh))
    for s, v in zip(plan.writes, new_vals, strict=True):
      for spec, x in zip(plan.write_specs[id(s)], jax.tree.leaves(v), strict=True):
        varying = compat.varying_axes(jax.typeof(x)) & manual
        missing = varying - set(spec_axes(spec))
        if missing:
          axis = sorted(missing)[0]
          raise ValueError(
              f"{self.name}: {s.label()} leaves with spec {spec}, but the "
              f"value written to it differs across mesh axis {axis!r} (it "
              "was computed from per-shard data), so it cannot be stored as "
              f"one value. Declare where it lives, e.g. state_out_specs="
              f"{{{s.name or 'state'}: P({axis!r})}} (and state_in_specs to "
              "match), or make it equal on every shard with jax.lax.psum or "
              f"pmean over {axis!r} (an all_gather result still counts as "
              "per-shard data; pass check_vma=False to store it).")


def shard_map(fun: Callable | None = None, mesh: Any = None,
              in_specs: Any = None, out_specs: Any = P(), *,
              state_in_specs: StateSpecs = None,
              state_out_specs: StateSpecs = None,
              axis_names: frozenset = frozenset(),
              check_vma: bool = True,
              static_argnums: int | Sequence[int] = (),
              static_argnames: str | Sequence[str] = (),
              kwarg_specs: dict | None = None,
              axis_rules: Any = None):
  """``jax.shard_map`` for functions that read and write States.

  The function runs once per shard on per-shard values of its arguments and
  of the States it touches; each state is split as ``state_in_specs`` says
  and written back as ``state_out_specs`` says (by default, as it came in).

  Args:
    fun: the per-shard function; may close over States.
    mesh: a ``jax.sharding.Mesh``; None takes the one set by ``jax.set_mesh``.
    in_specs: one PartitionSpec for every dynamic positional argument, a
      tuple with one spec (or spec pytree prefix, e.g. a dict of specs for a
      dict argument) per dynamic positional argument, or None to take each
      argument's own (Explicit) sharding. Static arguments take no entry.
    out_specs: PartitionSpec pytree prefix of the output (default ``P()``).
    state_in_specs, state_out_specs: None, one PartitionSpec for every state,
      or a dict keyed by States, State subclasses or predicates
      ``(state) -> bool``. First match wins: the State itself, then
      type/predicate keys in dict order, then the state's own ``spec``, then
      its logical ``axes`` mapped by the axis rules, then ``P()``.
    axis_names: mesh axes the function is manual over (default: all); the
      other axes stay automatic (compiler-sharded). A State's spec may name
      automatic axes: they set where it lives, and only its manual part
      splits the value the function sees. Argument specs name manual axes
      only.
    check_vma: as in ``jax.shard_map``.
    static_argnums, static_argnames: arguments that are hashable Python
      values steering the trace (e.g. a number of steps), as in ``jax.jit``:
      they are part of the cache key and are passed to the function as they
      are.
    kwarg_specs: ``{name: spec or spec pytree prefix}`` for keyword
      arguments; keyword arguments not named here are replicated.
    axis_rules: logical-axis rules (see :func:`brainshard.axis_rules`) added
      on top of the ones in effect when the function is called.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> from jax.sharding import PartitionSpec as P
    >>> mesh = jax.make_mesh((1,), ('x',))
    >>> v = bs.State(jnp.zeros(4), name='v')
    >>> @bs.shard_map(mesh=mesh, in_specs=P('x'), out_specs=P(),
    ...               state_in_specs={v: P('x')})
    ... def step(i):
    ...   v.value = v.value + i
    ...   return jax.lax.psum(v.value.sum(), 'x')
    >>> step(jnp.ones(4))
    Array(4., dtype=float32)
  """
  def wrap(f):
    return ShardMappedFunction(f, mesh, in_specs, out_specs, state_in_specs,
                               state_out_specs, axis_names, check_vma,
                               static_argnums, static_argnames, kwarg_specs,
                               axis_rules)
  return wrap if fun is None else wrap(fun)
