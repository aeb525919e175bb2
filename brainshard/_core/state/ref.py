"""``StateRef``: a State's value with its type and name, as a pytree.

brainstate's ``state.to_state_ref()`` (its ``TreefyState``): a snapshot
that JAX can map over (the value is the child; type, name, ``spec`` and
``axes`` are static), turned back into a State with ``to_state()`` or
written into one with ``state.update_from_ref(ref)``.

Example:
  >>> import jax, brainshard as bs, jax.numpy as jnp
  >>> w = bs.ParamState(jnp.ones(2), name='w')
  >>> ref = jax.tree.map(lambda x: 2 * x, w.to_state_ref())
  >>> ref
  StateRef(ParamState, name='w', value=float32[2])
  >>> w.update_from_ref(ref); w.value
  Array([2., 2.], dtype=float32)
  >>> type(ref.to_state()).__name__
  'ParamState'
"""

from __future__ import annotations

from typing import Any

import jax

from brainshard._core.state.values import describe_value

__all__ = ["StateRef"]


@jax.tree_util.register_pytree_node_class
class StateRef:
  """A State's type, name, ``spec``, ``axes`` and value (the pytree child)."""

  def __init__(self, type_: type, value: Any, name: str | None = None,
               spec: Any = None, axes: Any = None):
    self.type = type_
    self.value = value
    self.name = name
    self.spec = spec
    self.axes = axes

  def to_state(self):
    """A new State of the recorded type holding this value."""
    return self.type(self.value, name=self.name, spec=self.spec,
                     axes=self.axes)

  def replace(self, value: Any) -> "StateRef":
    """This ref with another value."""
    return StateRef(self.type, value, self.name, self.spec, self.axes)

  def copy(self) -> "StateRef":
    """A ref with the same type, value and metadata."""
    return self.replace(self.value)

  def get_metadata(self) -> dict:
    """``name``, ``spec`` and ``axes`` (brainstate's metadata, without the
    type and value)."""
    return dict(name=self.name, spec=self.spec, axes=self.axes)

  def tree_flatten(self):
    return (self.value,), (self.type, self.name, self.spec, self.axes)

  @classmethod
  def tree_unflatten(cls, aux, children):
    type_, name, spec, axes = aux
    return cls(type_, children[0], name, spec, axes)

  def __repr__(self) -> str:
    return (f"StateRef({self.type.__name__}, name={self.name!r}, "
            f"value={describe_value(self.value)})")
