"""State-aware ``shard_map``.

The user function is re-run inside ``jax.shard_map`` at per-shard shapes:
the per-shard values of the states it reads are injected into a frame, and
the values it writes are collected and returned as extra outputs. Which
states it touches is found by a discovery trace that also runs the function
inside ``jax.shard_map``, so per-shard shapes and varying axes are those of
the real call.

Called eagerly, the whole thing runs under one cached ``jax.jit`` per mesh
(see :class:`~brainshard._transforms.jit.StatefulJit`), so repeated calls re-run no
Python and compile nothing new. Called under another brainshard transform, it
emits ``jax.shard_map`` into that trace.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core import compat
from brainshard._core.axes import (
    Rules, current_rules, freeze_rules, merged_rules, using_rules)
from brainshard._core.args import Call, StaticArgs, copy_metadata, fun_name
from brainshard._core.caches import Cache
from brainshard._core.discovery import discover
from brainshard._core.frames import (
    Frame, ReplayFrame, current_signature, gather_values, replay,
    write_results)
from brainshard._core.program import StatefulJit
from brainshard._core.placement import Placement, PlacementHint, canonical_spec
from brainshard._core.specs import (
    NO_MATCH, StateSpecs, arg_leaf_specs, check_kwarg_specs, check_spec,
    check_state_specs_arg,
    explicit_spec, has_explicit_axes, leaf_specs, manual_spec, match_state_spec,
    resolve_state_spec, shard_aval, spec_axes)
from brainshard._core.state import (
    Signature, State, _frames, describe_signature, signature)

__all__ = ["shard_map", "ShardMappedFunction"]


def _spec_tree(treedef: Any, specs: Sequence[P]) -> Any:
  return jax.tree.unflatten(treedef, list(specs))


class _Signature(NamedTuple):
  mesh: Any
  rules: Rules   # logical-axis rules in effect
  static: tuple  # values of the static arguments
  treedef: Any
  avals: tuple


class _Plan(NamedTuple):
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
    self._plans: Cache = Cache()
    self._eager: Cache = Cache()
    copy_metadata(self, fun)

  def __repr__(self) -> str:
    mesh = "from jax.set_mesh" if self.mesh is None else dict(self.mesh.shape)
    return f"<{self.name} mesh={mesh}>"

  # -- mesh -----------------------------------------------------------------

  def _resolve_mesh(self) -> Any:
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

  def _manual_axes(self, mesh: Any) -> tuple[str, ...]:
    if self.axis_names:
      return tuple(a for a in mesh.axis_names if a in self.axis_names)
    return tuple(mesh.axis_names)

  # -- calling --------------------------------------------------------------

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
    mesh = self.mesh if self.mesh is not None else self._resolve_mesh()
    if _frames.stack or not compat.at_top_level():
      return self._traced_call(mesh, args, kwargs)
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
      plan = self._plan(mesh, args, kwargs)
      return plan.reads, plan.writes

    def can_donate(state: State) -> bool:
      # A buffer is reusable only where the state leaves with the layout it
      # came in with.
      for key, plan in self._plans.items():
        if key.mesh is mesh or key.mesh == mesh:
          out_specs = plan.write_specs.get(id(state))
          in_specs = plan.read_specs.get(id(state))
          if out_specs is not None and in_specs is not None and any(
              canonical_spec(a, max(len(a), len(b)))
              != canonical_spec(b, max(len(a), len(b)))
              for a, b in zip(in_specs, out_specs)):
            return False
      return True

    placement = Placement(self, mesh)
    return StatefulJit(run, self.name, discover=discover,
                       static=self.static,
                       place=placement.place,
                       place_targets=placement.fast_targets,
                       can_donate=can_donate)

  # -- planning -------------------------------------------------------------

  def _plan(self, mesh: Any, args: tuple, kwargs: dict) -> _Plan:
    return self._plan_call(mesh, self.static.split(args, kwargs))

  def _plan_call(self, mesh: Any, call: Call) -> _Plan:
    leaves, treedef = jax.tree.flatten((call.args, call.kwargs))
    for leaf in leaves:
      if isinstance(leaf, State):
        raise TypeError(
            f"{self.name} was passed {leaf._label()} as an argument. States "
            "are not arguments: close over the State in the function (read "
            "`state.value` inside it) and shard_map places it per "
            "state_in_specs.")
    try:
      key = _Signature(mesh, current_rules(), call.static, treedef,
                       tuple(map(self._aval_key, leaves)))
      plan = self._plans.get(key)
    except TypeError as e:
      raise TypeError(
          f"{self.name}: static arguments must be hashable ({e}).") from None
    if plan is None:
      plan = self._plans[key] = self._build_plan(mesh, call)
    return plan

  def _aval_key(self, x: Any) -> Hashable:
    # Placement changes an argument's sharding but not the plan, unless the
    # specs are inferred from the arguments' own shardings.
    aval = jax.typeof(x)
    if self.in_specs is None:
      return aval
    return aval.shape, aval.dtype, aval.weak_type

  def _manual(self, mesh: Any) -> frozenset | None:
    """The manual axes when only some are manual, else None."""
    return frozenset(self._manual_axes(mesh)) if self.axis_names else None

  def _check_manual(self, spec: P, mesh: Any, owner: str) -> None:
    manual = self._manual(mesh)
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
    manual = self._manual(mesh)

    def infer(x):  # an argument's own layout; under partial manual, its
      spec = explicit_spec(jax.typeof(x), mesh)  # manual part
      return P() if spec is None else manual_spec(spec, manual)
    specs = arg_leaf_specs(self.in_specs, args, infer)
    for i, (arg, arg_specs) in enumerate(zip(args, specs)):
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
    owner = f"{self.name}: {state._label()} ({describe_signature(sig)})"
    specs = leaf_specs(spec, value, owner)
    for s, aval in zip(specs, avals):
      check_spec(s, aval.shape, mesh, f"{owner}, {which} {s}")
    return specs

  def _state_out_specs(self, state: State, sig: Signature, mesh: Any,
                       in_specs: list[P]) -> list[P]:
    """Where a written state leaves: ``state_out_specs``, else as it came."""
    out = match_state_spec(state, self.state_out_specs)
    if out is NO_MATCH:
      return in_specs
    owner = f"{self.name}: {state._label()} ({describe_signature(sig)})"
    specs = leaf_specs(out, jax.tree.unflatten(*sig), owner)
    for s, aval in zip(specs, sig[1]):
      check_spec(s, aval.shape, mesh, f"{owner}, state_out_specs {s}")
    return specs

  def _build_plan(self, mesh: Any, call: Call) -> _Plan:
    arg_specs = self.arg_specs(mesh, call.args)
    kwarg_specs = self._kwarg_specs(mesh, call.kwargs)
    manual = self._manual(mesh)
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

    frames: list[_DiscoveryShardFrame] = []

    def body(read_vals, dyn_args, dyn_kwargs):
      args, kwargs = call.rebuild(dyn_args, dyn_kwargs)
      frame = _DiscoveryShardFrame(self.name, mesh, manual, state_specs,
                                   out_specs)
      frames.append(frame)
      with frame:
        self.fun(*args, **kwargs)
      return (), []

    def traced(*leaves):
      dyn_args, dyn_kwargs = jax.tree.unflatten(treedef, leaves)
      # The discovery frame turns a state's first read into a new input of
      # this trace (whole, unsharded); the body closes over it and cuts out
      # its block, so per-shard types are those of the real call.
      self._map(mesh, body, Call(dyn_args, dyn_kwargs, call.static),
                arg_specs, kwarg_specs, [], [], ((), []))

    leaves, treedef = call.flat()
    try:
      discover(traced, [
          jax.ShapeDtypeStruct(jax.typeof(x).shape, jax.typeof(x).dtype)
          for x in leaves], self.name, state_signature=_unsharded)
    except (TypeError, ValueError) as e:
      self._explain_replicated_states(e, touched)
      raise
    frame = frames[-1]
    reads = tuple(frame.input_states())
    writes = tuple(frame.written_states())

    write_specs = {id(s): out_specs(s, current_signature(s)) for s in writes}
    return _Plan(reads, writes, {id(s): read_specs[id(s)] for s in reads},
                 write_specs, arg_specs, kwarg_specs)

  def _explain_replicated_states(self, e: Exception,
                                 touched: list[tuple[State, list[P]]]) -> None:
    """Re-raises a shape error that involves a replicated state's global
    shape with the fix (declare its spec) in the message itself."""
    # Only where the error is about a replicated state's (global) shape: a
    # user's own exception must arrive exactly as raised.
    message = str(e)
    replicated = [s for s, specs in touched
                  if all(len(p) == 0 for p in specs)
                  and any(a.shape and str(tuple(a.shape)) in message
                          for a in current_signature(s)[1])]
    if not replicated:
      return
    names = ", ".join(
        f"{s._label()} ({describe_signature(current_signature(s))})"
        for s in replicated)
    example = replicated[0].name or "state"
    axis = self._manual_axes(self._resolve_mesh())[0]
    raise type(e)(
        f"{e}\n\n{self.name} runs the function on per-shard values. These "
        f"states were read replicated (whole on every shard, spec P()): "
        f"{names}. If a state should be split across the mesh like the data, "
        f"declare it: state_in_specs={{{example}: P({axis!r})}} (or give the "
        "State a spec= or axes=).") from e

  # -- the traced call ------------------------------------------------------

  def _traced_call(self, mesh: Any, args: tuple, kwargs: dict) -> Any:
    call = self.static.split(args, kwargs)
    plan = self._plan_call(mesh, call)
    if _frames.stack and isinstance(mesh, jax.sharding.Mesh):
      self._hint_placements(mesh, plan)
    read_vals = gather_values(plan.reads, self.name)
    # The states' values may have changed shape since planning.
    for s, v in zip(plan.reads, read_vals):
      leaves = jax.tree.leaves(v)
      for spec, x in zip(plan.read_specs[id(s)], leaves):
        check_spec(spec, jax.typeof(x).shape, mesh,
                   f"{self.name}: {s._label()}, state_in_specs {spec}")
    read_spec_trees = [
        _spec_tree(jax.tree.structure(v), plan.read_specs[id(s)])
        for s, v in zip(plan.reads, read_vals)]
    write_spec_trees = [
        _spec_tree(current_signature(s)[0], plan.write_specs[id(s)])
        for s in plan.writes]
    out, new_vals = self._map(
        mesh, self._body(mesh, plan, call), call, plan.arg_specs,
        plan.kwarg_specs, read_vals, read_spec_trees,
        (self.out_specs, write_spec_trees))
    write_results(list(plan.writes), new_vals, self.name)
    return out

  def _hint_placements(self, mesh: Any, plan: _Plan) -> None:
    """Tells the enclosing discoveries where each state is read and left,
    so the compiled program's inputs can be placed there up front."""
    frame = _frames.stack[-1]
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
    manual = self._manual(mesh)
    arg_spec_trees = tuple(
        _spec_tree(jax.tree.structure(a), specs)
        for a, specs in zip(call.args, arg_specs))
    kwarg_spec_trees = {
        k: _spec_tree(jax.tree.structure(v), kwarg_specs[k])
        for k, v in call.kwargs.items()}
    dyn_args, dyn_kwargs = call.args, call.kwargs
    if has_explicit_axes(mesh):
      read_vals = [_reshard(v, t, mesh, manual)
                   for v, t in zip(read_vals, read_spec_trees)]
      dyn_args = tuple(_reshard(a, t, mesh, manual)
                       for a, t in zip(dyn_args, arg_spec_trees))
      dyn_kwargs = _reshard(dyn_kwargs, kwarg_spec_trees, mesh, manual)

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

  def _body(self, mesh: Any, plan: _Plan, call: Call) -> Callable:
    axes = tuple((a, mesh.shape[a]) for a in self._manual_axes(mesh))

    def body(read_vals, dyn_args, dyn_kwargs):
      args, kwargs = call.rebuild(dyn_args, dyn_kwargs)
      frame = _ShardFrame(self.name, mesh, plan, axes, self._manual(mesh))
      out, new_vals = replay(frame, self.fun, args, kwargs,
                             zip(plan.reads, read_vals), plan.writes,
                             "inside shard_map")
      if self.check_vma:
        self._check_replicated_writes(mesh, plan, new_vals)
      return out, new_vals
    body.__name__ = body.__qualname__ = fun_name(self.fun)
    return body

  def _check_replicated_writes(self, mesh: Any, plan: _Plan,
                               new_vals: list[Any]) -> None:
    manual = set(self._manual_axes(mesh))
    for s, v in zip(plan.writes, new_vals):
      for spec, x in zip(plan.write_specs[id(s)], jax.tree.leaves(v)):
        varying = compat.varying_axes(jax.typeof(x)) & manual
        missing = varying - set(spec_axes(spec))
        if missing:
          axis = sorted(missing)[0]
          raise ValueError(
              f"{self.name}: {s._label()} leaves with spec {spec}, but the "
              f"value written to it differs across mesh axis {axis!r} (it "
              "was computed from per-shard data), so it cannot be stored as "
              f"one value. Declare where it lives, e.g. state_out_specs="
              f"{{{s.name or 'state'}: P({axis!r})}} (and state_in_specs to "
              "match), or make it equal on every shard with jax.lax.psum or "
              f"pmean over {axis!r} (an all_gather result still counts as "
              "per-shard data; pass check_vma=False to store it).")


