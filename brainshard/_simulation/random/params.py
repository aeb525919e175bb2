"""What a ``bs.random`` draw is given, read as ``numpy.random`` reads it.

Parameters given as Python lists are arrays; concrete parameters are
checked (traced ones cannot raise); ``size=`` is the output shape (default:
the parameters' broadcast shape); a float draw's dtype follows its
parameters; a seed or key (``key=``, ``RandomState(seed)``) is one typed
key.

Example:
  >>> from brainshard._simulation.random.params import _shape, as_key
  >>> _shape(None, [1.0, 2.0]), _shape(3, 0.0)
  ((2,), (3,))
  >>> as_key(0, "example").dtype
  key<fry>
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core import compat
from brainshard._core.keys import is_typed_key

__all__ = ["Size", "as_key", "as_param", "check"]

Size = int | Sequence[int] | None


def as_key(seed_or_key: Any, owner: str) -> jax.Array:
  """A scalar typed key from a seed, a typed key or a raw uint32 key; None
  gives a fresh key from the operating system's entropy."""
  x = seed_or_key
  if x is None:
    return jax.random.wrap_key_data(np.frombuffer(os.urandom(8), np.uint32))
  if is_typed_key(x):
    if x.shape:
      raise ValueError(f"{owner}: expected one PRNG key, got keys of shape {x.shape}.")
    return x
  if isinstance(x, (int, np.integer)) and not -2**63 <= x < 2**63:
    # jax.random.key takes 64 bits; past them a raw OverflowError said less
    raise ValueError(f"{owner}: a seed must be a 64-bit int ([-2**63, 2**63)), "
                     f"got {x}.")
  if isinstance(x, (int, np.integer)) or (
      hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.integer)
      and np.shape(x) == ()):
    return jax.random.key(x)
  if hasattr(x, "dtype") and x.dtype == jnp.uint32 and np.ndim(x) == 1:
    return jax.random.wrap_key_data(x)
  raise TypeError(
      f"{owner}: expected an int seed, a key from jax.random.key or a raw "
      f"uint32 key from jax.random.PRNGKey; got {type(x).__name__}"
      f"{' ' + str(getattr(x, 'dtype', '')) if hasattr(x, 'dtype') else ''}.")


def as_param(x: Any) -> Any:
  """A parameter given as a Python list or tuple (``uniform([0., 2.], 1.)``,
  as numpy.random takes) as an array; anything else as is."""
  if isinstance(x, (list, tuple)):
    return jnp.asarray(x)
  return x


def check(where: str, ok: Any, message: str, *params: Any) -> None:
  """Raises ``ValueError(message)`` when every one of ``params`` is concrete
  and ``ok(*params)`` (on NumPy arrays) is not all true; does nothing for
  traced parameters (a traced value cannot raise).

  Example:
    >>> from brainshard._simulation.random.params import check
    >>> check("power", lambda a: a > 0, "a must be > 0", [1.0, 2.0])
  """
  values = []
  for p in params:
    p = as_param(p)
    if compat.is_traced(p):
      return
    values.append(None if p is None else np.asarray(p))
  if not np.all(ok(*values)):
    raise ValueError(f"bs.random.{where}: {message} (got "
                     f"{', '.join(str(v) for v in values)}).")


def _shape(size: Size, *params: Any) -> tuple[int, ...]:
  shapes = [np.shape(as_param(p)) for p in params if p is not None]
  if size is None:
    return tuple(np.broadcast_shapes(*shapes))
  if isinstance(size, (int, np.integer)):
    shape = (int(size),)
  else:
    shape = tuple(int(s) for s in size)
  try:  # numpy's rule: the parameters broadcast to size
    ok = np.broadcast_shapes(shape, *shapes) == shape
  except ValueError:
    ok = False
  if not ok:
    raise ValueError(f"bs.random: parameters of shapes {shapes} do not "
                     f"broadcast to size={shape}.")
  return shape


def _float_dtype(dtype: Any, *params: Any) -> Any:
  if dtype is not None:
    return dtype
  dt = jnp.result_type(*(as_param(p) for p in params if p is not None), float)
  return dt if jnp.issubdtype(dt, jnp.floating) else jnp.dtype(float)
