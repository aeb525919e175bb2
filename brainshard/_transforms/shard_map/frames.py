"""The frames of a ``bs.shard_map`` body: states at per-shard shapes.

:class:`ShardFrame` replays the body with the per-shard values ``jax.
shard_map`` hands it; :class:`DiscoveryShardFrame` discovers the body's
states while it runs inside a real ``jax.shard_map`` (so per-shard types,
varying axes included, are exactly those of the real call) by cutting each
state's block out of its whole value. Both check a write against the shard
shape of the state's *out* spec, so ``state_out_specs`` may change how a
state is split while its global shape stays the same.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core import compat
from brainshard._core.frames import Frame, ReplayFrame
from brainshard._core.specs import (
    explicit_spec, manual_spec, same_spec, shard_aval, spec_axes)
from brainshard._core.state.state import State
from brainshard._core.state.values import Signature, signature

__all__ = ["ShardFrame", "DiscoveryShardFrame", "unsharded", "reshard"]


class _ShardBody:
  """What both frames of a body know of where it runs: the mesh, its
  manual axes (``manual``, None for all) and their ``(name, size)``
  (``manual_axes``), by which per-shard draws and reports find the
  shard_map bodies they run in (see ``brainshard._transforms.control``)."""

  def __init__(self, name: str, mesh: Any, manual: frozenset | None,
               manual_axes: tuple[tuple[str, int], ...]):
    super().__init__(name)
    self.mesh = mesh
    self.manual = manual
    self.manual_axes = manual_axes


class ShardFrame(_ShardBody, ReplayFrame):
  """The frame of a shard_map body.

  States have per-shard shapes here, also the ones that are written without
  being read first.
  """

  def __init__(self, name: str, mesh: Any, plan: Any,
               manual_axes: tuple[tuple[str, int], ...],
               manual: frozenset | None):
    super().__init__(name, mesh, manual, manual_axes)
    self.plan = plan

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    specs = self.plan.write_specs.get(id(state))
    if specs is None:
      return outer_sig
    return _shard_signature(outer_sig, specs, self.mesh, self.manual)

  def write_signature(self, state: State) -> Signature:
    outer = _outer_signature(self, state)
    specs = self.plan.write_specs.get(id(state))
    if specs is None:  # not written when discovered: replay reports it
      return self.signature_of(state)
    return _shard_signature(outer, specs, self.mesh, self.manual)


def unsharded(state: State, sig: Signature) -> Signature:
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


class DiscoveryShardFrame(_ShardBody, Frame):
  """Discovers a shard_map body's states while it runs inside a real
  ``jax.shard_map``, so per-shard types (varying axes) are exactly those of
  the real call: a state's first read takes the whole value from the outer
  discovery trace and cuts out this shard's block.

  ``layouts`` gives each State's per-leaf specs as discovery meets it
  (``layouts.in_specs(state, sig)``, ``layouts.out_specs(state, sig)``, for
  its global signature ``sig``): the plan's, resolved and validated once.
  """

  def __init__(self, name: str, mesh: Any, manual: frozenset | None,
               layouts: Any, manual_axes: tuple[tuple[str, int], ...]):
    # As in ShardFrame: per-shard draws and reports see the same frames
    # when the body is discovered as when it runs.
    super().__init__(name, mesh, manual, manual_axes)
    self.layouts = layouts

  def first_read(self, state: State, outer_value: Any) -> Any:
    specs = self.layouts.in_specs(state, signature(outer_value))
    leaves, treedef = jax.tree.flatten(outer_value)
    return jax.tree.unflatten(treedef, [
        _local_block(x, manual_spec(spec, self.manual), self.mesh)
        for x, spec in zip(leaves, specs)])

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    return _shard_signature(outer_sig, self.layouts.in_specs(state, outer_sig),
                            self.mesh, self.manual)

  def write_signature(self, state: State) -> Signature:
    outer = _outer_signature(self, state)
    return _shard_signature(outer, self.layouts.out_specs(state, outer),
                            self.mesh, self.manual)


def _outer_signature(frame: Frame, state: State) -> Signature:
  """The state's (global) signature outside a shard_map body's frame."""
  if frame.parent is not None:
    return frame.parent.signature_of(state)
  return state.global_signature()


def _shard_signature(sig: Signature, specs: Sequence[P], mesh: Any,
                     manual: frozenset | None) -> Signature:
  """Per-shard signature of a state whose leaves are split by ``specs``."""
  treedef, avals = sig
  return treedef, tuple(shard_aval(a, manual_spec(spec, manual), mesh)
                        for a, spec in zip(avals, specs))


def reshard(value: Any, spec_tree: Any, mesh: Any,
             manual: frozenset | None = None) -> Any:
  """Reshards Explicit-mode leaves whose sharding type differs from the
  spec (over the ``manual`` axes only, when only some are manual); values
  already placed right pass through untouched."""
  def one(spec, sub):
    def leaf(x):
      aval = jax.typeof(x)
      x_spec = explicit_spec(aval, mesh)
      if x_spec is not None and same_spec(
          manual_spec(x_spec, manual), manual_spec(spec, manual), aval.ndim):
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
