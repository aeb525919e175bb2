"""Values and their signatures: what a State holds, and how messages name it.

A State's value is a pytree of arrays; its *signature* is the treedef and the
leaf avals, the thing transforms compare to decide whether a cached trace
still fits. ``describe_value`` / ``describe_signature`` print them the way
every error message does (``float32[16]``).

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._core.state.values import (
  ...     describe_signature, describe_value, signature)
  >>> describe_value({'a': jnp.zeros(3), 'b': jnp.ones((2, 2), jnp.int32)})
  '{a: float32[3], b: int32[2,2]}'
  >>> describe_signature(signature(jnp.zeros(3)))
  'float32[3]'
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["Signature", "signature", "describe_value", "describe_signature",
           "to_array", "canonical"]

Signature = tuple  # (treedef, tuple of leaf avals)


def signature(value: Any) -> Signature:
  """The value's treedef and leaf avals."""
  leaves, treedef = jax.tree.flatten(value)
  return treedef, tuple(map(jax.typeof, leaves))


def describe_value(value: Any) -> str:
  """``float32[16]`` for an array leaf, the pytree of those for a pytree."""
  leaves, treedef = jax.tree.flatten(value)
  shorts = [_short(x) for x in leaves]
  if treedef == jax.tree.structure(0):
    return shorts[0]
  return str(jax.tree.unflatten(treedef, shorts)).replace("'", "")


def describe_signature(sig: Signature) -> str:
  treedef, avals = sig
  shorts = [_aval_short(a) for a in avals]
  if treedef == jax.tree.structure(0):
    return shorts[0]
  return str(jax.tree.unflatten(treedef, shorts)).replace("'", "")


def _short(x: Any) -> str:
  try:
    return _aval_short(jax.typeof(x))
  except TypeError:
    return type(x).__name__


def _aval_short(aval: Any) -> str:
  # ``f32[16@x]``-style, without the ``{V:x}`` varying-axes suffix that
  # values inside shard_map carry: messages are about shapes and dtypes.
  return re.sub(r"\{V:[^}]*\}", "", aval.str_short())


def to_array(x: Any, owner: str) -> Any:
  """``x`` as a JAX array; ``owner`` names the State in the error."""
  if not isinstance(x, jax.Array):
    try:
      x = jnp.asarray(x)
    except TypeError:
      raise TypeError(
          f"{owner}: a State value must be a pytree of arrays, but one leaf is "
          f"{type(x).__name__} ({x!r:.60}).") from None
  return x


def _strong(x: Any) -> Any:
  # Weak types (from Python scalars) would make `State(0.0)` and the strongly
  # typed value a transform writes back two different signatures.
  if jax.typeof(x).weak_type:
    return jax.lax.convert_element_type(x, x.dtype)
  return x


def canonical(value: Any, owner: str) -> Any:
  """A State's stored form of ``value``: JAX arrays with strong dtypes."""
  return jax.tree.map(lambda x: _strong(to_array(x, owner)), value)
