"""``bs.vmap``'s axes: which States are batched along which axis.

``state_in_axes`` / ``state_out_axes`` are resolved per State like
``state_in_specs`` in shard_map: the State itself as a key first, then
State-subclass and predicate keys in dict order; an int applies to every
State read (RandomStates excepted, see vmap.py).
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping

import jax

from brainshard._core.state import filters as state_filter
from brainshard._core.args import fun_name
from brainshard._core.caches import Cache
from brainshard._core.state.state import State
from brainshard._core.state.filters import NO_MATCH

__all__ = ["StateAxes", "VmapConfig"]

# `state_in_axes` / `state_out_axes`: None, an int, or a dict keyed by States,
# State subclasses or predicates `(state) -> bool`, with int (or None) values.
StateAxes = Any


def _is_axis(x: Any) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def _check_state_axes(axes: StateAxes, argname: str, name: str) -> None:
  state_filter.check_keyed(
      axes, f"{name}: {argname}", "an int", _is_axis,
      "ints (the batch axis of the State's value) or None (not batched)",
      lambda axis: axis is None or _is_axis(axis))


def _match(state: State, axes: StateAxes) -> Any:
  """The axis ``axes`` gives ``state``, or NO_MATCH. An int covers every
  State except those whose class is ``vmap_shared`` (RandomStates: their
  keys are shared and each member folds in its index); a dict is matched by
  :func:`state_filter.match`."""
  if axes is None:
    return NO_MATCH
  if isinstance(axes, int):
    return NO_MATCH if state.vmap_shared else axes
  return state_filter.match(state, axes)


def _freeze(tree: Any) -> Hashable:
  if isinstance(tree, Mapping):  # state axes: keys are hashed by identity
    return tuple(tree.items())
  leaves, treedef = jax.tree.flatten(tree, is_leaf=lambda x: x is None)
  return tuple(leaves), treedef


class VmapConfig:
  """One ``bs.vmap``'s arguments, and its cache of discoveries."""

  def __init__(self, fun, in_axes, out_axes, state_in_axes, state_out_axes,
               axis_name, axis_size):
    self.name = f"bs.vmap({fun_name(fun)})"
    _check_state_axes(state_in_axes, "state_in_axes", self.name)
    _check_state_axes(state_out_axes, "state_out_axes", self.name)
    self.in_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
    self.out_axes = out_axes
    self.state_in_axes = state_in_axes
    self.state_out_axes = state_out_axes
    self.axis_name = axis_name
    self.axis_size = None if axis_size is None else int(axis_size)
    self.key = ("vmap", _freeze(self.in_axes), _freeze(out_axes),
                _freeze(state_in_axes), _freeze(state_out_axes), axis_name,
                self.axis_size)
    self.plans: Cache = Cache()

  def in_axis(self, state: State) -> int | None:
    axis = _match(state, self.state_in_axes)
    return None if axis is NO_MATCH else axis

  def out_axis(self, state: State, read: bool) -> int | None:
    """Where a written state keeps its batch axis: ``state_out_axes``, else
    its in-axis if it is read, else an explicit dict entry of
    ``state_in_axes`` (an int covers only the states read)."""
    axis = _match(state, self.state_out_axes)
    if axis is not NO_MATCH:
      return axis
    if read or not isinstance(self.state_in_axes, int):
      return self.in_axis(state)
    return None
