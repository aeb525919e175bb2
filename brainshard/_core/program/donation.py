"""When a State's old buffer may be donated to the call that replaces it.

A compiled step that reads and writes a state can hand the state's old
buffer to XLA (``donate_argnums``), which then writes the new value into it:
one buffer per state instead of two. That is only safe when nothing but the
State still refers to the old value, because donation deletes it.

The rule (``donate_states='auto'``, the default), checked at every call for
every state that is both read and written:

  donate the state's value iff every node of it -- the ``jax.Array``, or
  the containers of a pytree value (dicts, lists, tuples, NamedTuples such
  as optax states, any registered node) and the arrays in them --
  is referenced by exactly one Python object: the State (for the root) or
  its parent container.

``sys.getrefcount`` answers that exactly under the GIL. Why it is safe:

* A user who kept ``old = state.value`` (or put it in a list, a dict, a
  closure; ``jnp.asarray(old)`` returns the same object) holds a second
  reference, so that call does not donate and ``old`` stays valid.
* JAX keeps no Python references to the arrays passed to a compiled call
  (its caches hold avals and shardings, never arrays); brainshard keeps
  none either. Two States never share an Array object unless the user
  assigned the same object to both, which the count sees too.
* A NumPy view of the buffer (``np.asarray(state.value)`` on CPU) is an
  external reference that the runtime itself checks: such a buffer is
  copied instead of donated.

What the count cannot see: a *different* ``jax.Array`` object that shares
the buffer without referring to the original. JAX makes those in two
places: ``jax.device_put(x, where_x_already_is)`` on one device, and the
per-device views ``x.addressable_data(i)`` / ``x.addressable_shards[i].data``.
After a donating call such a view is deleted; using it raises JAX's
"Array has been deleted" error (never a wrong number). Take a real copy
(``x.copy()``) to keep one, or pass ``donate_states=False``.

Counting every candidate on every call cost a small compiled step about
60 ns per state, 5% of JAX's own cost per array. So a call counts only the
candidates whose value may be referenced elsewhere: those read through
their State (``state.value``, ``slot``, ``global_value()``, a copy or a
pickle) or put in from outside (written, placed, restored) since a compiled
call last wrote them. A compiled call's write-back puts in that call's own
outputs, which JAX made for it and refers to nowhere else. The State keeps
that mark in its signature cache (``State._sig``): ``None`` there means
"written back by a compiled call, read by nothing since". And each time
a State leaves that mark, ``LENDS.now`` takes a new number: a call that
finds the number it noted after its last write-back knows that none of its
States was read since, without testing each.
A registered pytree node whose ``unflatten`` also stores the arrays
elsewhere is the one case that mark cannot see.

Free-threaded Python builds defer reference counts, so there 'auto' never
donates.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Callable, Sequence

from jax.tree_util import tree_flatten as _tree_flatten

from brainshard._core.compat import ArrayImpl

__all__ = ["SOLE", "SOLE_LOCAL", "SOLE_ATTR", "AUTO_SUPPORTED", "ARRAY_TYPES",
           "LENDS", "next_lend", "sole_mask", "sole_tree"]

_getrefcount = sys.getrefcount

ARRAY_TYPES = frozenset({ArrayImpl})


class _LendClock:
  """``now``: a new number each time a State's value may become shared,
  one more than the last; ``last``: which State that was (its ``_order``,
  not the State: no strong reference), set before ``now``."""
  __slots__ = ("now", "last")


LENDS = _LendClock()
LENDS.now, LENDS.last = 0, None
# Numbers never reused: a lost update between two threads still leaves one
# that no call has noted (where lends are not serialised by the slots).
next_lend = itertools.count(1).__next__


class _Holder:
  """Stands in for a State (an instance attribute holds the value)."""


def _calibrate() -> tuple[int, bool]:
  """The count of a value held only by its owner, when counted the way the
  call path counts it: ``list(map(sys.getrefcount, values))`` over a list of
  the owners' values. Also checks that one more reference shows as one more.
  """
  holder = _Holder()
  holder.value = object()
  values = [h.value for h in (holder,)]
  sole = list(map(_getrefcount, values))[0]
  extra = holder.value  # noqa: F841 - the second reference under test
  shared = list(map(_getrefcount, values))[0]
  return sole, shared == sole + 1


def _local_count(holder: _Holder) -> int:
  # The pattern of _core/program/fastcall.py: the value in a local, counted.
  c0 = holder.value
  return _getrefcount(c0)


def _attr_count(holder: _Holder) -> int:
  # The other pattern there: the slot read straight into the count.
  return _getrefcount(holder.value)


def _calibrate_with(count: Callable[[_Holder], int]) -> tuple[int, bool]:
  holder = _Holder()
  holder.value = object()
  sole = count(holder)
  extra = holder.value  # noqa: F841
  return sole, count(holder) == sole + 1


SOLE, _COUNTS_EXACT = _calibrate()
SOLE_LOCAL, _LOCAL_EXACT = _calibrate_with(_local_count)
SOLE_ATTR, _ATTR_EXACT = _calibrate_with(_attr_count)
_gil = getattr(sys, "_is_gil_enabled", None)
AUTO_SUPPORTED = (_COUNTS_EXACT and _LOCAL_EXACT and _ATTR_EXACT
                  and (_gil is None or _gil()))


def _is_node_of(root: Any) -> Callable[[Any], bool]:
  return lambda x: x is not root


def _children(node: Any) -> list | None:
  """The direct children of a pytree node; None where we cannot vouch for
  them (a leaf of unknown type, or a node whose children are not objects
  it holds itself).

  NamedTuples (optax's optimizer states) and dict subclasses are read like
  tuples and dicts. Another registered node (a dataclass pytree) counts only
  if every child its one-level flatten returns is one of its own attribute
  values: a flatten reaching through a non-pytree object could otherwise
  hide a reference the user holds to that object.
  """
  t = type(node)
  if t is list or isinstance(node, tuple):
    return list(node)
  if isinstance(node, dict):
    return list(node.values())
  children = _tree_flatten(node, is_leaf=_is_node_of(node))[0]
  if len(children) == 1 and children[0] is node:
    return None  # a leaf of unknown type
  own = {id(v) for v in getattr(node, "__dict__", {}).values()}
  own.update(id(getattr(node, a, None)) for a in getattr(t, "__slots__", ()))
  return children if all(id(c) in own for c in children) else None


def sole_tree(node: Any) -> bool:
  """True if every node below ``node`` is held only by its parent; ``node``
  itself has already been counted by the caller."""
  if type(node) is ArrayImpl:
    return True
  children = _children(node)
  if children is None:  # an unknown pytree node or leaf: we cannot vouch
    return False
  counts = list(map(_getrefcount, children))
  for child, count in zip(children, counts):
    if child is None or (isinstance(child, (tuple, list, dict)) and not child):
      continue  # empty subtrees hold no buffers (and may be shared singletons)
    if count != SOLE or not sole_tree(child):
      return False
  return True


def sole_mask(values: Sequence[Any], counts: Sequence[int]) -> tuple[bool, ...]:
  """Per value: may it be donated? ``counts`` are the values' reference
  counts taken as ``list(map(sys.getrefcount, values))`` by the caller."""
  return tuple(c == SOLE and sole_tree(v) for v, c in zip(values, counts))