class _ShardFrame(ReplayFrame):
  """The frame of a shard_map body.

  States have per-shard shapes here, also the ones that are written without
  being read first. ``manual_axes`` (``(axis name, size)`` per manual mesh
  axis) lets code that must act per shard (random draws, progress reports)
  find the shard_map bodies it runs in (see ``brainshard._transforms.control``).
  """

  def __init__(self, name: str, mesh: Any, plan: _Plan,
               manual_axes: tuple[tuple[str, int], ...],
               manual: frozenset | None):
    super().__init__(name)
    self.mesh = mesh
    self.plan = plan
    self.manual_axes = manual_axes
    self._manual = manual

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    specs = self.plan.write_specs.get(id(state))
    if specs is None:
      return outer_sig
    return _shard_signature(outer_sig, specs, self.mesh, self._manual)

  def write_signature(self, state: State) -> Signature:
    outer = _outer_signature(self, state)
    specs = self.plan.write_specs.get(id(state))
    if specs is None:  # not written when discovered: replay reports it
      return self.signature_of(state)
    return _shard_signature(outer, specs, self.mesh, self._manual)


def _unsharded(state: State, sig: Signature) -> Signature:
  """A state's whole value as a plain aval (no Explicit sharding type)."""
  treedef, avals = sig
  return treedef, tuple(compat.ShapedArray(a.shape, a.dtype) for a in avals)


