"""Eager ``bs.shard_map``'s placement: its inputs put where its specs say.

An eager ``bs.shard_map`` call runs one cached ``jax.jit`` per mesh
(``_core/program/program.py``) whose inputs must arrive as the shard_map's specs lay
them out. :class:`Placement` precomputes each state's and argument's target
per plan, so a call whose inputs are placed right costs one sharding
comparison per leaf; what is shared with every program (``same_placement``,
``keep_placed``) is ``_core/program/placement.py``.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.compat import ArrayImpl
from brainshard._core.program.placement import keep_placed, same_placement
from brainshard._core.specs import (
    arg_leaf_specs, check_spec, has_explicit_axes, leaf_specs,
    resolve_state_spec)
from brainshard._core.state.state import State

__all__ = ["Placement"]


_ARRAYS = frozenset({ArrayImpl})


class Placement:
  """Puts eager inputs on the mesh, unless they are already placed right.

  Per plan of the compiled program it precomputes each state's target
  sharding, and per argument structure each leaf's, so a call whose inputs
  are placed right (the steady state: the states hold the previous call's
  outputs) costs one sharding comparison per leaf and rebuilds nothing.
  ``owner`` is the function's ``ShardPlanner`` (its name, specs and static
  arguments).
  """

  def __init__(self, owner: Any, mesh: Any):
    self.owner = owner
    self.mesh = mesh
    # Explicit-mode outputs come back with full-rank specs (P('x', None) for
    # P('x') on a matrix); targets spelled that way keep the inline check
    # of the generated call on its fast path.
    self._full_rank = has_explicit_axes(mesh)
    self._shardings: dict[P, NamedSharding] = {}
    self._state_specs: dict[int, tuple[Any, list[P]]] = {}
    self._arg_targets: dict[Any, list[NamedSharding]] = {}
    self._plan_targets: dict[int, tuple[Any, list, list]] = {}
    self._warned: set[int] = set()  # states told they get a copy here

  def _sharding(self, spec: P) -> NamedSharding:
    s = self._shardings.get(spec)
    if s is None:
      s = self._shardings[spec] = NamedSharding(self.mesh, spec)
    return s

  # -- states -----------------------------------------------------------------

  def _specs_of_state(self, state: State, value: Any) -> list[P]:
    treedef = jax.tree.structure(value)
    cached = self._state_specs.get(id(state))
    if cached is None or cached[0] != treedef:
      spec = resolve_state_spec(state, self.owner.state_in_specs, value=value)
      cached = self._state_specs[id(state)] = (
          treedef, leaf_specs(spec, value, state.label()))
    return cached[1]

  def _move(self, x: Any, target: NamedSharding, owner) -> Any:
    """``device_put``; where JAX refuses, the spec is validated: a shape the
    mesh cannot split (say, a state given a new shape between calls) must
    name the state or argument. The plan validated the shapes it was made
    for, so a placement that succeeds validates nothing again."""
    try:
      return jax.device_put(x, target)
    except Exception as e:  # JAX's ValueError, AssertionError, ...
      refused = e
    # outside the handler: the named error is raised without JAX's as its
    # context; a spec that validates leaves JAX's error as it was
    check_spec(target.spec, jax.typeof(x).shape, self.mesh, owner())
    raise refused

  def _put_tree(self, value: Any, specs: Sequence[P], owner) -> Any:
    leaves, treedef = jax.tree.flatten(value)
    out, moved = [], False
    for x, spec in zip(leaves, specs, strict=True):
      target = self._sharding(spec)
      if not (isinstance(x, jax.Array) and same_placement(x, target)):
        x, moved = self._move(x, target, owner), True
      out.append(x)
    # Nothing moved: the value itself, so a State placed right keeps its
    # value object (and the caller sees that nothing needs keeping).
    return jax.tree.unflatten(treedef, out) if moved else value

  def _state_target(self, state: State) -> NamedSharding | None:
    """The one target of a state whose value is a single array; None for
    pytree values (placed leaf by leaf)."""
    value = state.slot
    if not isinstance(value, jax.Array):
      return None
    spec = self._specs_of_state(state, value)[0]
    if self._full_rank:
      spec = P(*spec, *[None] * (value.ndim - len(spec)))
    return self._sharding(spec)

  def _targets(self, plan) -> tuple[list, list]:
    entry = self._plan_targets.get(id(plan))
    if entry is None or entry[0] is not plan:
      entry = self._plan_targets[id(plan)] = (
          plan, [self._state_target(s) for s in plan.cand],
          [self._state_target(s) for s in plan.rest])
    return entry[1], entry[2]

  def fast_targets(self, plan):
    """For the generated call: every read state's target sharding (None if
    some state takes per-leaf pytree specs), and the target of every
    positional argument when ``in_specs`` is one PartitionSpec (else
    ``_place_args`` to run)."""
    cand, rest = self._targets(plan)
    targets = cand + rest
    if any(t is None for t in targets):
      return None
    spec = self.owner.in_specs
    static = self.owner.static.argnums or self.owner.static.argnames
    if isinstance(spec, P) and not static:
      return targets, self._sharding(spec), None
    return targets, None, self._place_args

  def _place_states(self, states, values: list, targets: list,
                    writes: frozenset = frozenset()) -> list:
    """Places each value; a read-only state keeps its placed value (see
    :func:`keep_placed`), so the next call moves nothing."""
    name = self.owner.name
    for i, (x, t) in enumerate(zip(values, targets)):
      owner = lambda s=states[i]: f"{name}: {s.label()}"  # noqa: E731
      if t is not None and type(x) is ArrayImpl:
        if not same_placement(x, t):
          values[i] = self._move(x, t, owner)
      else:
        values[i] = self._put_tree(x, self._specs_of_state(states[i], x), owner)
      if values[i] is not x and id(states[i]) not in writes:
        keep_placed(states[i], x, values[i], name, self._warned)
    return values

  # -- arguments --------------------------------------------------------------

  def _arg_specs(self, args: tuple) -> list[list[P]]:
    if self.owner.in_specs is None:  # follows the arguments' own shardings
      return self.owner.arg_leaf_specs(self.mesh, args)
    return arg_leaf_specs(self.owner.in_specs, args, None)

  def _place_args(self, args: tuple) -> tuple:
    """Places the positional arguments; static ones stay Python values."""
    if self.owner.static.argnums or self.owner.static.argnames:
      call = self.owner.static.split(args, {})
      static = dict(call.static[0])
      placed = iter(self._place_dynamic(tuple(call.args)))
      return tuple(static[i] if i in static else next(placed)
                   for i in range(len(args)))
    return self._place_dynamic(args)

  def _place_dynamic(self, args: tuple) -> tuple:
    if self.owner.in_specs is not None and _ARRAYS.issuperset(map(type, args)):
      leaves, treedef, key = args, None, len(args)  # flat: no tree walk
    else:
      leaves, treedef = jax.tree.flatten(args)
      if self.owner.in_specs is None:
        key = (treedef, tuple(map(jax.typeof, leaves)))
      else:
        key = treedef
    targets = self._arg_targets.get(key)
    if targets is None:
      targets = self._arg_targets[key] = [
          self._sharding(spec)
          for specs in self._arg_specs(args) for spec in specs]
    moved = None
    name = self.owner.name
    for i, (x, t) in enumerate(zip(leaves, targets)):
      if not (type(x) is ArrayImpl and same_placement(x, t)):
        if moved is None:
          moved = list(leaves)
        moved[i] = self._move(
            x, t, lambda i=i: f"{name}: positional argument leaf {i}")
    if moved is None:
      return args
    return tuple(moved) if treedef is None else jax.tree.unflatten(treedef, moved)

  def place(self, plan, cand: list, rest: list, args: tuple, kwargs: dict):
    cand_targets, rest_targets = self._targets(plan)
    cand = self._place_states(plan.cand, cand, cand_targets)
    rest = self._place_states(plan.rest, rest, rest_targets, plan.write_ids)
    if args:
      args = self._place_args(args)
    if kwargs:
      kwargs = self._place_kwargs(kwargs)
    return cand, rest, args, kwargs

  def _place_kwargs(self, kwargs: dict) -> dict:
    """Keyword arguments go where ``kwarg_specs`` says (default replicated);
    static ones stay Python values."""
    static = set(self.owner.static.argnames)
    specs = self.owner.kwarg_specs
    name = self.owner.name
    return {k: v if k in static else self._put_tree(
        v, leaf_specs(specs.get(k, P()), v, k),
        lambda k=k: f"{name}: keyword argument {k!r}")
            for k, v in kwargs.items()}
