"""Keeping program inputs placed: the shardings a compiled program reads.

A program's inputs (the states' values and the arguments) must arrive with
the shardings it was compiled for. In the steady state they already do (the
states hold the previous call's outputs), so the check must cost next to
nothing: targets are precomputed per plan, and the generated call
(_core/program/fastcall.py) compares shardings inline, coming here only to move what
is not placed right. Eager ``bs.shard_map``'s own placement (its specs) is
``_transforms/shard_map/placement.py``; the pieces every program shares are here.

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
from typing import Any, NamedTuple, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

from brainshard._core import compat
from brainshard._core.specs import canonical_spec
from brainshard._core.state.state import State

__all__ = ["PlacementHint", "HintedPlacement", "same_placement",
           "keep_placed"]


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
      if t is not None and (len(t) != 1 or not isinstance(s.slot, jax.Array)):
        return None
      targets.append(None if t is None else _full_rank(t[0], s.slot.ndim))
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
          f"{where}: {state.label()} lives on devices "
          f"{_ids(olds)}, where another program placed it, but this program "
          f"reads it on devices {_ids(news)}. Its first placement stays: "
          "every call copies it here (device to device). To avoid the copy, "
          "give this program its own State on its mesh (e.g. "
          "bs.place(state.copy(), mesh)).", UserWarning, stacklevel=2)
    return
  if state.slot is old:
    state.keep_placed_value(new)


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
