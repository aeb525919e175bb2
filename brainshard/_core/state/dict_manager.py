"""``StateDictManager``: a dict of named States, read and written as a whole.

brainstate's ``StateDictManager`` with the same methods: collect the States'
values into a dict, assign values back by key, split values by State type.
Only States may be stored; anything else is a ``TypeError`` naming the key.

Example:
  >>> import brainshard as bs, jax.numpy as jnp
  >>> w = bs.ParamState(jnp.ones(2), name='w')
  >>> v = bs.ShortTermState(jnp.zeros(2), name='v')
  >>> states = bs.StateDictManager(w=w, v=v)
  >>> states.assign_values({'v': jnp.full(2, 3.0)})
  >>> params, rest = states.split_values(bs.ParamState)
  >>> sorted(params), sorted(rest), v.value
  (['w'], ['v'], Array([3., 3.], dtype=float32))
"""

from __future__ import annotations

from typing import Any, Callable

from brainshard._core.state.state import State, expect_state

__all__ = ["StateDictManager"]


class StateDictManager(dict):
  """A ``dict`` whose values are States (keys are any hashable names)."""

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__()
    self.update(*args, **kwargs)

  def __setitem__(self, key: Any, value: Any) -> None:
    super().__setitem__(key, expect_state(value, f"StateDictManager[{key!r}]"))

  def update(self, *args: Any, **kwargs: Any) -> None:
    # dict.update bypasses __setitem__; route it through the check
    for key, value in dict(*args, **kwargs).items():
      self[key] = value

  def setdefault(self, key: Any, default: Any = None) -> State:
    if key not in self:
      self[key] = default
    return self[key]

  def collect_values(self) -> dict:
    """``{key: state.value}`` for every entry."""
    return {key: state.value for key, state in self.items()}

  to_dict_values = collect_values

  def assign_values(self, *values: dict) -> None:
    """Writes ``state.value = v`` for each ``{key: v}`` given."""
    for mapping in values:
      if not isinstance(mapping, dict):
        raise TypeError(
            "StateDictManager.assign_values takes dicts {key: value}; got "
            f"{type(mapping).__name__}.")
      for key, value in mapping.items():
        if key not in self:
          raise KeyError(f"StateDictManager.assign_values: no State {key!r}.")
        self[key].value = value

  def split_values(self, *types: type) -> tuple[dict, ...]:
    """Values grouped by the first type each State is an instance of, and a
    last dict with the rest."""
    return tuple({k: s.value for k, s in part.items()}
                 for part in self.split(*types))

  def split(self, *types: type) -> tuple["StateDictManager", ...]:
    """Entries grouped like :meth:`split_values`, as managers of States."""
    parts = tuple(StateDictManager() for _ in range(len(types) + 1))
    for key, state in self.items():
      i = next((i for i, t in enumerate(types) if isinstance(state, t)),
               len(types))
      parts[i][key] = state
    return parts

  def subset(self, which: type | tuple | Callable[[State], bool]
             ) -> "StateDictManager":
    """The entries whose State is an instance of ``which`` (a type or tuple
    of types) or for which ``which(state)`` is true."""
    if isinstance(which, (type, tuple)):
      return StateDictManager(
          {k: s for k, s in self.items() if isinstance(s, which)})
    return StateDictManager({k: s for k, s in self.items() if which(s)})

  def add_unique_key(self, key: Any, state: State) -> None:
    """Adds ``state`` under ``key``; a different State there is an error."""
    expect_state(state, f"StateDictManager[{key!r}]")
    if key in self and self[key] is not state:
      raise ValueError(
          f"StateDictManager: key {key!r} already holds {self[key]!r}.")
    self[key] = state

  def add_unique_value(self, key: Any, state: State) -> bool:
    """Adds ``state`` under ``key`` unless it is already stored (under any
    key): whether it was added."""
    expect_state(state, f"StateDictManager[{key!r}]")
    if any(s is state for s in self.values()):
      return False
    self.add_unique_key(key, state)
    return True

  def __repr__(self) -> str:
    return f"StateDictManager({dict.__repr__(self)})"
