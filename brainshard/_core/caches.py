"""brainshard's caches: bounded, and all cleared by :func:`clear_caches`.

Every cache that keys on user functions, signatures or meshes is a
:class:`Cache`: a dict (so a hit is one C-level ``dict.get`` on the call
path) that forgets its oldest entry beyond ``maxsize`` and registers itself
so that ``bs.clear_caches()`` can empty them all, e.g. after a notebook
redefines many functions.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["Cache", "clear_caches", "register"]

_caches: "weakref.WeakSet[Any]" = weakref.WeakSet()


def register(holder: Any) -> None:
  """Lets :func:`clear_caches` call ``holder.clear()`` (e.g. a compiled
  program held outside a :class:`Cache`), without keeping it alive."""
  _caches.add(holder)


class Cache(dict):
  """A dict that keeps at most ``maxsize`` entries (oldest dropped first)."""

  def __init__(self, maxsize: int = 256):
    super().__init__()
    self.maxsize = maxsize
    _caches.add(self)

  def __setitem__(self, key: Any, value: Any) -> None:
    if len(self) >= self.maxsize and key not in self:
      del self[next(iter(self))]
    super().__setitem__(key, value)

  def __hash__(self) -> int:  # registered in a WeakSet by identity
    return id(self)

  def __eq__(self, other: Any) -> bool:
    return self is other


def clear_caches() -> None:
  """Forgets every discovery, plan and compiled program brainshard cached.

  The next call of each transformed function traces and compiles again.
  JAX's own caches are untouched (``jax.clear_caches`` clears those).

  Example:
    >>> import brainshard as bs
    >>> bs.clear_caches()
  """
  for cache in list(_caches):
    cache.clear()
