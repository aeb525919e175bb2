"""brainstate's State methods beyond brainshard's core, as a base of State.

``copy``, ``numel``, ``copy_from``, ``to_state_ref`` / ``update_from_ref`` (see
state_ref.py) and the helpers of ``State.replace``'s brainstate forms
(``replace(_name=...)``, ``replace(other_state)``). Kept here so state.py
holds the value/frame machinery only.

Example:
  >>> import brainshard as bs, jax.numpy as jnp
  >>> a, b = bs.State(jnp.ones(2)), bs.State(jnp.zeros(2))
  >>> a.copy_from(b); a.value, a.numel()
  (Array([0., 0.], dtype=float32), 2)
"""

from __future__ import annotations

from typing import Any

import jax

from brainshard._core.state.ref import StateRef

__all__ = ["StateExtras"]


class StateExtras:
  """Mixed into :class:`~brainshard.State`; uses only its public API and
  ``_label``."""

  def _replaced_fields(self, changes: dict) -> dict:
    fields = dict(name=self.name, spec=self.spec, axes=self.axes)
    for key, new in changes.items():
      field = key[1:] if key == "_name" else key  # brainstate's spelling
      if field not in fields:
        raise TypeError(
            f"{self.label()}.replace() got {key}=; it takes a value and "
            "name= (or _name=), spec=, axes=.")
      fields[field] = new
    return fields

  def _replaced_by(self, other: Any) -> Any:
    # brainstate: replace(state) of the same type is that state
    if type(other) is not type(self):
      raise ValueError(
          f"{self.label()}.replace() was given {other.label()} of another "
          "type; pass a value or a State of the same type.")
    return other

  def copy(self) -> Any:
    """A new State of this type with this one's value, name, spec and axes.

    Example:
      >>> import brainshard as bs, jax.numpy as jnp
      >>> v = bs.State(jnp.ones(2), name='v')
      >>> c = v.copy(); c.value = c.value + 1
      >>> v.value, c.value
      (Array([1., 1.], dtype=float32), Array([2., 2.], dtype=float32))
    """
    return self.replace(self.value)

  def numel(self) -> int:
    """How many numbers the value holds (summed over its leaves).

    Example:
      >>> import brainshard as bs, jax.numpy as jnp
      >>> bs.State({'a': jnp.ones((2, 3)), 'b': jnp.ones(())}).numel()
      7
    """
    return sum(int(getattr(leaf, "size", 1))
               for leaf in jax.tree.leaves(self.value))

  def copy_from(self, other: Any) -> None:
    """Sets this State's value to ``other``'s (a State of the same type)."""
    if type(other) is not type(self):
      raise ValueError(
          f"{self.label()}.copy_from() needs a State of the same type; got "
          f"{other!r}.")
    if other is not self:
      self.value = other.value

  def to_state_ref(self) -> Any:
    """A :class:`~brainshard._core.state.ref.StateRef`: this State's type,
    name, spec, axes and current value as a pytree (brainstate's
    ``to_state_ref``); ``ref.to_state()`` rebuilds a State from it."""
    return StateRef(type(self), self.value, self.name, self.spec, self.axes)

  def update_from_ref(self, ref: Any) -> None:
    """Sets the value to a ``to_state_ref()``'s value."""
    self.value = ref.value
