"""Placing eager ``shard_map`` inputs on the mesh, cheaply.

An eager ``bs.shard_map`` call runs one cached ``jax.jit`` per mesh; its
inputs (the states' values and the arguments) must arrive with the
shardings the program was compiled for. In the steady state they already do
(the states hold the previous call's outputs), so the check must cost next
to nothing: targets are precomputed per plan, and the generated call
(_fastcall.py) compares shardings inline, coming here only to move what is
not placed right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._compat import ArrayImpl
from brainshard._specs import arg_leaf_specs, leaf_specs, resolve_state_spec
from brainshard._state import State

if TYPE_CHECKING:
  from brainshard._shard_map import ShardMappedFunction

__all__ = ["Placement"]

_ARRAYS = frozenset({ArrayImpl})


class Placement:
  """Puts eager inputs on the mesh, unless they are already placed right.

  Per plan of the compiled program it precomputes each state's target
  sharding, and per argument structure each leaf's, so a call whose inputs
  are placed right (the steady state: the states hold the previous call's
  outputs) costs one sharding comparison per leaf and rebuilds nothing.
  """

  def __init__(self, owner: ShardMappedFunction, mesh: Any):
    self.owner = owner
    self.mesh = mesh
    self._shardings: dict[P, NamedSharding] = {}
    self._state_specs: dict[int, tuple[Any, list[P]]] = {}
    self._arg_targets: dict[Any, list[NamedSharding]] = {}
    self._plan_targets: dict[int, tuple[Any, list, list]] = {}

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
      spec = resolve_state_spec(state, self.owner.state_in_specs)
      cached = self._state_specs[id(state)] = (
          treedef, leaf_specs(spec, value, state._label()))
    return cached[1]

  def _put_tree(self, value: Any, specs: Sequence[P]) -> Any:
    leaves, treedef = jax.tree.flatten(value)
    out = []
    for x, spec in zip(leaves, specs):
      target = self._sharding(spec)
      if not (isinstance(x, jax.Array) and x.sharding == target):
        x = jax.device_put(x, target)
      out.append(x)
    return jax.tree.unflatten(treedef, out)

  def _state_target(self, state: State) -> NamedSharding | None:
    """The one target of a state whose spec is a single PartitionSpec (any
    array value takes it whole); None for per-leaf pytree specs."""
    spec = resolve_state_spec(state, self.owner.state_in_specs)
    if spec is None or isinstance(spec, P):
      return self._sharding(P() if spec is None else spec)
    return None

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
    if isinstance(spec, P):
      return targets, self._sharding(spec), None
    return targets, None, self._place_args

  def _place_states(self, states, values: list, targets: list) -> list:
    for i, (x, t) in enumerate(zip(values, targets)):
      if t is not None and type(x) is ArrayImpl:
        if x.sharding != t:
          values[i] = jax.device_put(x, t)
      else:
        values[i] = self._put_tree(x, self._specs_of_state(states[i], x))
    return values

  # -- arguments --------------------------------------------------------------

  def _arg_specs(self, args: tuple) -> list[list[P]]:
    if self.owner.in_specs is None:  # follows the arguments' own shardings
      return self.owner._arg_specs(self.mesh, args)
    return arg_leaf_specs(self.owner.in_specs, args, None)

  def _place_args(self, args: tuple) -> tuple:
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
    for i, (x, t) in enumerate(zip(leaves, targets)):
      if not (type(x) is ArrayImpl and x.sharding == t):
        if moved is None:
          moved = list(leaves)
        moved[i] = jax.device_put(x, t)
    if moved is None:
      return args
    return tuple(moved) if treedef is None else jax.tree.unflatten(treedef, moved)

  def place(self, plan, cand: list, rest: list, args: tuple, kwargs: dict):
    cand_targets, rest_targets = self._targets(plan)
    cand = self._place_states(plan.cand, cand, cand_targets)
    rest = self._place_states(plan.rest, rest, rest_targets)
    if args:
      args = self._place_args(args)
    if kwargs:
      kwargs = {k: self._put_tree(v, [P()] * len(jax.tree.leaves(v)))
                for k, v in kwargs.items()}
    return cand, rest, args, kwargs
