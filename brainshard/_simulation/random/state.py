"""Random numbers drawn from States, so they work under every transform.

A :class:`RandomState` is a State holding a typed PRNG key
(``jax.random.key``). Each draw splits the key, writes the new key back (an
ordinary State write, so draws work under ``bs.jit``, in loops and inside
``bs.shard_map``) and draws from the other half.

Inside a ``bs.shard_map`` body a draw is the block of the unsharded draw
that the shard holds: ``spec=`` (a PartitionSpec over the draw's global
shape; default: the leading axis split over all manual mesh axes) gives the
global shape (the per-shard ``size`` times the mesh axes it names) and the
block, and each element's bits depend only on the key and the element's
global index (``random_blocks``). The key State advances identically on
every shard, so the same seed gives the same numbers on any mesh.
"""

from __future__ import annotations

import operator
import os
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core import compat
from brainshard._core.frames import manual_axes
from brainshard._core.program.held import flush_unheld
from brainshard._core.state.state import State
from brainshard._core.threads import frame_stack, outside_frames, slots_locked

__all__ = ["RandomState", "default_state", "seed", "split_key", "check"]

Size = int | Sequence[int] | None


def _is_typed_key(x: Any) -> bool:
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _as_key(seed_or_key: Any, owner: str) -> jax.Array:
  """A scalar typed key from a seed, a typed key or a raw uint32 key; None
  gives a fresh key from the operating system's entropy."""
  x = seed_or_key
  if x is None:
    return jax.random.wrap_key_data(np.frombuffer(os.urandom(8), np.uint32))
  if _is_typed_key(x):
    if x.shape:
      raise ValueError(f"{owner}: expected one PRNG key, got keys of shape {x.shape}.")
    return x
  if isinstance(x, (int, np.integer)) or (
      hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.integer)
      and np.shape(x) == ()):
    return jax.random.key(x)
  if hasattr(x, "dtype") and x.dtype == jnp.uint32 and np.ndim(x) == 1:
    return jax.random.wrap_key_data(x)
  raise TypeError(
      f"{owner}: expected an int seed, a key from jax.random.key or a raw "
      f"uint32 key from jax.random.PRNGKey; got {type(x).__name__}"
      f"{' ' + str(getattr(x, 'dtype', '')) if hasattr(x, 'dtype') else ''}.")


def _member_axes() -> list[tuple[Any, int]]:
  """``(axis name, size)`` of every enclosing ``bs.vmap`` (its members)."""
  return [axis for frame in frame_stack()
          for axis in frame.vmap_axes]


def _fold_members(index: Any, axes: tuple) -> Any:
  """``index`` extended by the member index of every enclosing ``bs.vmap``
  (None without either). A member's frame carries ``vmap_axes``."""
  for name, size in _member_axes():
    member = jax.lax.axis_index(name)
    if axes and name in compat.varying_axes(jax.typeof(member)):
      raise NotImplementedError(_VMAP_AROUND_SHARD_MAP)
    index = member if index is None else index * size + member
  return index


def _shard_index() -> Any:
  """This shard's linear index over all manual axes, extended by the member
  index of every enclosing ``bs.vmap`` (None outside both).

  An ensemble sharded over a mesh axis with B/n members per shard thus
  draws what the unsharded ensemble draws (index = global member).
  """
  axes = manual_axes()
  index = jax.lax.axis_index(tuple(a for a, _ in axes)) if axes else None
  return _fold_members(index, axes)


# Where a shard_map body is first traced inside a bs.vmap around it, the
# member index is typed as varying over the vmap's axis, which JAX cannot
# cast to a mesh axis (an AssertionError inside jax.lax.pvary). A
# shard_map already called outside (its body replayed under the vmap's own
# batching) does not meet this.
_VMAP_AROUND_SHARD_MAP = (
    "a random draw from a RandomState inside bs.shard_map inside bs.vmap: "
    "the per-member key cannot be combined with the per-shard key there. "
    "Put bs.vmap inside the bs.shard_map: each device then runs its members, "
    "which draw what the unsharded ensemble draws.")


class RandomState(State):
  """A State holding a PRNG key; every draw advances it.

  Args:
    seed_or_key: an int seed, a typed key (``jax.random.key``) or a raw
      ``uint32`` key (``jax.random.PRNGKey``, stored as a typed key).
    name: an optional name for errors and reprs.

  Every draw of :mod:`brainshard.random` is also a method, drawing from
  this state (``rng.normal(size=3)``).
  Draws from several threads are safe: each advances the key exactly once,
  so no two draws share a key, and the set of keys drawn is the one that as
  many draws in one thread would give.

  Example:
    >>> import brainshard as bs
    >>> rng = bs.RandomState(0)
    >>> a = rng.normal(size=3)
    >>> b = rng.normal(size=3)   # the key advanced: fresh numbers
    >>> bool((a != b).all())
    True
    >>> rng.seed(0); bool((rng.normal(size=3) == a).all())
    True
  """

  vmap_shared = True  # bs.vmap members share the key (each folds in its index)

  def __init__(self, seed_or_key: Any = 0, name: str | None = None):
    super().__init__(_as_key(seed_or_key, "RandomState"), name=name)

  def __repr__(self) -> str:
    flush_unheld()  # a program's held results first (not a lend: a read)
    value = self._value
    if isinstance(value, jax.Array) and not compat.is_traced(value):
      # the key itself (its data shows the seed), not only its type
      name = "" if self.name is None else f"name={self.name!r}, "
      return f"RandomState({name}key={value})"
    return super().__repr__()

  def seed(self, seed_or_key: Any = None) -> None:
    """Restarts the stream from a seed or key (a State write); without one,
    from a fresh nondeterministic seed."""
    key = _as_key(seed_or_key, f"{self.label()}.seed")
    # not between another thread's read and write of the key
    with slots_locked():
      self.value = key

  def split_key(self, n: int | None = None) -> jax.Array:
    """A fresh key (or ``n`` keys), advancing this state.

    Inside ``bs.shard_map`` the key differs on every shard (it is folded
    with the shard's index, unlike a draw, which takes its block of the
    unsharded draw).
    """
    n = _count(n)
    sub = self._next_key()
    index = _shard_index()
    if index is not None:
      sub = jax.random.fold_in(sub, index)
    return sub if n is None else jax.random.split(sub, n)

  def _next_key(self) -> jax.Array:
    """The key of one draw, advancing the state (the same on every shard)."""
    if frame_stack():  # traced: the frame records the read and the write
      return self._advance()
    # Eager draws from several threads must not read the same key. The
    # slots' guard, not a lock of our own: it also keeps out a top-level
    # bs.jit call that draws, from reading this key to writing the next.
    with slots_locked():
      return self._advance()

  def _advance(self) -> jax.Array:
    key, sub = jax.random.split(self.value)
    self.value = key
    return sub


