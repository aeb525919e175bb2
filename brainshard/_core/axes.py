"""Logical axis names for States and the rules that map them to mesh axes.

A State may name its dimensions with *logical* axes (``axes=('neuron',
None)``) instead of mesh axes. Rules such as ``{'neuron': 'x'}`` turn those
names into a ``PartitionSpec`` for whichever mesh is in use, so the same model
code runs on a 1-D data mesh, a 2-D mesh or a single device by changing the
rules only. Rules come from :func:`axis_rules` (a thread-local, nestable
context) and/or the ``axis_rules=`` argument of ``shard_map`` / ``place`` /
``sharded_init``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Mapping, Sequence

import jax
from jax.sharding import PartitionSpec as P

__all__ = ["axis_rules", "current_axis_rules", "Rules", "freeze_rules",
           "merged_rules", "logical_spec"]

# A rule's target: one mesh axis, a tuple of mesh axes (the dimension is split
# over all of them), or None (never split).
Target = Any
# Rules as stored: a tuple of (logical name, target) pairs sorted by name, so
# they hash and can be part of cache keys.
Rules = tuple


def _check_target(name: str, target: Any) -> Target:
  if target is None or isinstance(target, str):
    return target
  if isinstance(target, (tuple, list)) and all(
      isinstance(a, str) for a in target):
    return tuple(target)
  raise TypeError(
      f"axis rule {name!r} -> {target!r}: a logical axis must map to a mesh "
      "axis name, a tuple of mesh axis names, or None (not split).")


def freeze_rules(rules: Any) -> Rules:
  """Validates ``rules`` (a dict or a sequence of pairs) into hashable form."""
  if rules is None:
    return ()
  if isinstance(rules, tuple) and all(
      isinstance(r, tuple) and len(r) == 2 for r in rules):
    items = list(rules)
  elif isinstance(rules, Mapping):
    items = list(rules.items())
  elif isinstance(rules, Sequence) and not isinstance(rules, str):
    items = list(rules)
    if not all(isinstance(r, (tuple, list)) and len(r) == 2 for r in items):
      raise TypeError(
          "axis rules must be a dict {logical name: mesh axis} or a sequence "
          f"of (logical name, mesh axis) pairs; got {rules!r}.")
  else:
    raise TypeError(
        "axis rules must be a dict {logical name: mesh axis} or a sequence of "
        f"(logical name, mesh axis) pairs; got {type(rules).__name__}.")
  out: dict[str, Target] = {}
  for name, target in items:
    if not isinstance(name, str):
      raise TypeError(f"axis rules: logical axis names are strings, got {name!r}.")
    out[name] = _check_target(name, target)  # later pairs win, as in dict()
  return tuple(sorted(out.items()))


def merged_rules(base: Rules, extra: Rules) -> Rules:
  """``base`` updated with ``extra`` (entries of ``extra`` win)."""
  if not extra:
    return base
  if not base:
    return extra
  return tuple(sorted({**dict(base), **dict(extra)}.items()))


class _RuleStack(threading.local):
  def __init__(self):
    self.stack: list[Rules] = []


_rules = _RuleStack()


def current_axis_rules() -> dict[str, Target]:
  """The logical-axis rules in effect on this thread (a fresh dict).

  The rules of the innermost :func:`axis_rules` block (nested blocks are
  merged, the inner entries winning), as ``{logical name: mesh axis}``;
  ``{}`` outside every block. Changing the returned dict changes nothing.

  Example:
    >>> import brainshard as bs
    >>> bs.current_axis_rules()
    {}
    >>> with bs.axis_rules({'neuron': 'x'}):
    ...   with bs.axis_rules({'batch': None}):
    ...     print(bs.current_axis_rules())
    {'batch': None, 'neuron': 'x'}
  """
  return dict(_rules.stack[-1]) if _rules.stack else {}


def current_rules() -> Rules:
  """The rules in effect, in hashable form (``()`` when none are set)."""
  stack = _rules.stack
  return stack[-1] if stack else ()


@contextlib.contextmanager
def axis_rules(rules: Any) -> Iterator[dict[str, Target]]:
  """Maps logical axis names to mesh axes within a ``with`` block.

  Nested blocks see the outer rules updated with their own (inner entries
  win). Rules are read when a function is traced: a ``bs.jit`` function
  traced under one set of rules keeps them for later calls with the same
  signature, so set rules before the first call (or pass ``axis_rules=`` to
  ``shard_map``, which becomes part of its cache key).

  Args:
    rules: ``{logical name: mesh axis}`` (or a sequence of pairs); a target
      may be a mesh axis name, a tuple of them, or None (never split).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.State(jnp.zeros((8, 4)), axes=('neuron', None))
    >>> with bs.axis_rules({'neuron': 'x'}):
    ...   bs.resolve_spec(w)
    P('x', None)
  """
  frozen = merged_rules(current_rules(), freeze_rules(rules))
  _rules.stack.append(frozen)
  try:
    yield dict(frozen)
  finally:
    _rules.stack.pop()


@contextlib.contextmanager
def using_rules(rules: Rules) -> Iterator[None]:
  """Pushes already merged, frozen rules (no-op for the rules in effect)."""
  if rules == current_rules():
    yield
    return
  _rules.stack.append(rules)
  try:
    yield
  finally:
    _rules.stack.pop()


def _is_axes_leaf(x: Any) -> bool:
  return x is None or (isinstance(x, (tuple, list)) and all(
      e is None or isinstance(e, str) for e in x))


def _describe_rules(rules: Rules) -> str:
  return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in rules) + "}"


def _one_spec(axes: Any, rules: dict, owner: str, rules_t: Rules,
              mesh: Any) -> P:
  if axes is None:
    return P()
  entries = []
  for name in axes:
    if name is None:
      entries.append(None)
      continue
    if name not in rules:
      raise ValueError(
          f"{owner} has logical axes {tuple(axes)}, but no axis rule maps the "
          f"logical axis {name!r} (rules in effect: {_describe_rules(rules_t)}"
          f"). Add one, e.g. `with bs.axis_rules({{{name!r}: 'x'}}):` or "
          f"axis_rules={{{name!r}: 'x'}}; map it to None to keep that "
          "dimension whole.")
    target = rules[name]
    if mesh is not None and target is not None:
      names = mesh.axis_names
      for axis in (target if isinstance(target, tuple) else (target,)):
        if axis not in names:
          raise ValueError(
              f"{owner} has logical axes {tuple(axes)}; the rule {name!r} -> "
              f"{target!r} names mesh axis {axis!r}, but the mesh has axes "
              f"{tuple(names)} (rules in effect: {_describe_rules(rules_t)}).")
    entries.append(target)
  used: dict[str, str] = {}
  for name, target in zip(axes, entries):
    for axis in (target if isinstance(target, tuple) else (target,)):
      if axis is None:
        continue
      if axis in used:
        raise ValueError(
            f"{owner} has logical axes {tuple(axes)}, and the rules map both "
            f"{used[axis]!r} and {name!r} to mesh axis {axis!r}; a mesh axis "
            "can split only one dimension. Name one of the dimensions None "
            f"(e.g. axes=('{used[axis]}', None)) or map it elsewhere.")
      used[axis] = name
  return P(*entries)


def logical_spec(axes: Any, value: Any, owner: str, rules: Rules | None = None,
                 mesh: Any = None) -> Any:
  """The PartitionSpec (pytree) for logical ``axes`` of ``value``.

  ``axes`` is one tuple of names for every leaf or a pytree prefix of
  ``value`` whose leaves are such tuples; ``rules`` default to the ones in
  effect. With a ``mesh``, rules naming axes it lacks are errors.
  """
  rules_t = current_rules() if rules is None else rules
  rules_d = dict(rules_t)
  if _is_axes_leaf(axes):
    return _one_spec(axes, rules_d, owner, rules_t, mesh)
  try:
    full = jax.tree.broadcast(axes, value, is_leaf=_is_axes_leaf)
  except (ValueError, TypeError) as e:
    raise ValueError(
        f"{owner}: its axes {axes} do not match the structure of its value "
        "(axes must be one tuple of logical names, or a pytree prefix of the "
        f"value with such tuples as leaves): {e}") from None
  leaves, treedef = jax.tree.flatten(full, is_leaf=_is_axes_leaf)
  return jax.tree.unflatten(
      treedef, [_one_spec(a, rules_d, owner, rules_t, mesh) for a in leaves])
