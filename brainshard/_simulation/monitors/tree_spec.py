"""A record's value as JSON and arrays: a dict, list or tuple of arrays
(any nesting) is stored as its arrays plus a JSON spec of its structure, so
that a reader in another process builds the same value again without
pickling a treedef.

Example:
  >>> import numpy as np
  >>> spec, leaves = flatten_tree({'v': np.zeros(2), 'n': (np.ones(1), None)},
  ...                             'monitor x')
  >>> spec
  {'dict': {'v': 0, 'n': {'tuple': [1, None]}}}
  >>> unflatten_tree(spec, [np.zeros(2), np.ones(1)])['n'][0].tolist()
  [1.0]
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["flatten_tree", "count_leaves", "unflatten_tree"]


def flatten_tree(value: Any, what: str) -> tuple[Any, list[np.ndarray]]:
  """A JSON spec of ``value``'s structure (an int per leaf, ``{"dict":
  {...}}``, ``{"list": [...]}``, ``{"tuple": [...]}``) and its leaves."""
  leaves: list[np.ndarray] = []

  def walk(x):
    if type(x) is dict:
      if not all(isinstance(k, str) for k in x):
        raise TypeError(f"{what}: a dict recorded to disk needs str keys")
      return {"dict": {k: walk(v) for k, v in x.items()}}
    if type(x) in (list, tuple):
      return {type(x).__name__: [walk(v) for v in x]}
    if x is None:
      return None
    if not jax.tree_util.treedef_is_leaf(jax.tree.structure(x)):
      raise TypeError(
          f"{what} records a {type(x).__name__}; a record on disk holds "
          "arrays and dicts, lists or tuples of them: return a dict from "
          "the monitor's source")
    leaves.append(np.ascontiguousarray(x))
    return len(leaves) - 1
  return walk(value), leaves


def count_leaves(spec: Any) -> int:
  """How many arrays a spec of :func:`flatten_tree` holds."""
  if isinstance(spec, int):
    return 1
  if spec is None:
    return 0
  kids = next(iter(spec.values()))
  kids = kids.values() if isinstance(kids, dict) else kids
  return sum(count_leaves(v) for v in kids)


def unflatten_tree(spec: Any, leaves: list) -> Any:
  """The value :func:`flatten_tree` described, from its ``leaves``."""
  if isinstance(spec, int):
    return leaves[spec]
  if spec is None:
    return None
  kind, kids = next(iter(spec.items()))
  if kind == "dict":
    return {k: unflatten_tree(v, leaves) for k, v in kids.items()}
  out = [unflatten_tree(v, leaves) for v in kids]
  return out if kind == "list" else tuple(out)
