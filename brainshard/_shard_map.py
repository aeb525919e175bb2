"""State-aware ``shard_map``.

The user function is re-run inside ``jax.shard_map`` at per-shard shapes:
the per-shard values of the states it reads are injected into a frame, and
the values it writes are collected and returned as extra outputs. Which
states it touches is found by discovery at per-shard shapes (with the mesh
axes in the axis environment, so collectives trace).

Called eagerly, the whole thing runs under one cached ``jax.jit`` per mesh
(see :class:`~brainshard._jit.StatefulJit`), so repeated calls re-run no
Python and compile nothing new. Called under another brainshard transform, it
emits ``jax.shard_map`` into that trace.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard import _compat
from brainshard._jit import ReplayFrame, StatefulJit, gather_values
from brainshard._placement import Placement
from brainshard._specs import (
    StateSpecs, arg_leaf_specs, check_spec, check_state_specs_arg,
    explicit_spec, has_explicit_axes, leaf_specs, resolve_state_spec,
    shard_aval, spec_axes)
from brainshard._state import (
    Signature, State, StateTraceError, _frames, current_signature,
    describe_signature, write_results)
from brainshard._stateful import StatefulFunction, fun_name

__all__ = ["shard_map", "ShardMappedFunction"]

_NO_MATCH = object()


def _match_out_spec(state: State, specs: StateSpecs) -> Any:
  """``state_out_specs`` entry for ``state``, or _NO_MATCH (then the state
  leaves with its input spec)."""
  if specs is None:
    return _NO_MATCH
  if isinstance(specs, P):
    return specs
  for key, spec in specs.items():
    if key is state:
      return spec
  for key, spec in specs.items():
    if isinstance(key, State):
      continue
    if (isinstance(key, type) and isinstance(state, key)) or (
        not isinstance(key, type) and key(state)):
      return spec
  return _NO_MATCH


def _spec_tree(treedef: Any, specs: Sequence[P]) -> Any:
  return jax.tree.unflatten(treedef, list(specs))


def _canonical(spec: P, ndim: int) -> tuple:
  entries = list(spec) + [None] * (ndim - len(spec))
  return tuple(e if not (isinstance(e, tuple) and len(e) == 1) else e[0]
               for e in entries)


class _Signature(NamedTuple):
  mesh: Any
  treedef: Any
  avals: tuple


class _Plan(NamedTuple):
  """Everything fixed for one mesh and argument signature."""
  reads: tuple[State, ...]
  writes: tuple[State, ...]
  read_specs: dict[int, list[P]]   # id(state) -> per-leaf in specs
  write_specs: dict[int, list[P]]  # id(state) -> per-leaf out specs
  arg_specs: list[list[P]]         # per positional arg, per leaf


class ShardMappedFunction:
  """The result of :func:`shard_map`: call it like the function it wraps."""

  def __init__(self, fun: Callable, mesh: Any, in_specs: Any, out_specs: Any,
               state_in_specs: StateSpecs, state_out_specs: StateSpecs,
               axis_names: frozenset, check_vma: bool):
    check_state_specs_arg(state_in_specs, "state_in_specs")
    check_state_specs_arg(state_out_specs, "state_out_specs")
    if not (in_specs is None or isinstance(in_specs, (P, tuple, list))):
      raise TypeError(
          "in_specs must be None, a PartitionSpec, or a tuple with one entry "
          f"per positional argument; got {type(in_specs).__name__}.")
    self.fun = fun
    self.mesh = mesh
    self.in_specs = in_specs
    self.out_specs = out_specs
    self.state_in_specs = state_in_specs
    self.state_out_specs = state_out_specs
    self.axis_names = frozenset(axis_names)
    self.check_vma = check_vma
    self.name = f"bs.shard_map({fun_name(fun)})"
    self._plans: dict[_Signature, _Plan] = {}
    self._eager: dict[Hashable, StatefulJit] = {}
    self.__wrapped__ = fun
    self.__name__ = getattr(fun, "__name__", "shard_map")
    self.__doc__ = getattr(fun, "__doc__", None)

  # -- mesh -----------------------------------------------------------------

  def _resolve_mesh(self) -> Any:
    if self.mesh is not None:
      return self.mesh
    mesh = jax.sharding.get_mesh()
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
    mesh = self.mesh if self.mesh is not None else self._resolve_mesh()
    if _frames.stack or not _compat.at_top_level():
      return self._traced_call(mesh, args, kwargs)
    runner = self._eager.get(mesh)
    if runner is None:
      runner = self._eager[mesh] = self._eager_runner(mesh)
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
              _canonical(a, max(len(a), len(b)))
              != _canonical(b, max(len(a), len(b)))
              for a, b in zip(in_specs, out_specs)):
            return False
      return True

    placement = Placement(self, mesh)
    return StatefulJit(run, self.name, discover=discover,
                       place=placement.place,
                       place_targets=placement.fast_targets,
                       can_donate=can_donate)

  # -- planning -------------------------------------------------------------

  def _plan(self, mesh: Any, args: tuple, kwargs: dict) -> _Plan:
    leaves, treedef = jax.tree.flatten((args, kwargs))
    for leaf in leaves:
      if isinstance(leaf, State):
        raise TypeError(
            f"{self.name} was passed {leaf._label()} as an argument. States "
            "are not arguments: close over the State in the function (read "
            "`state.value` inside it) and shard_map places it per "
            "state_in_specs.")
    key = _Signature(mesh, treedef, tuple(map(self._aval_key, leaves)))
    plan = self._plans.get(key)
    if plan is None:
      plan = self._plans[key] = self._build_plan(mesh, args, kwargs)
    return plan

  def _aval_key(self, x: Any) -> Hashable:
    # Placement changes an argument's sharding but not the plan, unless the
    # specs are inferred from the arguments' own shardings.
    aval = jax.typeof(x)
    if self.in_specs is None:
      return aval
    return aval.shape, aval.dtype, aval.weak_type

  def _arg_specs(self, mesh: Any, args: tuple) -> list[list[P]]:
    def infer(x):
      spec = explicit_spec(jax.typeof(x), mesh)
      return P() if spec is None else spec
    specs = arg_leaf_specs(self.in_specs, args, infer)
    for i, (arg, arg_specs) in enumerate(zip(args, specs)):
      for (path, leaf), spec in zip(
          jax.tree_util.tree_flatten_with_path(arg)[0], arg_specs):
        owner = (f"{self.name}: positional argument {i}"
                 f"{jax.tree_util.keystr(path)} "
                 f"({jax.typeof(leaf).str_short()})")
        check_spec(spec, jax.typeof(leaf).shape, mesh, owner)
    return specs

  def _state_in_specs(self, state: State, sig: Signature, mesh: Any,
                      which: str = "state_in_specs") -> list[P]:
    treedef, avals = sig
    spec = resolve_state_spec(state, self.state_in_specs)
    owner = f"{self.name}: {state._label()} ({describe_signature(sig)})"
    specs = leaf_specs(spec, jax.tree.unflatten(treedef, avals), owner)
    for s, aval in zip(specs, avals):
      check_spec(s, aval.shape, mesh, f"{owner}, {which} {s}")
    return specs

  def _build_plan(self, mesh: Any, args: tuple, kwargs: dict) -> _Plan:
    arg_specs = self._arg_specs(mesh, args)
    read_specs: dict[int, list[P]] = {}
    touched: list[tuple[State, list[P]]] = []

    def per_shard(state: State, sig: Signature) -> Signature:
      specs = read_specs.get(id(state))
      if specs is None:
        specs = read_specs[id(state)] = self._state_in_specs(state, sig, mesh)
        touched.append((state, specs))
      treedef, avals = sig
      return treedef, tuple(
          shard_aval(a, s, mesh) for a, s in zip(avals, specs))

    shard_args = [
        jax.tree.unflatten(jax.tree.structure(a), [
            jax.ShapeDtypeStruct(shard_aval(jax.typeof(x), s, mesh).shape,
                                 jax.typeof(x).dtype)
            for x, s in zip(jax.tree.leaves(a), specs)])
        for a, specs in zip(args, arg_specs)]
    shard_kwargs = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(jax.typeof(x).shape,
                                       jax.typeof(x).dtype), kwargs)
    discovery = StatefulFunction(
        self.fun, name=self.name, state_signature=per_shard,
        axis_env=[(a, mesh.shape[a]) for a in self._manual_axes(mesh)])
    try:
      d = discovery.discover(*shard_args, **shard_kwargs)
    except Exception as e:
      self._note_replicated_states(e, touched)
      raise

    write_specs = {}
    for state in d.write_states:
      sig = current_signature(state)
      in_specs = read_specs.get(id(state)) or self._state_in_specs(
          state, sig, mesh)
      out = _match_out_spec(state, self.state_out_specs)
      if out is _NO_MATCH:
        write_specs[id(state)] = in_specs
      else:
        owner = f"{self.name}: {state._label()} ({describe_signature(sig)})"
        specs = leaf_specs(out, jax.tree.unflatten(*sig), owner)
        for s, aval in zip(specs, sig[1]):
          check_spec(s, aval.shape, mesh, f"{owner}, state_out_specs {s}")
        write_specs[id(state)] = specs
    return _Plan(d.read_states, d.write_states,
                 {id(s): read_specs[id(s)] for s in d.read_states},
                 write_specs, arg_specs)

  def _note_replicated_states(self, e: BaseException,
                              touched: list[tuple[State, list[P]]]) -> None:
    replicated = [s for s, specs in touched
                  if all(len(p) == 0 for p in specs)
                  and any(a.shape for a in current_signature(s)[1])]
    if not replicated or not isinstance(e, (TypeError, ValueError)):
      return
    names = ", ".join(
        f"{s._label()} ({describe_signature(current_signature(s))})"
        for s in replicated)
    example = replicated[0].name or "state"
    axis = self._manual_axes(self._resolve_mesh())[0]
    e.add_note(
        f"Note: {self.name} runs the function on per-shard values. These "
        f"states were read replicated (whole on every shard, spec P()): "
        f"{names}. If a state should be split across the mesh like the data, "
        f"declare it: state_in_specs={{{example}: P({axis!r})}} (or give the "
        "State a spec=).")

  # -- the traced call ------------------------------------------------------

  def _traced_call(self, mesh: Any, args: tuple, kwargs: dict) -> Any:
    plan = self._plan(mesh, args, kwargs)
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
    arg_spec_trees = tuple(
        _spec_tree(jax.tree.structure(a), specs)
        for a, specs in zip(args, plan.arg_specs))
    write_spec_trees = [
        _spec_tree(current_signature(s)[0], plan.write_specs[id(s)])
        for s in plan.writes]

    if has_explicit_axes(mesh):
      read_vals = [_reshard(v, t, mesh) for v, t in zip(read_vals, read_spec_trees)]
      args = tuple(_reshard(a, t, mesh) for a, t in zip(args, arg_spec_trees))
      kwargs = _reshard(kwargs, P(), mesh)

    body = self._body(mesh, plan)
    mapped = jax.shard_map(
        body, mesh=mesh,
        in_specs=(read_spec_trees, arg_spec_trees, P()),
        out_specs=(self.out_specs, write_spec_trees),
        axis_names=set(self._manual_axes(mesh)) if self.axis_names else set(),
        check_vma=self.check_vma)
    out, new_vals = mapped(read_vals, args, kwargs)
    write_results(list(plan.writes), new_vals, self.name)
    return out

  def _body(self, mesh: Any, plan: _Plan) -> Callable:
    def body(read_vals, args, kwargs):
      frame = ReplayFrame(self.name)
      with frame:
        for s, v in zip(plan.reads, read_vals):
          frame.inject(s, v)
        out = self.fun(*args, **kwargs)
        known = {id(s) for s in plan.writes}
        extra = frame.unknown_reads + [
            s for s in frame.written_states() if id(s) not in known]
        if extra:
          raise StateTraceError(
              f"{self.name} touched {extra[0]._label()} when traced inside "
              "shard_map, but not when its states were discovered for the "
              "same arguments. The function must touch the same States every "
              "time it is traced with the same argument shapes.")
        new_vals = [frame.read(s) for s in plan.writes]
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
        varying = _compat.varying_axes(jax.typeof(x)) & manual
        missing = varying - set(spec_axes(spec))
        if missing:
          axis = sorted(missing)[0]
          raise ValueError(
              f"{self.name}: {s._label()} leaves with spec {spec}, but the "
              f"value written to it differs across mesh axis {axis!r} (it "
              "was computed from per-shard data), so it cannot be stored as "
              f"one value. Declare where it lives, e.g. state_out_specs="
              f"{{{s.name or 'state'}: P({axis!r})}} (and state_in_specs to "
              "match), or make it equal on every shard with "
              f"jax.lax.psum / pmean / all_gather over {axis!r}.")


def _reshard(value: Any, spec_tree: Any, mesh: Any) -> Any:
  """Reshards Explicit-mode leaves whose sharding type differs from the
  spec; values already placed right pass through untouched."""
  def one(spec, sub):
    def leaf(x):
      aval = jax.typeof(x)
      x_spec = explicit_spec(aval, mesh)
      ndim = aval.ndim
      if x_spec is not None and _canonical(x_spec, ndim) == _canonical(spec, ndim):
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
              check_vma: bool = True):
  """``jax.shard_map`` for functions that read and write States.

  The function runs once per shard on per-shard values of its arguments and
  of the States it touches; each state is split as ``state_in_specs`` says
  and written back as ``state_out_specs`` says (by default, as it came in).

  Args:
    fun: the per-shard function; may close over States.
    mesh: a ``jax.sharding.Mesh``; None takes the one set by ``jax.set_mesh``.
    in_specs: one PartitionSpec for every positional argument, a tuple with
      one spec (or spec pytree prefix) per argument, or None to take each
      argument's own (Explicit) sharding. Keyword arguments are replicated.
    out_specs: PartitionSpec pytree prefix of the output (default ``P()``).
    state_in_specs, state_out_specs: None, one PartitionSpec for every state,
      or a dict keyed by States, State subclasses or predicates
      ``(state) -> bool``. First match wins: the State itself, then
      type/predicate keys in dict order, then the state's own ``spec``, then
      ``P()``.
    axis_names: mesh axes the function is manual over (default: all).
    check_vma: as in ``jax.shard_map``.

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
                               state_out_specs, axis_names, check_vma)
  return wrap if fun is None else wrap(fun)
