"""The errors brainshard raises, and ``Rediscover``, the signal a trace raises
when it finds new States. (Keeping library frames out of tracebacks is
compat.py's: ``hide_from_tracebacks``, ``api_boundary``.)"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["StateTraceError", "Rediscover", "check_not_scalar_list"]


class StateTraceError(RuntimeError):
  """A State was used in a way that would leak a tracer or a dead value.

  Raised, before anything is changed, when a State is written under a JAX
  transform brainshard does not manage (``jax.jit``, ``jax.vmap``,
  ``jax.lax.scan`` ...; use the ``bs.`` transform instead), when a State
  created inside a transformed function is read after it returned, when a
  function touches different States on a later trace than it did when its
  States were discovered, and when placement or checkpointing is called
  inside a transform. The message names the State (its type, name and
  where it was created). It is a ``RuntimeError``.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> v = bs.State(jnp.zeros(3), name='v')
    >>> def step():
    ...   v.value = v.value + 1.0
    >>> try:
    ...   jax.jit(step)()
    ... except bs.StateTraceError as e:
    ...   print('error:', type(e).__name__)
    error: StateTraceError
    >>> bs.jit(step)(); v.value
    Array([1., 1., 1.], dtype=float32)
  """


class Rediscover(Exception):
  """Internal: a trace touched States outside the program's known set; the
  program is grown to the union and the call retried (program.py)."""

  def __init__(self, reads, writes):
    super().__init__("internal: brainshard state set changed")
    self.reads = list(reads)
    self.writes = list(writes)


_SCALARS = (int, float, complex, bool, np.generic)


def check_not_scalar_list(value: Any, owner: str) -> None:
  """A list or tuple of numbers is meant as one array; JAX would take it as
  a pytree of scalar leaves (`v.value + 1` is then list concatenation, and a
  long list one input per number), so it is an error saying what to write.
  A list of arrays, a dict or a named tuple of scalars stay pytrees.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> try:
    ...   bs.State([1, 2, 3], name='w')
    ... except TypeError as e:
    ...   print(str(e)[:52])
    State('w'): the value is a list of 3 Python numbers,
    >>> bs.State(jnp.asarray([1, 2, 3]), name='w')
    State(name='w', value=int32[3])
  """
  if type(value) not in (list, tuple) or not value:
    return
  leaves = jax.tree.leaves(value)
  if leaves and all(isinstance(x, _SCALARS) for x in leaves):
    text = repr(value)
    text = text if len(text) <= 40 else f"{text[:36]}...{text[-1]}"
    try:
      shape = f" of shape {np.shape(value)}"
    except ValueError:  # ragged: no array at all
      shape = ""
    raise TypeError(
        f"{owner}: the value is a {type(value).__name__} of {len(leaves)} "
        f"Python numbers, {text}, which JAX would take as a pytree of "
        f"{len(leaves)} separate scalars, not one array{shape}. Pass an "
        "array: "
        f"jnp.asarray({text if len(text) <= 20 else '...'}) or "
        "np.array(...). (A list or tuple of arrays is a valid pytree value.)")
