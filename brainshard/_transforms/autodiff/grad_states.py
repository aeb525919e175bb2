"""``grad_states``: which States a gradient is taken with respect to.

A ``grad_states`` argument (a State, a list/tuple/dict of States, a State
subclass or a predicate) is frozen into a hashable form that holds States
weakly (it keys the eager cache, which must not keep States alive), and is
resolved against a discovery at trace time into the States to
differentiate, in a fixed order, with ``pack`` / ``unpack`` between a list
of per-state values and the user's structure.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, NamedTuple, Sequence

import jax.numpy as jnp

from brainshard._core.frames import current_signature, union
from brainshard._core.state.state import State, expect_state
from brainshard._core.state.values import describe_signature
from brainshard._core.state.filters import bad_form, is_filter, selects

__all__ = ["freeze", "select", "Selection", "NO_STATES"]


# What `grad_states` may be, in its one error text.
_FORMS = ("a State, a list/tuple/dict of States, or one filter: a State "
          "subclass (matching its instances) or a predicate `(state) -> bool`")


def freeze(spec: Any, name: str) -> Any:
  if spec is None:
    return None
  if isinstance(spec, State):
    return ("state", weakref.ref(spec))
  if isinstance(spec, (list, tuple)):
    return ("tuple" if isinstance(spec, tuple) else "list",
            tuple(weakref.ref(expect_state(s, f"{name}: each entry of grad_states")) for s in spec))
  if isinstance(spec, dict):
    return ("dict", tuple((k, weakref.ref(expect_state(s, f"{name}: each entry of grad_states")))
                          for k, s in spec.items()))
  if is_filter(spec):
    return ("filter", spec)
  raise bad_form(f"{name}: grad_states", _FORMS, spec)


class Selection(NamedTuple):
  states: tuple[State, ...]           # each once: the differentiation order
  pack: Callable[[list], Any]         # per-state values -> grad_states shape
  unpack: Callable[[Any], list]       # grad_states shape -> per-state values


NO_STATES = Selection((), lambda g: None, lambda t: [])


def _alive(ref: weakref.ref, name: str) -> State:
  s = ref()
  if s is None:  # pragma: no cover - the caller normally holds its States
    raise RuntimeError(f"{name}: a State in grad_states was garbage-collected.")
  return s


def select(frozen: Any, reads: Sequence[State], writes: Sequence[State],
            name: str) -> Selection:
  if frozen is None:
    return NO_STATES
  kind, what = frozen
  if kind == "filter":
    states = tuple(sorted(s for s in reads if selects(what, s)))
    if not states:
      raise ValueError(
          f"{name}: grad_states={getattr(what, '__name__', what)} matches no "
          f"State that the function reads (it reads: "
          f"{_labels(reads) or 'none'}).")
    _check_float(states, name)
    return Selection(states, lambda g: dict(zip(states, g)),
                      lambda t: [_entry(t, s, name) for s in states])
  keys = [k for k, _ in what] if kind == "dict" else None
  listed = [_alive(r, name) for r in (
      [what] if kind == "state" else [r for _, r in what] if keys else what)]
  _check_read(listed, reads, writes, name)
  states = union(listed)
  _check_float(states, name)
  index = [states.index(s) for s in listed]

  def pack(g):
    items = [g[i] for i in index]
    if kind == "state":
      return items[0]
    return dict(zip(keys, items)) if keys else (
        tuple(items) if kind == "tuple" else items)

  def unpack(t):
    items = ([t] if kind == "state" else [t[k] for k in keys] if keys
             else list(t))
    by_id: dict[int, Any] = {}
    for s, v in zip(listed, items):
      by_id.setdefault(id(s), v)
    return [by_id[id(s)] for s in states]

  return Selection(states, pack, unpack)


def _labels(states: Sequence[State]) -> str:
  return ", ".join(s.label() for s in states)


def _entry(tangents: dict, state: State, name: str) -> Any:
  try:
    return tangents[state]
  except (KeyError, TypeError):
    raise ValueError(
        f"{name}: state_tangents has no entry for {state.label()}, which "
        "grad_states selects.") from None


def _check_read(listed: Sequence[State], reads: Sequence[State],
                writes: Sequence[State], name: str) -> None:
  read_ids = {id(s) for s in reads}
  for s in listed:
    if id(s) not in read_ids:
      why = (" (it writes it before reading it, so its incoming value does "
             "not affect the result)" if any(s is w for w in writes) else "")
      raise ValueError(
          f"{name}: grad_states includes {s.label()}, which the function "
          f"never reads{why}. Remove it from grad_states.")


def _check_float(states: Sequence[State], name: str) -> None:
  for s in states:
    sig = current_signature(s)
    if not all(jnp.issubdtype(a.dtype, jnp.inexact) for a in sig[1]):
      raise TypeError(
          f"{name}: grad_states includes {s.label()} holding "
          f"{describe_signature(sig)}; gradients need floating-point (or "
          "complex) values. Leave integer, boolean and key States out of "
          "grad_states (a narrower type or a predicate).")
