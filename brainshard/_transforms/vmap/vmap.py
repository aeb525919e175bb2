"""Stateful ``vmap``: batch a function that reads and writes States.

``bs.vmap(fun, state_in_axes=...)`` runs ``fun`` once per batch member, as
``jax.vmap`` does, where some States hold one value per member along a batch
axis (an ensemble of networks) and the others are shared by all members.

It works in three steps, like the other transforms:

1. **Discovery** (cached per argument signature): ``fun`` is traced inside a
   real ``jax.vmap``, so every value has exactly its per-member type. A
   batched State's first read takes this member's slice of its whole value
   (indexed by ``jax.lax.axis_index``), so the States need not be known
   before; a State written before it is read is seen without the batch axis
   its ``state_out_axes`` gives it.
2. **The pure function** ``member(state_vals, args, kwargs) -> (out,
   written_vals)`` replays ``fun`` in a ``ReplayFrame`` with the per-member
   state values injected, and ``jax.vmap`` maps it with the states' axes
   beside the arguments' ``in_axes``: the program is the hand-written one.
3. **Write-back** through ``write_results``. An unbatched written State has
   ``out_axes=None``; ``jax.vmap`` refuses a batched value there, which
   becomes an error naming the State (nothing is written).

At top level the whole call runs in one cached ``jax.jit``
(``brainshard._transforms.control.dispatch``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Hashable, NamedTuple

import jax

from brainshard._core import compat
from brainshard._core.discovery import discover
from brainshard._core.frames import (
    Frame, ReplayFrame, current_signature, gather_values, replay,
    write_results)
from brainshard._core.state.state import State
from brainshard._core.threads import frame_stack
from brainshard._core.state.values import (
    describe_signature, describe_value, signature)
from brainshard._transforms.control import dispatch
from brainshard._transforms.vmap.axes import StateAxes, VmapConfig

__all__ = ["vmap"]

class _Plan(NamedTuple):
  reads: tuple[State, ...]         # read before written, first-touch order
  writes: tuple[State, ...]
  in_axes: tuple[int | None, ...]  # per read state
  out_axes: tuple[int | None, ...]  # per written state
  sigs: tuple                      # (state, signature) when discovered


def _leaf_axes(state: State, sig: Any, axis: int, argname: str,
               name: str) -> list[int]:
  """``axis`` made non-negative for each leaf of a state with signature
  ``sig``; an error naming the State where a leaf has too few dimensions."""
  out = []
  for aval in sig[1]:
    ndim = len(aval.shape)
    if not -ndim <= axis < ndim:
      raise ValueError(
          f"{name}: {argname} gives {state.label()} the batch axis {axis}, "
          f"but its value {describe_signature(sig)} has {ndim} dimension"
          f"{'' if ndim == 1 else 's'}. No State was changed.")
    out.append(axis % ndim)
  return out


def _member_signature(state: State, sig: Any, axis: int | None,
                      argname: str, name: str) -> Any:
  """A state's signature inside one member: ``sig`` without the batch axis."""
  if axis is None:
    return sig
  treedef, avals = sig
  axes = _leaf_axes(state, sig, axis, argname, name)
  return treedef, tuple(
      compat.ShapedArray(a.shape[:ax] + a.shape[ax + 1:], a.dtype)
      for a, ax in zip(avals, axes))


class _DiscoveryMember(Frame):
  """One member during discovery, inside a real ``jax.vmap``: a batched
  State's first read takes this member's slice of the whole value."""

  def __init__(self, cfg: VmapConfig, axis: tuple[Hashable, int]):
    super().__init__(cfg.name)
    self.cfg = cfg
    self.vmap_axes = (axis,)

  def first_read(self, state: State, outer_value: Any) -> Any:
    axis = self.cfg.in_axis(state)
    if axis is None:
      return outer_value
    axes = _leaf_axes(state, signature(outer_value), axis, "state_in_axes",
                      self.name)
    index = jax.lax.axis_index(self.vmap_axes[0][0])
    leaves, treedef = jax.tree.flatten(outer_value)
    return jax.tree.unflatten(treedef, [
        jax.lax.dynamic_index_in_dim(_whole_along(x, ax), index, ax,
                                     keepdims=False)
        for x, ax in zip(leaves, axes)])

  def inner_signature(self, state: State, outer_sig: Any) -> Any:
    # Asked for a state written before it is read (a write-only state).
    return _member_signature(state, outer_sig, self.cfg.out_axis(state, False),
                             "state_out_axes", self.name)


