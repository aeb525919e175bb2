"""Errors brainshard raises, and keeping library frames out of tracebacks."""

from __future__ import annotations

__all__ = ["StateTraceError", "Rediscover"]


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
