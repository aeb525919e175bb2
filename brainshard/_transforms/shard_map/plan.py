"""Planning a ``bs.shard_map`` call: the mesh, the specs, the states.

Everything fixed for one mesh and argument signature is a :class:`Plan`:
which states the body reads and writes, each state's in and out specs, each
argument's specs. A :class:`ShardPlanner` (one per ``bs.shard_map``'d
function) makes and caches plans, validating every spec against its shape
and mesh before anything runs, and discovers the body's states inside the
real ``jax.shard_map`` that the function's ``map_body`` builds.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax
from jax.sharding import PartitionSpec as P

from brainshard._core.args import Call, StaticArgs
from brainshard._core.axes import Rules, current_rules
from brainshard._core.caches import Cache
from brainshard._core import compat
from brainshard._core.discovery import Discovery, discover
from brainshard._core.frames import current_signature
from brainshard._core.specs import (
    NO_MATCH, arg_leaf_specs, check_spec, explicit_spec, leaf_specs,
    manual_spec, match_state_spec, resolve_state_spec, spec_axes)
from brainshard._core.state.state import State
from brainshard._core.state.values import Signature, describe_signature
from brainshard._transforms.shard_map.errors import (
    explain_axis_error, explain_shape_error, explain_write, input_rows)
from brainshard._transforms.shard_map.frames import DiscoveryShardFrame, unsharded

__all__ = ["Plan", "ShardPlanner", "spec_tree"]


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
  # Python body again; and the reads' signatures it is valid for.
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


class _FreshPlan(threading.local):
  plan = None


class ShardPlanner:
  """Makes and caches the plans of one ``bs.shard_map``'d function.

  It holds what planning reads (the function, its name, mesh, specs and
  static arguments) and ``map_body(mesh, body, call, arg_specs,
  kwarg_specs, read_vals, read_spec_trees, out_specs)``: the function's
  real ``jax.shard_map``, which the body is discovered inside.
  """

  def __init__(self, fun: Callable, name: str, mesh: Any, in_specs: Any,
               kwarg_specs: dict, state_in_specs: Any, state_out_specs: Any,
               axis_names: frozenset, static: StaticArgs,
               map_body: Callable):
    self.fun = fun
    self.name = name
    self.mesh = mesh
    self.in_specs = in_specs
    self.kwarg_specs = kwarg_specs
    self.state_in_specs = state_in_specs
    self.state_out_specs = state_out_specs
    self.axis_names = axis_names
    self.static = static
    self.map_body = map_body
    self.plans: Cache = Cache()
    self._fresh = _FreshPlan()  # the plan made last on this thread, unused

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

  def manual(self, mesh: Any) -> frozenset | None:
    """The manual axes when only some are manual, else None."""
    return frozenset(self.manual_axes(mesh)) if self.axis_names else None

  def _check_manual(self, spec: P, mesh: Any, owner: str) -> None:
    manual = self.manual(mesh)
    if manual is None:
      return
    auto = [a for a in spec_axes(spec) if a not in manual]
    if auto:
      raise ValueError(
          f"{owner}: its spec {spec} names mesh axis {auto[0]!r}, but this "
          f"shard_map is manual only over {tuple(sorted(manual))} "
          f"(axis_names); the other axes are sharded by the compiler and may "
          "not appear in argument specs.")

  def arg_specs(self, mesh: Any, args: tuple) -> list[list[P]]:
    """Each positional argument's leaf specs (inferred from the arguments'
    own shardings where ``in_specs`` is None), validated."""
    manual = self.manual(mesh)

    def infer(x):  # an argument's own layout; under partial manual, its
      spec = explicit_spec(jax.typeof(x), mesh)  # manual part
      return P() if spec is None else manual_spec(spec, manual)
    specs = arg_leaf_specs(self.in_specs, args, infer)
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
    for (path, leaf), spec in zip(
        jax.tree_util.tree_flatten_with_path(arg)[0], specs):
      owner = (f"{prefix}{jax.tree_util.keystr(path)} "
               f"({jax.typeof(leaf).str_short()})")
      check_spec(spec, jax.typeof(leaf).shape, mesh, owner)
      self._check_manual(spec, mesh, owner)

  def _state_in_specs(self, state: State, sig: Signature, mesh: Any,
                      which: str = "state_in_specs") -> list[P]:
    treedef, avals = sig
    value = jax.tree.unflatten(treedef, avals)
    spec = resolve_state_spec(state, self.state_in_specs, mesh=mesh,
                              value=value)
    owner = f"{self.name}: {state.label()} ({describe_signature(sig)})"
    specs = leaf_specs(spec, value, owner)
    for s, aval in zip(specs, avals, strict=True):
      check_spec(s, aval.shape, mesh, f"{owner}, {which} {s}")
    return specs

  def _state_out_specs(self, state: State, sig: Signature, mesh: Any,
                       in_specs: list[P]) -> list[P]:
    """Where a written state leaves: ``state_out_specs``, else as it came."""
    out = match_state_spec(state, self.state_out_specs)
    if out is NO_MATCH:
      return in_specs
    owner = f"{self.name}: {state.label()} ({describe_signature(sig)})"
    specs = leaf_specs(out, jax.tree.unflatten(*sig), owner)
    for s, aval in zip(specs, sig[1], strict=True):
      check_spec(s, aval.shape, mesh, f"{owner}, state_out_specs {s}")
    return specs

  def _build_plan(self, mesh: Any, call: Call) -> Plan:
    arg_specs = self.arg_specs(mesh, call.args)
    kwarg_specs = self._kwarg_specs(mesh, call.kwargs)
    manual = self.manual(mesh)
    read_specs: dict[int, list[P]] = {}
    touched: list[tuple[State, list[P]]] = []

    def state_specs(state: State, sig: Signature) -> list[P]:
      specs = read_specs.get(id(state))
      if specs is None:
        specs = read_specs[id(state)] = self._state_in_specs(state, sig, mesh)
        touched.append((state, specs))
      return specs

    def out_specs(state: State, sig: Signature) -> list[P]:
      return self._state_out_specs(state, sig, mesh, state_specs(state, sig))

    manual_axes = tuple((a, mesh.shape[a]) for a in self.manual_axes(mesh))
    found: list[Discovery] = []

    def body(read_vals, dyn_args, dyn_kwargs):
      leaves, treedef = jax.tree.flatten((dyn_args, dyn_kwargs))

      def run(*leaves):
        args, kwargs = call.unflatten(treedef, leaves)
        try:
          return self.fun(*args, **kwargs)
        except (AssertionError, NameError, ValueError) as e:
          # Here JAX's frames (which name the axis) are still in the
          # traceback; above, its filtering drops them.
          explain_axis_error(e, self.name, mesh, self.manual_axes(mesh))
          raise

      with DiscoveryShardFrame(self.name, mesh, manual, state_specs, out_specs,
                               manual_axes):
        # Discovered at the per-shard types of the real call: a state's
        # block (cut from its whole value by the frame) becomes an input.
        found.append(discover(run, leaves, self.name))
      return (), []

    def traced(*leaves):
      dyn_args, dyn_kwargs = jax.tree.unflatten(treedef, leaves)
      # The outer discovery frame turns a state's first read into a new
      # input of this trace (whole, unsharded); the shard frame cuts out its
      # block, so per-shard types (varying axes too) are the real ones.
      self.map_body(mesh, body, Call(dyn_args, dyn_kwargs, call.static),
                    arg_specs, kwarg_specs, [], [], ((), []))

    leaves, treedef = call.flat()
    try:
      discover(traced, [
          jax.ShapeDtypeStruct(jax.typeof(x).shape, jax.typeof(x).dtype)
          for x in leaves], self.name, state_signature=unsharded)
    except (TypeError, ValueError) as e:
      self._explain_shapes(e, mesh, call, arg_specs, kwarg_specs, touched)
      raise
    d = found[-1]
    reads, writes = d.read_states, d.write_states
    write_specs = {id(s): out_specs(s, current_signature(s)) for s in writes}
    return Plan(reads, writes, {id(s): read_specs[id(s)] for s in reads},
                write_specs, arg_specs, kwarg_specs, d,
                tuple(current_signature(s) for s in reads))

  def _explain_shapes(self, e: Exception, mesh: Any, call: Call,
                      arg_specs: list, kwarg_specs: dict,
                      touched: list[tuple[State, list[P]]]) -> None:
    """Re-raises a per-shard shape error, or a write that does not fit a
    State's state_out_specs, naming the inputs and specs involved."""
    touched = [(s, specs, current_signature(s)) for s, specs in touched]
    for s, specs, sig in touched:
      if f"{s.label()} holds " in str(e):  # frames.py's wrong-write error
        out = self._state_out_specs(s, sig, mesh, specs)
        explain_write(e, self.name, s, sig, specs, out, mesh,
                      self.manual(mesh))
    rows = input_rows(mesh, self.manual(mesh), call.args, arg_specs,
                      call.kwargs, kwarg_specs, touched)
    explain_shape_error(e, self.name, mesh, self.manual_axes(mesh), rows,
                        touched)