def _whole_along(x: Any, axis: int) -> Any:
  """``x`` not split along ``axis`` (it may be, under an Explicit mesh);
  only discovery indexes it, so its other dimensions keep their sharding
  and the member's type is the one ``jax.vmap`` gives."""
  sharding = getattr(jax.typeof(x), "sharding", None)
  spec = getattr(sharding, "spec", None)
  if spec is None or len(spec) <= axis or spec[axis] is None:
    return x
  entries = list(spec)
  entries[axis] = None
  return jax.sharding.reshard(x, jax.sharding.NamedSharding(
      sharding.mesh, jax.sharding.PartitionSpec(*entries)))


class _Member(ReplayFrame):
  """One member during the real run: every state read is injected."""

  def __init__(self, cfg: VmapConfig, plan: _Plan, axis: tuple[Hashable, int]):
    super().__init__(cfg.name)
    self.vmap_axes = (axis,)
    self._out = dict(zip(map(id, plan.writes), plan.out_axes))

  def inner_signature(self, state: State, outer_sig: Any) -> Any:
    return _member_signature(state, outer_sig, self._out.get(id(state)),
                             "state_out_axes", self.name)


def _axis_name(cfg: VmapConfig) -> Hashable:
  if cfg.axis_name is not None:
    return cfg.axis_name
  # Unique per nesting level, so draws in nested bs.vmaps fold in both.
  depth = sum(bool(f.vmap_axes) for f in frame_stack())
  return f"bs.vmap#{depth}"


def _discover(cfg: VmapConfig, fun: Callable, args: tuple, kwargs: dict,
              arg_axes: Any, size: int) -> _Plan:
  leaves, treedef = jax.tree.flatten((args, kwargs))
  key = (treedef, tuple(map(jax.typeof, leaves)))
  plan = cfg.plans.get(key)
  if plan is not None and all(current_signature(s) == sig
                              for s, sig in plan.sigs):
    return plan
  axis = (_axis_name(cfg), size)
  frames: list[_DiscoveryMember] = []

  def member(a, k):
    frame = _DiscoveryMember(cfg, axis)
    frames.append(frame)
    with frame:
      return fun(*a, **k)

  def traced(*leaves):
    a, k = jax.tree.unflatten(treedef, list(leaves))
    jax.vmap(member, in_axes=(arg_axes, 0), axis_name=axis[0],
             axis_size=size)(a, k)
    return ()

  discover(traced, leaves, cfg.name)
  frame = frames[-1]
  reads, writes = tuple(frame.input_states()), tuple(frame.written_states())
  read_ids = set(map(id, reads))
  plan = cfg.plans[key] = _Plan(
      reads, writes, tuple(map(cfg.in_axis, reads)),
      tuple(cfg.out_axis(s, id(s) in read_ids) for s in writes),
      tuple((s, current_signature(s)) for s in frame.touched_states()))
  return plan