def _local_block(x: Any, spec: P, mesh: Any) -> Any:
  """This shard's block of a whole value ``x`` split by ``spec``: what
  ``shard_map``'s in_specs would hand the body, varying over those axes."""
  sizes = dict(mesh.shape)
  for dim, entry in enumerate(spec):
    if entry is None:
      continue
    axes = entry if isinstance(entry, tuple) else (entry,)
    index = 0
    for a in axes:  # the first axis is the major one, as in a spec
      index = index * sizes[a] + jax.lax.axis_index(a)
    size = x.shape[dim] // math.prod(sizes[a] for a in axes)
    x = jax.lax.dynamic_slice_in_dim(x, index * size, size, axis=dim)
  return x


class _DiscoveryShardFrame(Frame):
  """Discovers a shard_map body's states while it runs inside a real
  ``jax.shard_map``, so per-shard types (varying axes) are exactly those of
  the real call: a state's first read takes the whole value from the outer
  discovery trace and cuts out this shard's block."""

  def __init__(self, name: str, mesh: Any, manual: frozenset | None,
               state_specs: Callable[[State, Signature], list[P]],
               out_specs: Callable[[State, Signature], list[P]]):
    super().__init__(name)
    self.mesh = mesh
    self.manual = manual
    self.state_specs = state_specs
    self.out_specs = out_specs

  def first_read(self, state: State, outer_value: Any) -> Any:
    specs = self.state_specs(state, signature(outer_value))
    leaves, treedef = jax.tree.flatten(outer_value)
    return jax.tree.unflatten(treedef, [
        _local_block(x, manual_spec(spec, self.manual), self.mesh)
        for x, spec in zip(leaves, specs)])

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    return _shard_signature(outer_sig, self.state_specs(state, outer_sig),
                            self.mesh, self.manual)

  def write_signature(self, state: State) -> Signature:
    outer = _outer_signature(self, state)
    return _shard_signature(outer, self.out_specs(state, outer), self.mesh,
                            self.manual)


