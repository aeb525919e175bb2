"""Top level: no brainshard transform and no JAX trace on this thread.

Transforms run eagerly (one cached ``jax.jit``) only at top level, and
placement and checkpoints work only there: they move or store concrete
values, which a trace does not have.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._core.toplevel import is_eager
  >>> is_eager(), bool(jax.jit(lambda x: jnp.asarray(is_eager()))(0))
  (True, False)
"""

from __future__ import annotations

from brainshard._core import compat
from brainshard._core.errors import StateTraceError
from brainshard._core.threads import frame_stack

__all__ = ["is_eager", "require_top_level"]


def is_eager() -> bool:
  """True at top level: no brainshard frame and no JAX trace active."""
  return not frame_stack() and compat.at_top_level()


def require_top_level(where: str, does: str) -> None:
  """Raises StateTraceError unless at top level: ``where`` ``does`` (what
  needs concrete values, e.g. 'reads and writes files')."""
  if not is_eager():
    raise StateTraceError(
        f"{where} {does} and must be called outside every transform (at top "
        "level, not inside bs.jit, bs.shard_map, bs.for_loop or jax.jit).")
