"""Typed PRNG keys: telling them from other arrays.

A typed key (``jax.random.key``) has an extended dtype that numpy does not
know, so code that stores, moves or measures values checks for it first.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._core.keys import is_typed_key
  >>> is_typed_key(jax.random.key(0)), is_typed_key(jnp.zeros(2))
  (True, False)
  >>> is_typed_key(jax.ShapeDtypeStruct((), jax.random.key(0).dtype))
  True
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["is_typed_key"]


def is_typed_key(x: Any) -> bool:
  """Whether ``x`` (an array, aval or anything with a ``dtype``) holds typed
  PRNG keys; False for raw ``uint32`` keys and for objects without a dtype."""
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