# ----------------------------------------------------------------------------
# The default state


_default: RandomState | None = None
_default_lock = threading.Lock()
DEFAULT_SEED = 0


def default_state() -> RandomState:
  """The RandomState that draws without ``key=`` use.

  It is created on first use (so importing brainshard starts no JAX backend)
  from seed 0, the same on every process of a multi-controller run; call
  :func:`seed` to choose another.
  """
  global _default
  if _default is None:
    with _default_lock:
      if _default is None:
        _default = _make_default()
  return _default


def _make_default() -> RandomState:
  # Possibly first used while a transform traces: the default state must
  # still live at top level (not be local to that transform) with a
  # concrete key.
  with outside_frames(), compat.eager():
    return RandomState(DEFAULT_SEED, name="default")


def seed(seed_or_key: Any = None) -> None:
  """Seeds the default RandomState (an int, a typed key or a raw key);
  ``seed()`` draws a fresh nondeterministic seed from ``os.urandom``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.seed(42); a = bs.random.uniform(size=2)
    >>> bs.random.seed(42); b = bs.random.uniform(size=2)
    >>> bool((a == b).all())
    True
  """
  default_state().seed(seed_or_key)


def _key(key: Any, where: str) -> jax.Array:
  """The key one draw uses: split off a RandomState, or the key given."""
  if key is None:
    return default_state()._next_key()
  if isinstance(key, RandomState):
    return key._next_key()
  if isinstance(key, State):
    raise TypeError(
        f"bs.random.{where}: key= got {key.label()}, which is not a "
        "RandomState; pass a bs.RandomState or a key array.")
  return _as_key(key, f"bs.random.{where}")


def _count(n: Any) -> int | None:
  """``n`` keys to split: None, or an integer >= 1 (numpy ints too)."""
  if n is None:
    return None
  n = operator.index(n)  # TypeError for a float
  if n < 1:
    raise ValueError(f"split_key: n must be >= 1, got {n}.")
  return n


def split_key(n: int | None = None, key: Any = None) -> jax.Array:
  """A fresh key (or ``n`` keys) from the default RandomState (or ``key``)."""
  n = _count(n)
  if key is None:
    return default_state().split_key(n)
  if isinstance(key, RandomState):
    return key.split_key(n)
  k = _as_key(key, "bs.random.split_key")
  return k if n is None else jax.random.split(k, n)


def as_param(x: Any) -> Any:
  """A parameter given as a Python list or tuple (``uniform([0., 2.], 1.)``,
  as numpy.random takes) as an array; anything else as is."""
  if isinstance(x, (list, tuple)):
    return jnp.asarray(x)
  return x


def check(where: str, ok: Any, message: str, *params: Any) -> None:
  """Raises ``ValueError(message)`` when every one of ``params`` is concrete
  and ``ok(*params)`` (on NumPy arrays) is not all true; does nothing for
  traced parameters (a traced value cannot raise).

  Example:
    >>> from brainshard._simulation.random.state import check
    >>> check("power", lambda a: a > 0, "a must be > 0", [1.0, 2.0])
  """
  values = []
  for p in params:
    p = as_param(p)
    if compat.is_traced(p):
      return
    values.append(None if p is None else np.asarray(p))
  if not np.all(ok(*values)):
    raise ValueError(f"bs.random.{where}: {message} (got "
                     f"{', '.join(str(v) for v in values)}).")


def _shape(size: Size, *params: Any) -> tuple[int, ...]:
  shapes = [np.shape(as_param(p)) for p in params if p is not None]
  if size is None:
    return tuple(np.broadcast_shapes(*shapes))
  if isinstance(size, (int, np.integer)):
    shape = (int(size),)
  else:
    shape = tuple(int(s) for s in size)
  try:  # numpy's rule: the parameters broadcast to size
    ok = np.broadcast_shapes(shape, *shapes) == shape
  except ValueError:
    ok = False
  if not ok:
    raise ValueError(f"bs.random: parameters of shapes {shapes} do not "
                     f"broadcast to size={shape}.")
  return shape


def _float_dtype(dtype: Any, *params: Any) -> Any:
  if dtype is not None:
    return dtype
  dt = jnp.result_type(*(as_param(p) for p in params if p is not None), float)
  return dt if jnp.issubdtype(dt, jnp.floating) else jnp.dtype(float)