def _arg_sizes(arg_axes: Any, args: tuple, kwargs: dict) -> list:
  """``(description, size)`` of each batched argument leaf (empty where the
  axes do not fit the arguments: ``jax.vmap`` reports that)."""
  tree = (args, kwargs)
  try:
    per_leaf = jax.tree.leaves(jax.tree.map(
        lambda ax, sub: jax.tree.map(lambda _: ax, sub), (arg_axes, 0), tree,
        is_leaf=lambda x: x is None), is_leaf=lambda x: x is None)
  except (ValueError, TypeError):
    return []
  out = []
  for (path, x), ax in zip(jax.tree_util.tree_flatten_with_path(tree)[0],
                           per_leaf):
    shape = getattr(x, "shape", ())
    if ax is not None and -len(shape) <= ax < len(shape):
      where = "argument" if path[0].idx == 0 else "keyword argument"
      out.append((f"{where} {jax.tree_util.keystr(path[1:])} "
                  f"({describe_value(x)}) axis {ax}", shape[ax]))
  return out


def _batch_size(cfg: VmapConfig, plan: _Plan, vals: list, arg_sizes: list) -> int:
  """The one batch size of the batched arguments, the batched States (a
  write-only one by its own shape) and ``axis_size``; an error naming them
  where they disagree."""
  sizes = list(arg_sizes)
  read = set(map(id, plan.reads))
  batched = [(s, signature(v), ax, "state_in_axes")
             for s, v, ax in zip(plan.reads, vals, plan.in_axes)] + [
      (s, current_signature(s), ax, "state_out_axes")
      for s, ax in zip(plan.writes, plan.out_axes) if id(s) not in read]
  for s, sig, axis, argname in batched:
    if axis is None:
      continue
    for aval, ax in zip(sig[1], _leaf_axes(s, sig, axis, argname, cfg.name)):
      sizes.append((f"{s.label()} ({describe_signature(sig)}) axis {axis}",
                    aval.shape[ax]))
  if cfg.axis_size is not None:
    sizes.append(("axis_size", cfg.axis_size))
  if not sizes:
    raise ValueError(
        f"{cfg.name}: nothing is batched: no argument has a batch axis "
        "(in_axes) and no State the function reads is batched "
        "(state_in_axes / state_out_axes). Name the batched States, e.g. "
        "state_in_axes={V: 0}, or pass axis_size=.")
  if len({n for _, n in sizes}) > 1:
    raise ValueError(
        f"{cfg.name}: the batched values disagree on the batch size: "
        + "; ".join(f"{what} has size {n}" for what, n in sizes) + ".")
  return sizes[0][1]


def _call(cfg: VmapConfig, fun: Callable, args: tuple, kwargs: dict) -> Any:
  if isinstance(cfg.in_axes, tuple) and len(cfg.in_axes) != len(args):
    raise ValueError(
        f"{cfg.name}: in_axes has {len(cfg.in_axes)} entries, but the "
        f"function was called with {len(args)} positional arguments; give "
        "one entry (an int, None or a pytree prefix) per argument.")
  arg_sizes = _arg_sizes(cfg.in_axes, args, kwargs)
  first = arg_sizes[0][1] if arg_sizes else cfg.axis_size
  # Without a batched argument the size is not known before discovery; the
  # per-member types do not depend on it.
  plan = _discover(cfg, fun, args, kwargs, cfg.in_axes, first or 1)
  vals = gather_values(plan.reads, cfg.name)
  axis = (_axis_name(cfg), _batch_size(cfg, plan, vals, arg_sizes))

  def member(state_vals, a, k):
    return replay(_Member(cfg, plan, axis), fun, a, k,
                  zip(plan.reads, state_vals), plan.writes, "inside bs.vmap")

  def mapped(out_axes, state_out_axes):
    return jax.vmap(member, in_axes=(list(plan.in_axes), cfg.in_axes, 0),
                    out_axes=(out_axes, list(state_out_axes)),
                    axis_name=axis[0], axis_size=axis[1])

  try:
    out, new_vals = mapped(cfg.out_axes, plan.out_axes)(vals, args, kwargs)
  except ValueError as e:
    state = (_batched_write(plan, mapped, (vals, args, kwargs))
             if "out_axes" in str(e) else None)
    if state is None:
      raise
    raise ValueError(
        f"{cfg.name} writes a batched value (one per member) into "
        f"{state.label()}, which is not batched: state_in_axes / "
        "state_out_axes give it no batch axis. Set state_out_axes (e.g. "
        f"state_out_axes={{{state.name or 'state'}: 0}}, and state_in_axes "
        "to match if the function reads it) to keep one value per member, "
        "or write a value that is the same for every member. No State was "
        "changed.") from None
  write_results(list(plan.writes), new_vals, cfg.name)
  return out


