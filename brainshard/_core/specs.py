"""Resolving and validating PartitionSpecs for States and arguments.

Everything here works on shapes and specs only, so ``shard_map`` can reject
bad input before anything is traced.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax
from jax.sharding import AxisType, PartitionSpec as P

from brainshard._core import compat
from brainshard._core.state import filters as state_filter
from brainshard._core.axes import logical_spec
from brainshard._core.state.state import State
from brainshard._core.state.values import describe_value

__all__ = [
    "check_kwarg_specs",
    "StateSpecs", "check_state_specs_arg", "resolve_state_spec",
    "leaf_specs", "check_spec", "shard_aval", "arg_leaf_specs", "manual_spec",
    "match_state_spec", "NO_MATCH", "explicit_spec", "has_explicit_axes",
    "spec_axes", "canonical_spec", "same_spec",
]

# `state_in_specs` / `state_out_specs`: None, one spec, or a dict keyed by
# State objects, State subclasses or predicates.
StateSpecs = Any


def _is_spec_leaf(x: Any) -> bool:
  return x is None or isinstance(x, P)


def check_state_specs_arg(specs: StateSpecs, argname: str) -> None:
  """Rejects malformed ``state_in_specs`` / ``state_out_specs`` up front."""
  state_filter.check_keyed(specs, argname, "a PartitionSpec",
                           lambda x: isinstance(x, P))


NO_MATCH = state_filter.NO_MATCH


def match_state_spec(state: State, specs: StateSpecs) -> Any:
  """The entry of ``specs`` (``state_in_specs`` / ``state_out_specs``) that
  applies to ``state``, or NO_MATCH (see :func:`state_filter.match`)."""
  if isinstance(specs, P):
    return specs
  if not specs:
    return NO_MATCH
  return state_filter.match(state, specs)


def resolve_state_spec(state: State, specs: StateSpecs, *,
                       rules: Any = None, mesh: Any = None,
                       value: Any = None) -> Any:
  """The spec (or pytree of specs) ``state`` gets under ``specs``.

  First match wins: the State itself as a key, then State-subclass and
  predicate keys in dict order, then the state's own ``spec``, then its
  logical ``axes`` mapped by ``rules`` (default: the rules in effect, see
  :func:`brainshard.axis_rules`), then ``P()``. With a ``mesh``, rules that
  name axes it lacks are errors. ``value`` (the state's value or a pytree of
  its avals) gives the structure logical axes are matched against; by
  default the state's global value.
  """
  matched = match_state_spec(state, specs)
  if matched is not NO_MATCH:
    return matched
  if state.spec is not None:
    return state.spec
  if state.axes is not None:
    if value is None:
      value = jax.tree.unflatten(*state.global_signature())
    return logical_spec(state.axes, value, state.label(), rules, mesh)
  return P()


def manual_spec(spec: P, manual: Any) -> P:
  """``spec`` restricted to the ``manual`` mesh axes (others become None).

  Under a partially manual ``shard_map`` a State's spec still says where the
  State lives; only its manual part splits the value the function sees.
  """
  if manual is None:
    return spec
  entries = []
  for entry in spec:
    axes = entry if isinstance(entry, tuple) else (entry,)
    kept = tuple(a for a in axes if a is not None and a in manual)
    entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
  while entries and entries[-1] is None:
    entries.pop()
  return P(*entries)


def leaf_specs(spec: Any, value: Any, owner: str) -> list[P]:
  """One PartitionSpec per leaf of ``value``.

  ``spec`` is one spec for every leaf or a pytree prefix of ``value``.
  """
  leaves = jax.tree.leaves(value)
  if _is_spec_leaf(spec):
    return [P() if spec is None else spec] * len(leaves)
  try:
    full = jax.tree.broadcast(spec, value, is_leaf=_is_spec_leaf)
  except (ValueError, TypeError) as e:
    raise ValueError(
        f"{owner}: the spec pytree {spec} does not match the structure of the "
        f"value {describe_value(value)} (it must be one PartitionSpec or a "
        f"pytree prefix of the value): {e}") from None
  out = jax.tree.leaves(full, is_leaf=_is_spec_leaf)
  return [P() if s is None else s for s in out]


def spec_axes(spec: P) -> list[str]:
  axes = []
  for entry in spec:
    if entry is None:
      continue
    axes.extend(entry if isinstance(entry, tuple) else (entry,))
  return axes


def canonical_spec(spec: P, ndim: int) -> tuple:
  """``spec`` as a full-rank tuple, 1-tuples of axes unwrapped: equal for
  every spelling of one placement (``P('x')``, ``P('x', None)``, ...)."""
  entries = list(spec) + [None] * (ndim - len(spec))
  return tuple(e[0] if isinstance(e, tuple) and len(e) == 1 else e
               for e in entries)


def same_spec(a: P, b: P, ndim: int | None = None) -> bool:
  """Whether ``a`` and ``b`` lay out a value of rank ``ndim`` (default: the
  longer spec's length) alike, however each is spelled.

  Example:
    >>> same_spec(P('x'), P(('x',), None)), same_spec(P('x'), P(None, 'x'))
    (True, False)
  """
  n = max(len(a), len(b)) if ndim is None else ndim
  return canonical_spec(a, n) == canonical_spec(b, n)


def check_spec(spec: P, shape: Sequence[int], mesh: Any, owner: str) -> None:
  """Validates ``spec`` for a value of ``shape`` on ``mesh``.

  Raises a ValueError naming ``owner``, the mesh axis and the shapes when the
  spec names an axis the mesh lacks, is longer than the value's rank, uses an
  axis twice, or splits a dimension that the axes' sizes do not divide.
  """
  if not isinstance(spec, P):
    raise TypeError(f"{owner}: expected a PartitionSpec, got {spec!r}.")
  sizes = dict(mesh.shape)
  shape = tuple(shape)
  seen: set[str] = set()
  for axis in spec_axes(spec):
    if axis not in sizes:
      raise ValueError(
          f"{owner}: its spec {spec} names mesh axis {axis!r}, but the mesh "
          f"has axes {tuple(sizes)} (shape {dict(sizes)}).")
    if axis in seen:
      raise ValueError(
          f"{owner}: its spec {spec} uses mesh axis {axis!r} more than once.")
    seen.add(axis)
  if len(spec) > len(shape):
    raise ValueError(
        f"{owner}: its spec {spec} has {len(spec)} entries but the value has "
        f"shape {shape} (rank {len(shape)}); a spec may not be longer than "
        "the value's rank.")
  for dim, entry in enumerate(spec):
    if entry is None:
      continue
    axes = entry if isinstance(entry, tuple) else (entry,)
    n = math.prod(sizes[a] for a in axes)
    if shape[dim] % n:
      split = " x ".join(f"{a!r} ({sizes[a]})" for a in axes)
      raise ValueError(
          f"{owner}: dimension {dim} of shape {shape} has size {shape[dim]}, "
          f"which is not divisible by the {n} shards of mesh axis {split} "
          f"that spec {spec} splits it over.")


def shard_aval(aval: Any, spec: P, mesh: Any) -> compat.ShapedArray:
  """The per-shard aval of a global ``aval`` split by ``spec`` on ``mesh``."""
  sizes = dict(mesh.shape)
  shape = list(aval.shape)
  for dim, entry in enumerate(spec):
    if entry is None:
      continue
    axes = entry if isinstance(entry, tuple) else (entry,)
    shape[dim] //= math.prod(sizes[a] for a in axes)
  return compat.ShapedArray(tuple(shape), aval.dtype)


def explicit_spec(aval: Any, mesh: Any) -> P | None:
  """The spec an Explicit-mode aval carries on ``mesh``, if any."""
  sharding = getattr(aval, "sharding", None)
  if sharding is None or sharding.mesh.empty:
    return None
  if sharding.mesh.axis_names != mesh.axis_names:
    return None
  return sharding.spec


def arg_leaf_specs(in_specs: Any, args: Sequence[Any],
                   infer: Callable[[Any], P]) -> list[list[P]]:
  """Per-leaf specs of every positional argument.

  ``in_specs`` is one PartitionSpec for all arguments, a tuple with one entry
  per argument (each a pytree prefix of it), or None (each leaf's spec is
  ``infer(leaf)``).
  """
  if in_specs is None:
    return [[infer(x) for x in jax.tree.leaves(a)] for a in args]
  if isinstance(in_specs, P):
    per_arg = [in_specs] * len(args)
  elif isinstance(in_specs, (tuple, list)):
    if len(in_specs) != len(args):
      raise ValueError(
          f"in_specs has {len(in_specs)} entries but the function was called "
          f"with {len(args)} positional argument(s); give one spec (or spec "
          "pytree) per positional argument, or a single PartitionSpec for all "
          "of them. Keyword arguments are always replicated and take no spec.")
    per_arg = list(in_specs)
  else:
    raise TypeError(
        "in_specs must be None, a PartitionSpec, or a tuple with one entry per "
        f"positional argument; got {type(in_specs).__name__}.")
  return [leaf_specs(s, a, f"positional argument {i}")
          for i, (s, a) in enumerate(zip(per_arg, args))]


def has_explicit_axes(mesh: Any) -> bool:
  return any(t == AxisType.Explicit for t in mesh.axis_types)


def check_kwarg_specs(kwarg_specs: Any, static_argnames: tuple) -> dict:
  """Validates ``kwarg_specs`` ({name: spec pytree prefix}) up front."""
  if kwarg_specs is None:
    return {}
  if not isinstance(kwarg_specs, dict) or not all(
      isinstance(k, str) for k in kwarg_specs):
    raise TypeError(
        "kwarg_specs must be a dict {keyword argument name: PartitionSpec or "
        f"spec pytree prefix}}; got {kwarg_specs!r}.")
  static = sorted(set(kwarg_specs) & set(static_argnames))
  if static:
    raise ValueError(
        f"kwarg_specs names {static[0]!r}, which is a static argument; static "
        "arguments are Python values and take no spec.")
  return dict(kwarg_specs)