def _outer_signature(frame: Frame, state: State) -> Signature:
  """The state's (global) signature outside a shard_map body's frame."""
  if frame.parent is not None:
    return frame.parent.signature_of(state)
  return state._global_signature()


def _shard_signature(sig: Signature, specs: Sequence[P], mesh: Any,
                     manual: frozenset | None) -> Signature:
  """Per-shard signature of a state whose leaves are split by ``specs``."""
  treedef, avals = sig
  return treedef, tuple(shard_aval(a, manual_spec(spec, manual), mesh)
                        for a, spec in zip(avals, specs))


def _reshard(value: Any, spec_tree: Any, mesh: Any,
             manual: frozenset | None = None) -> Any:
  """Reshards Explicit-mode leaves whose sharding type differs from the
  spec (over the ``manual`` axes only, when only some are manual); values
  already placed right pass through untouched."""
  def one(spec, sub):
    def leaf(x):
      aval = jax.typeof(x)
      x_spec = explicit_spec(aval, mesh)
      ndim = aval.ndim
      if x_spec is not None and canonical_spec(
          manual_spec(x_spec, manual), ndim) == canonical_spec(
              manual_spec(spec, manual), ndim):
        return x
      sharding = getattr(aval, "sharding", None)
      if (not spec_axes(spec) and sharding is not None
          and sharding.mesh.empty):
        # An unsharded value entering replicated needs no constraint (and
        # pure jax.shard_map emits none): keeps the program identical.
        return x
      return jax.sharding.reshard(x, NamedSharding(mesh, spec))
    return jax.tree.map(leaf, sub)
  return jax.tree.map(one, spec_tree, value,
                      is_leaf=lambda x: isinstance(x, P) or x is None)


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
