"""State filters: which States a key selects.

A filter is a State (itself), a State subclass (its instances) or a
predicate ``(state) -> bool``. ``state_in_specs`` / ``state_out_specs``,
``bs.place(specs=)`` and ``state_in_axes`` / ``state_out_axes`` are dicts
keyed by filters; ``grad_states`` may be one filter. This module is the one
parser (:func:`check_keyed`), the one matcher (:func:`match`: the State
itself first, then subclass and predicate keys in dict order) and the one
error text for all of them.

Example:
  >>> import brainshard as bs, jax.numpy as jnp
  >>> from brainshard._core.state.filters import match, NO_MATCH
  >>> w = bs.ParamState(jnp.zeros(2)); v = bs.State(jnp.zeros(2))
  >>> match(w, {bs.ParamState: 'by type', w: 'by State'})
  'by State'
  >>> match(v, {bs.ParamState: 'by type'}) is NO_MATCH
  True
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from brainshard._core.state.state import State

__all__ = ["FILTERS", "NO_MATCH", "is_filter", "is_state_type", "selects",
           "match", "check_keyed", "bad_form"]

# The one description of a filter, in every error that takes one.
FILTERS = ("States, State subclasses (matching their instances) or "
           "predicates `(state) -> bool`")

NO_MATCH = object()


def is_state_type(key: Any) -> bool:
  return isinstance(key, type) and issubclass(key, State)


def is_filter(key: Any) -> bool:
  """A State, a State subclass, or a predicate (a callable, not a class)."""
  return (isinstance(key, State) or is_state_type(key)
          or (callable(key) and not isinstance(key, type)))


def selects(key: Any, state: State) -> bool:
  """Whether the filter ``key`` selects ``state``."""
  if isinstance(key, State):
    return key is state
  if isinstance(key, type):
    return isinstance(state, key)
  return bool(key(state))


def match(state: State, filters: Mapping) -> Any:
  """The value of the first key of ``filters`` that selects ``state``, or
  NO_MATCH: the State itself first, then subclass and predicate keys in
  dict order (a State key beats a type or predicate listed before it)."""
  for key, value in filters.items():
    if key is state:
      return value
  for key, value in filters.items():
    if not isinstance(key, State) and selects(key, state):
      return value
  return NO_MATCH


def bad_form(where: str, forms: str, got: Any) -> TypeError:
  """The error for an argument that is none of ``forms``."""
  return TypeError(f"{where} must be {forms}; got {type(got).__name__} "
                   f"{got!r:.60}.")


def check_keyed(filters: Any, where: str, single: str,
                is_single: Callable[[Any], bool],
                values: str = "", value_ok: Callable[[Any], bool] | None = None
                ) -> None:
  """Rejects anything but None, one value for every State (``is_single``,
  described by ``single``) or a dict keyed by filters, up front; with
  ``value_ok``, each dict value too (described by ``values``)."""
  if filters is None or is_single(filters):
    return
  if not isinstance(filters, Mapping):
    raise bad_form(where, f"None, {single}, or a dict keyed by {FILTERS}",
                   filters)
  for key, value in filters.items():
    if not is_filter(key):
      raise TypeError(
          f"{where} has the key {key!r} ({type(key).__name__}); keys must be "
          f"{FILTERS}.")
    if value_ok is not None and not value_ok(value):
      raise TypeError(
          f"{where} maps {key!r} to {value!r}; values must be {values}.")
