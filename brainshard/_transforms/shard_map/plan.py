"""Planning and running a ``bs.shard_map`` call: the mesh, the specs, the map.

Everything fixed for one mesh and argument signature is a :class:`Plan`:
which states the body reads and writes, each state's in and out specs, each
argument's specs. A :class:`ShardPlanner` (one per ``bs.shard_map``'d
function) makes and caches plans and runs them. A spec is resolved
(``_core/specs.py``) and validated against its shape and mesh once per
plan, as the plan's discovery first meets its argument or State
(:class:`StateLayouts`); from the plan it goes into the ``in_specs`` of the
``jax.shard_map`` the planner builds (:meth:`ShardPlanner.map`), the one
that discovers the body and the one of every call alike.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.args import Call, StaticArgs
from brainshard._core.axes import Rules, current_rules
from brainshard._core.caches import Cache
from brainshard._core import compat
from brainshard._core.discovery import Discovery, discover
from brainshard._core.frames import (
    current_signature, gather_values, write_results)
from brainshard._core.program.placement import PlacementHint
from brainshard._core.specs import (
    NO_MATCH, arg_leaf_specs, check_spec, explicit_spec, has_explicit_axes,
    leaf_specs, manual_spec, match_state_spec, resolve_state_spec, spec_axes)
from brainshard._core.state.state import State
from brainshard._core.state.values import Signature, describe_signature
from brainshard._core.threads import thread_frames
from brainshard._transforms.shard_map.body import discovery_body, plan_body
from brainshard._transforms.shard_map.errors import explain_plan_error
from brainshard._transforms.shard_map.frames import (
    DiscoveryShardFrame, reshard, unsharded)

__all__ = ["Plan", "ShardPlanner", "StateLayouts", "spec_tree"]


def spec_tree(treedef: Any, specs: Sequence[P]) -> Any:
  return jax.tree.unflatten(treedef, list(specs))


class _Signature(NamedTuple):
  mesh: Any
  rules: Rules   # logical-axis rules in effect
  static: tuple  # values of the static arguments
  treedef: Any
  avals: tuple


class Plan(NamedTuple):
  """Everything fixed for one mesh and argument signature.

  State specs are *global* layouts (they may name automatic axes under a
  partially manual shard_map); argument specs are shard_map's in_specs.
  """
  reads: tuple[State, ...]
  writes: tuple[State, ...]
  read_specs: dict[int, list[P]]   # id(state) -> per-leaf in specs
  write_specs: dict[int, list[P]]  # id(state) -> per-leaf out specs
  arg_specs: list[list[P]]         # per dynamic positional arg, per leaf
  kwarg_specs: dict[str, list[P]]  # per dynamic keyword arg, per leaf
  # The body as discovered at per-shard avals (inputs: argument leaves, then
  # the reads' leaves), evaluated by the real trace instead of running the
  # Python body again; and the reads' signatures it is valid for (and their
  # specs were validated for).
  body: Discovery
  read_sigs: tuple[Signature, ...]

  def body_is_usable(self) -> bool:
    """Whether the real trace may evaluate ``body``: it closed over no value
    of another trace, and every read state still has its signature."""
    return not any(compat.is_traced(c) for c in self.body.jaxpr.consts) and (
        all(_shapes(current_signature(s)) == _shapes(sig)
            for s, sig in zip(self.reads, self.read_sigs, strict=True)))


def _shapes(sig: Signature) -> tuple:
  # Placement may give an Explicit-mode aval a sharding; the body computes
  # the same either way.
  treedef, avals = sig
  return treedef, tuple((a.shape, a.dtype) for a in avals)


class StateLayouts:
  """The per-leaf specs of each State one plan's discovery meets, resolved
  and validated once, when discovery first reads or writes the State.

  In specs: ``state_in_specs``, the State's own ``spec`` or ``axes``, else
  ``P()`` (:func:`resolve_state_spec`); out specs: ``state_out_specs``,
  else as it came in.
  """

  def __init__(self, planner: "ShardPlanner", mesh: Any):
    self.name = planner.name
    self.state_in_specs = planner.state_in_specs
    self.state_out_specs = planner.state_out_specs
    self.mesh = mesh
    self.ins: dict[int, list[P]] = {}
    self.outs: dict[int, list[P]] = {}
    self.met: list[State] = []  # in the order discovery met them

  def in_specs(self, state: State, sig: Signature) -> list[P]:
    specs = self.ins.get(id(state))
    if specs is None:
      value = jax.tree.unflatten(*sig)
      spec = resolve_state_spec(state, self.state_in_specs, mesh=self.mesh,
                                value=value)
      specs = self.ins[id(state)] = self._checked(
          state, sig, spec, "state_in_specs")
      self.met.append(state)
    return specs

  def out_specs(self, state: State, sig: Signature) -> list[P]:
    specs = self.outs.get(id(state))
    if specs is None:
      spec = match_state_spec(state, self.state_out_specs)
      specs = self.outs[id(state)] = (
          self.in_specs(state, sig) if spec is NO_MATCH else
          self._checked(state, sig, spec, "state_out_specs"))
    return specs

  def _checked(self, state: State, sig: Signature, spec: Any,
               which: str) -> list[P]:
    owner = f"{self.name}: {state.label()} ({describe_signature(sig)})"
    specs = leaf_specs(spec, jax.tree.unflatten(*sig), owner)
    for s, aval in zip(specs, sig[1], strict=True):
      check_spec(s, aval.shape, self.mesh, f"{owner}, {which} {s}")
    return specs


class _FreshPlan(threading.local):
  plan = None


@dataclasses.dataclass(eq=False, repr=False)
class ShardPlanner:
  """Makes, caches and runs the plans of one ``bs.shard_map``'d function.

  It holds what planning and the map read: the function, its name, mesh,
  specs, manual axes, ``check_vma`` and static arguments.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> from jax.sharding import PartitionSpec as P
    >>> mesh = jax.make_mesh((1,), ('x',))
    >>> v = bs.State(jnp.zeros(4), name='v', spec=P('x'))
    >>> def step():
    ...   v.value = v.value + 1
    >>> plan = bs.shard_map(step, mesh=mesh, out_specs=None).planner.plan(
    ...     mesh, (), {})
    >>> [s.name for s in plan.reads], plan.read_specs[id(v)]
    (['v'], [P('x',)])
  """

  fun: Callable
  name: str
  mesh: Any
  in_specs: Any
  out_specs: Any
  kwarg_specs: dict
  state_in_specs: Any
  state_out_specs: Any
  axis_names: frozenset
  check_vma: bool
  static: StaticArgs
  plans: Cache = dataclasses.field(default_factory=Cache, init=False)
  # the plan made last on this thread, unused
  _fresh: _FreshPlan = dataclasses.field(default_factory=_FreshPlan,
                                         init=False)

  def take_fresh(self, plan: Plan | None) -> bool:
    """Whether ``plan`` was made by the last planning on this thread (and
    not used since); forgets it either way."""
    fresh, self._fresh.plan = self._fresh.plan is plan, None
    return fresh

  # -- mesh -----------------------------------------------------------------

  def resolve_mesh(self) -> Any:
    if self.mesh is not None:
      return self.mesh
    try:
      mesh = jax.sharding.get_mesh()
    except ValueError:  # under jax.jit only the abstract mesh is known
      mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
      mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
      raise ValueError(
          f"{self.name} has no mesh: pass mesh=..., or set one with "
          "`jax.set_mesh(mesh)` around the call.")
    return mesh

  def manual_axes(self, mesh: Any) -> tuple[str, ...]:
    if self.axis_names:
      return tuple(a for a in mesh.axis_names if a in self.axis_names)
    return tuple(mesh.axis_names)

  def manual(self, mesh: Any) -> frozenset | None:
    """The manual axes when only some are manual, else None."""
    return frozenset(self.manual_axes(mesh)) if self.axis_names else None

  def _axis_sizes(self, mesh: Any) -> tuple[tuple[str, int], ...]:
    return tuple((a, mesh.shape[a]) for a in self.manual_axes(mesh))

  # -- the call -------------------------------------------------------------

  def run(self, mesh: Any, args: tuple, kwargs: dict) -> Any:
    """The call, traced: ``jax.shard_map`` of the body into the current
    trace, and the written values into the enclosing frame."""
    call = self.static.split(args, kwargs)
    plan = self.plan_call(mesh, call)
    # Only the trace a plan was made for may evaluate its discovered body: a
    # later trace may see other globals, another enclosing transform or
    # traced closures, so it runs the Python body again.
    evaluated = self.take_fresh(plan) and plan.body_is_usable()
    if thread_frames.stack and isinstance(mesh, jax.sharding.Mesh):
      self._hint_placements(mesh, plan)
    read_vals = gather_values(plan.reads, self.name)
    self._check_reshaped(mesh, plan, read_vals)
    body = plan_body(self.fun, self.name, mesh, plan, call,
                     self._axis_sizes(mesh), self.manual(mesh), evaluated,
                     self.check_vma)
    out, new_vals = self.map(
        mesh, body, call, plan.arg_specs, plan.kwarg_specs, read_vals,
        [spec_tree(jax.tree.structure(v), plan.read_specs[id(s)])
         for s, v in zip(plan.reads, read_vals, strict=True)],
        (self.out_specs,
         [spec_tree(current_signature(s)[0], plan.write_specs[id(s)])
          for s in plan.writes]))
    write_results(list(plan.writes), new_vals, self.name)
    return out

  def _check_reshaped(self, mesh: Any, plan: Plan,
                      read_vals: list[Any]) -> None:
    """Validates the in specs of the states whose shape changed since the
    plan validated them (such a state is in a trace of its own)."""
    for s, v, (_, avals) in zip(plan.reads, read_vals, plan.read_sigs,
                                strict=True):
      shapes = [jax.typeof(x).shape for x in jax.tree.leaves(v)]
      if shapes != [a.shape for a in avals]:
        for spec, shape in zip(plan.read_specs[id(s)], shapes, strict=True):
          check_spec(spec, shape, mesh,
                     f"{self.name}: {s.label()}, state_in_specs {spec}")

  def _hint_placements(self, mesh: Any, plan: Plan) -> None:
    """Tells the enclosing discoveries where each state is read and left,
    so the compiled program's inputs can be placed there up front."""
    frame = thread_frames.stack[-1]
    for s in plan.reads:
      out = plan.write_specs.get(id(s))
      frame.hint_placement(s, PlacementHint(
          tuple(NamedSharding(mesh, p) for p in plan.read_specs[id(s)]),
          None if out is None else tuple(NamedSharding(mesh, p) for p in out)))

  def map(self, mesh: Any, body: Callable, call: Call,
          arg_specs: list[list[P]], kwarg_specs: dict[str, list[P]],
          read_vals: list[Any], read_spec_trees: list[Any],
          out_specs: Any) -> Any:
    """``jax.shard_map(body)(read_vals, dynamic args, dynamic kwargs)``.

    State specs are where the states live (global layouts); under a
    partially manual shard_map only their manual part goes to JAX. In
    Explicit mode, inputs whose sharding type differs are resharded first.
    """
    manual = self.manual(mesh)
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

  # -- planning -------------------------------------------------------------

  def plan(self, mesh: Any, args: tuple, kwargs: dict) -> Plan:
    """The plan of a call with these arguments on ``mesh``."""
    return self.plan_call(mesh, self.static.split(args, kwargs))

  def plan_call(self, mesh: Any, call: Call) -> Plan:
    """The plan of a split call on ``mesh`` (made on first use)."""
    leaves, treedef = jax.tree.flatten((call.args, call.kwargs))
    for leaf in leaves:
      if isinstance(leaf, State):
        raise TypeError(
            f"{self.name} was passed {leaf.label()} as an argument. States "
            "are not arguments: close over the State in the function (read "
            "`state.value` inside it) and shard_map places it per "
            "state_in_specs.")
    try:
      key = _Signature(mesh, current_rules(), call.static, treedef,
                       tuple(map(self._aval_key, leaves)))
      plan = self.plans.get(key)
    except TypeError as e:
      raise TypeError(
          f"{self.name}: static arguments must be hashable ({e}).") from None
    if plan is None:
      plan = self.plans[key] = self._build_plan(mesh, call)
      self._fresh.plan = plan
    return plan

  def _aval_key(self, x: Any) -> Hashable:
    # Placement changes an argument's sharding but not the plan, unless the
    # specs are inferred from the arguments' own shardings.
    aval = jax.typeof(x)
    if self.in_specs is None:
      return aval
    return aval.shape, aval.dtype, aval.weak_type

  def arg_leaf_specs(self, mesh: Any, args: tuple) -> list[list[P]]:
    """Each positional argument's leaf specs (inferred from the arguments'
    own shardings where ``in_specs`` is None), not validated."""
    manual = self.manual(mesh)

    def infer(x):  # an argument's own layout; under partial manual, its
      spec = explicit_spec(jax.typeof(x), mesh)  # manual part
      return P() if spec is None else manual_spec(spec, manual)
    return arg_leaf_specs(self.in_specs, args, infer)

  def _arg_specs(self, mesh: Any, args: tuple) -> list[list[P]]:
    specs = self.arg_leaf_specs(mesh, args)
    for i, (arg, arg_specs) in enumerate(zip(args, specs, strict=True)):
      self._check_leaves(mesh, arg, arg_specs,
                         f"{self.name}: positional argument {i}")
    return specs

  def _kwarg_specs(self, mesh: Any, kwargs: dict) -> dict[str, list[P]]:
    out = {}
    for k, v in kwargs.items():
      owner = f"{self.name}: keyword argument {k!r}"
      out[k] = leaf_specs(self.kwarg_specs.get(k, P()), v, owner)
      self._check_leaves(mesh, v, out[k], owner)
    return out

  def _check_leaves(self, mesh: Any, arg: Any, specs: list[P],
                    prefix: str) -> None:
    manual = self.manual(mesh)
    for (path, leaf), spec in zip(
        jax.tree_util.tree_flatten_with_path(arg)[0], specs):
      owner = (f"{prefix}{jax.tree_util.keystr(path)} "
               f"({jax.typeof(leaf).str_short()})")
      check_spec(spec, jax.typeof(leaf).shape, mesh, owner)
      auto = [a for a in spec_axes(spec)
              if manual is not None and a not in manual]
      if auto:
        raise ValueError(
            f"{owner}: its spec {spec} names mesh axis {auto[0]!r}, but this "
            f"shard_map is manual only over {tuple(sorted(manual))} "
            "(axis_names); the other axes are sharded by the compiler and "
            "may not appear in argument specs.")

  def _build_plan(self, mesh: Any, call: Call) -> Plan:
    """Validates the arguments' specs, then discovers the body inside the
    real ``jax.shard_map``, validating each State's specs as it meets it."""
    arg_specs = self._arg_specs(mesh, call.args)
    kwarg_specs = self._kwarg_specs(mesh, call.kwargs)
    layouts = StateLayouts(self, mesh)
    found: list[Discovery] = []
    body = discovery_body(self.fun, self.name, call, DiscoveryShardFrame(
        self.name, mesh, self.manual(mesh), layouts, self._axis_sizes(mesh)),
        found)

    def traced(*leaves):
      dyn_args, dyn_kwargs = jax.tree.unflatten(treedef, leaves)
      # The outer discovery frame turns a state's first read into a new
      # input of this trace (whole, unsharded); the shard frame cuts out its
      # block, so per-shard types (varying axes too) are the real ones.
      self.map(mesh, body, Call(dyn_args, dyn_kwargs, call.static),
               arg_specs, kwarg_specs, [], [], ((), []))

    leaves, treedef = call.flat()
    try:
      discover(traced, [
          jax.ShapeDtypeStruct(jax.typeof(x).shape, jax.typeof(x).dtype)
          for x in leaves], self.name, state_signature=unsharded)
    except (TypeError, ValueError) as e:
      explain_plan_error(
          e, self.name, mesh, self.manual_axes(mesh), self.manual(mesh), call,
          arg_specs, kwarg_specs,
          [(s, layouts.ins[id(s)], layouts.outs.get(id(s)),
            current_signature(s)) for s in layouts.met])
      raise
    d = found[-1]
    reads, writes = d.read_states, d.write_states
    return Plan(reads, writes, {id(s): layouts.ins[id(s)] for s in reads},
                {id(s): layouts.out_specs(s, current_signature(s))
                 for s in writes},
                arg_specs, kwarg_specs, d,
                tuple(current_signature(s) for s in reads))
