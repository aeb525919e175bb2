"""Placing program inputs on the mesh, cheaply, and keeping them there.

An eager ``bs.shard_map`` call runs one cached ``jax.jit`` per mesh; its
inputs (the states' values and the arguments) must arrive with the
shardings the program was compiled for. In the steady state they already do
(the states hold the previous call's outputs), so the check must cost next
to nothing: targets are precomputed per plan, and the generated call
(_core/fastcall.py) compares shardings inline, coming here only to move what is
not placed right.

A State is placed once: a read-only State moved for a call (a lookup table
made from a plain array, on one device) gets its placed value back
(:func:`keep_placed`), so later calls move nothing; a written one holds the
program's output, placed already. Programs with a ``shard_map`` inside
(``bs.jit``, loops, the Runner's chunks) place the States it reads up front
(:class:`HintedPlacement`), before the first compile, so no later call
compiles again.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

from brainshard._core import compat
from brainshard._core.compat import ArrayImpl
from brainshard._core.specs import (
    arg_leaf_specs, canonical_spec, check_spec, has_explicit_axes,
    leaf_specs, resolve_state_spec)
from brainshard._core.state import State

if TYPE_CHECKING:
  from brainshard._transforms.shard_map import ShardMappedFunction

__all__ = ["Placement", "PlacementHint", "HintedPlacement", "canonical_spec",
           "same_placement", "keep_placed"]

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
          treedef, leaf_specs(spec, value, state._label()))
    return cached[1]

  def _move(self, x: Any, target: NamedSharding, owner) -> Any:
    """``device_put`` after validating: a shape the mesh cannot split (say, a
    state given a new shape between calls) must name the state or argument,
    not fail inside JAX."""
    check_spec(target.spec, jax.typeof(x).shape, self.mesh, owner())
    return jax.device_put(x, target)

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
    value = state._value
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
    static = self.owner.static_argnums or self.owner.static_argnames
    if isinstance(spec, P) and not static:
      return targets, self._sharding(spec), None
    return targets, None, self._place_args

  def _place_states(self, states, values: list, targets: list,
                    writes: frozenset = frozenset()) -> list:
    """Places each value; a read-only state keeps its placed value (see
    :func:`keep_placed`), so the next call moves nothing."""
    name = self.owner.name
    for i, (x, t) in enumerate(zip(values, targets)):
      owner = lambda s=states[i]: f"{name}: {s._label()}"  # noqa: E731
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
      return self.owner.arg_specs(self.mesh, args)
    return arg_leaf_specs(self.owner.in_specs, args, None)

  def _place_args(self, args: tuple) -> tuple:
    """Places the positional arguments; static ones stay Python values."""
    if self.owner.static_argnums or self.owner.static_argnames:
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
    static = set(self.owner.static_argnames)
    specs = self.owner.kwarg_specs
    name = self.owner.name
    return {k: v if k in static else self._put_tree(
        v, leaf_specs(specs.get(k, P()), v, k),
        lambda k=k: f"{name}: keyword argument {k!r}")
            for k, v in kwargs.items()}




def same_placement(x: jax.Array, target: NamedSharding) -> bool:
  """Whether ``x`` already lies as ``target`` says, however JAX spelled it."""
  s = x.sharding
  if s == target:
    return True
  return (isinstance(s, NamedSharding) and s.mesh == target.mesh and
          canonical_spec(s.spec, x.ndim) == canonical_spec(target.spec, x.ndim))


class PlacementHint(NamedTuple):
  """Where a ``shard_map`` reads a state (``reads``) and leaves it
  (``leaves``, None if not written): one NamedSharding per leaf."""
  reads: tuple
  leaves: tuple | None

  def keeps_layout(self) -> bool:
    """Whether the state leaves laid out as it came in (so its old buffer
    can be donated to the new value)."""
    def same(a, b):
      n = max(len(a.spec), len(b.spec))
      return a.mesh == b.mesh and (
          canonical_spec(a.spec, n) == canonical_spec(b.spec, n))
    return self.leaves is None or all(map(same, self.reads, self.leaves))


class HintedPlacement:
  """Puts the states a compiled program reads where the ``shard_map``
  inside it needs them, before the call, and keeps them there.

  A state created unplaced (``jnp.zeros``) would otherwise enter the first
  call on one device: a written one would leave it spread over the mesh, so
  the second call would see a new input sharding and compile again (and the
  first call's donation would be unusable); a read-only one would be moved
  by ``jax.jit`` on every call. So each hinted state is placed where the
  program will find it in the steady state -- where the ``shard_map``
  leaves it if written, where it reads it if not -- and a read-only state
  keeps its placed value (:func:`keep_placed`).
  """

  def __init__(self, hints: dict, name: str = "a compiled program"):
    self.hints = hints
    self.name = name
    self._warned: set[int] = set()  # states told they get a copy here

  def _target(self, state: State):
    h = self.hints.get(id(state))
    if h is None:
      return None
    return h.reads if h.leaves is None else h.leaves

  def targets(self, states: Sequence[State]) -> list:
    """Per state, its steady-state leaf shardings (None: no hint)."""
    return [self._target(s) for s in states]

  def place(self, plan, cand: list, rest: list, args: tuple, kwargs: dict):
    self._place(plan.cand, cand, frozenset(map(id, plan.cand)))
    self._place(plan.rest, rest, plan.write_ids)
    return cand, rest, args, kwargs

  def _place(self, states: Sequence[State], values: list, writes) -> None:
    for i, (x, target) in enumerate(zip(values, self.targets(states),
                                        strict=True)):
      if target is None:
        continue
      leaves, treedef = jax.tree.flatten(x)
      if compat.is_traced(leaves):
        continue  # called inside an enclosing trace, which places inputs
      if not all(isinstance(a, jax.Array) and same_placement(a, t)
                 for a, t in zip(leaves, target, strict=True)):
        values[i] = jax.tree.unflatten(treedef, [
            jax.device_put(a, t) for a, t in zip(leaves, target, strict=True)])
        if id(states[i]) not in writes:
          keep_placed(states[i], x, values[i], self.name, self._warned)

  def fast_targets(self, plan):
    """One target per read state for the generated call's inline check
    (None: not checked), or None where a hinted state is a pytree."""
    targets = []
    for s, t in zip(plan.reads, self.targets(plan.reads), strict=True):
      if t is not None and (len(t) != 1 or not isinstance(s._value, jax.Array)):
        return None
      targets.append(None if t is None else _full_rank(t[0], s._value.ndim))
    return targets, None, None


def keep_placed(state: State, old: Any, new: Any, where: str,
                warned: set[int]) -> None:
  """Puts ``new`` -- the State's value ``old``, moved where program
  ``where`` reads it -- back into the State, so later calls move nothing.

  The value is the same array, just placed, so this is not a write. Where
  ``old`` already lives on other devices (another program, say a task on
  another sub-mesh, placed it there), that first placement stays: this
  program got a copy, and every call will copy again, so it warns (once
  per program and State) naming the State.
  """
  olds, news = jax.tree.leaves(old), jax.tree.leaves(new)
  if compat.is_traced(news) or not compat.at_top_level():
    return  # under a foreign trace (jax.jit) the move is traced: keep nothing
  if any(map(_placed_elsewhere, olds, news)):
    if id(state) not in warned:
      warned.add(id(state))
      warnings.warn(
          f"{where}: {state._label()} lives on devices "
          f"{_ids(olds)}, where another program placed it, but this program "
          f"reads it on devices {_ids(news)}. Its first placement stays: "
          "every call copies it here (device to device). To avoid the copy, "
          "give this program its own State on its mesh (e.g. "
          "bs.place(state.copy(), mesh)).", UserWarning, stacklevel=2)
    return
  if state._value is old:
    state._keep_placed(new)


def _placed_elsewhere(old: Any, new: Any) -> bool:
  """``old`` lies on a mesh (not just on one device, where a plain array
  starts) whose devices differ from ``new``'s."""
  if not isinstance(old, jax.Array) or not old.committed:
    return False
  s = old.sharding
  return (not isinstance(s, SingleDeviceSharding)
          and s.device_set != new.sharding.device_set)


def _ids(leaves: Sequence[Any]) -> str:
  devices = set()
  for x in leaves:
    if isinstance(x, jax.Array):
      devices |= x.sharding.device_set
  ids = sorted(d.id for d in devices)
  if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
    return f"{ids[0]}-{ids[-1]}"
  return ",".join(map(str, ids))


def _full_rank(sharding: NamedSharding, ndim: int) -> NamedSharding:
  # Outputs come back with full-rank specs (P('x', None) for P('x') on a
  # matrix); a target spelled that way keeps the inline check exact.
  spec = sharding.spec
  if len(spec) >= ndim:
    return sharding
  return NamedSharding(sharding.mesh, P(*spec, *[None] * (ndim - len(spec))))