def _batched_write(plan: _Plan, mapped: Callable, call: tuple) -> State | None:
  """The unbatched State written with a batched value, found by tracing
  again with only that State's ``out_axes`` left at None (None where the
  error has another cause)."""
  try:
    jax.eval_shape(mapped(0, [0 if a is None else a for a in plan.out_axes]),
                   *call)
  except ValueError:
    return None
  for i, state in enumerate(plan.writes):
    if plan.out_axes[i] is not None:
      continue
    probe = [0 if a is None and j != i else a
             for j, a in enumerate(plan.out_axes)]
    try:
      jax.eval_shape(mapped(0, probe), *call)
    except ValueError:
      return state
  return None


def vmap(fun: Callable | None = None, in_axes: Any = 0, out_axes: Any = 0, *,
         state_in_axes: StateAxes = None, state_out_axes: StateAxes = None,
         axis_name: Hashable | None = None, axis_size: int | None = None):
  """``jax.vmap`` for functions that read and write States.

  ``fun`` runs once per batch member. Each State is either batched (it holds
  one value per member along a batch axis, and each member sees its slice)
  or shared (every member sees the whole value, e.g. a weight matrix).

  Args:
    fun: the per-member function; may close over States.
    in_axes, out_axes, axis_name, axis_size: as in ``jax.vmap`` (keyword
      arguments are batched along axis 0).
    state_in_axes: which States the function reads are batched, and along
      which axis: an int (every State read, except ``RandomState``s), or a
      dict keyed by States, State subclasses or predicates
      ``(state) -> bool`` with int values (first match wins: the State
      itself, then the other keys in dict order). States not named are not
      batched.
    state_out_axes: the same for written States. A read-and-written State
      keeps its in-axis by default; a State that is written without being
      read is batched where ``state_out_axes`` (or a dict entry of
      ``state_in_axes``) says, and each member then sees it unbatched.

  Writing a value that differs across members into an unbatched State is an
  error naming the State; nothing is changed. With no batched argument the
  batch size comes from the batched States (or ``axis_size``).

  Random draws (``bs.random``, ``RandomState``) differ between members: the
  key State stays shared and each member folds its index into the key it
  draws with, reproducibly from the seed.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros((3, 2)), name='v')           # 3 members
    >>> tau = bs.ParamState(jnp.array([1.0, 2.0, 4.0]), name='tau')
    >>> def step(i):
    ...   v.value = v.value + (i - v.value) / tau.value
    ...   return v.value.sum()
    >>> bs.vmap(step, in_axes=None, state_in_axes={v: 0, tau: 0})(1.0)
    Array([2. , 1. , 0.5], dtype=float32)
    >>> v.value[:, 0]
    Array([1.  , 0.5 , 0.25], dtype=float32)
  """
  if fun is None:
    return lambda f: vmap(f, in_axes, out_axes, state_in_axes=state_in_axes,
                          state_out_axes=state_out_axes, axis_name=axis_name,
                          axis_size=axis_size)
  cfg = VmapConfig(fun, in_axes, out_axes, state_in_axes, state_out_axes,
                axis_name, axis_size)

  def impl(f):  # takes the function: the eager cache holds it weakly
    return lambda args, kwargs: _call(cfg, f, args, kwargs)

  @functools.wraps(fun)
  @compat.api_boundary
  def vmapped(*args, **kwargs):
    return dispatch(cfg.name, [fun], cfg.key, impl, (args, kwargs))

  return vmapped
