"""Machinery shared by the stateful loops and branches.

Every construct (``for_loop``, ``scan``, ``while_loop``, ``cond``,
``switch``) works in three steps:

1. **Discovery** (:func:`discover_body`): the user function is traced once with
   ``jax.make_jaxpr`` at the avals one step (or one branch) sees, to learn
   which States it reads and writes and the avals it returns.
2. **The JAX primitive** (``lax.scan``, ``lax.while_loop``, ``lax.switch``)
   runs a pure body that re-runs the user function under a ``ReplayFrame``
   with the state values injected (:func:`run_body`). Written states travel
   as carry or outputs; states that are only read are closed over, so the
   loop sees them as loop invariants, exactly like a hand-written
   ``lax.scan`` that closes over its parameters.
3. **Write-back**: the final values go through ``write_results``, so an
   enclosing ``bs.jit`` / ``bs.shard_map`` sees the writes.

At top level a construct runs in one cached ``jax.jit`` (:func:`dispatch`),
so a repeated eager call re-traces and re-compiles nothing.
"""

from __future__ import annotations

import inspect
import types
import weakref
from typing import Any, Callable, Hashable, Sequence

import jax

from brainshard._core import compat
from brainshard._core.caches import Cache
from brainshard._core.discovery import Discovery, DiscoveryCache, discover
from brainshard._core.frames import ReplayFrame, replay
from brainshard._core.program.program import StatefulJit
from brainshard._core.state.state import State
from brainshard._core.threads import frame_stack
from brainshard._core.toplevel import is_eager

__all__ = ["discover_body", "run_body", "dispatch", "eager_call", "is_eager",
           "avals_of", "vma_tree", "join_vma", "cast_varying"]


def avals_of(tree: Any) -> Any:
  """The pytree of avals of ``tree`` (a pytree of arrays or tracers)."""
  return jax.tree.map(jax.typeof, tree)


def discover_body(fun: Callable, args: tuple, name: str,
                  inject: Sequence[tuple[State, Any]] = ()) -> Discovery:
  """Discovers ``fun(*args)`` once, where ``args`` is a pytree of avals
  (one step of a loop, one branch). ``inject`` gives some states the avals
  they have inside the construct (e.g. a carry made per-shard)."""
  leaves, treedef = jax.tree.flatten(args)

  def run(*leaves):
    return fun(*jax.tree.unflatten(treedef, list(leaves)))

  return discover(run, leaves, name, inject=inject)


def run_body(fun: Callable, args: tuple, name: str,
             inputs: Sequence[tuple[State, Any]],
             outputs: Sequence[State]) -> tuple[Any, list[Any]]:
  """Runs ``fun(*args)`` with the given state values injected.

  Returns its output and the values of ``outputs`` afterwards (a state the
  function did not write keeps the value it was given).
  """
  return replay(ReplayFrame(name), fun, args, {}, inputs, outputs,
                "inside the loop or branch")


# ----------------------------------------------------------------------------
# Varying manual axes (inside shard_map)


def vma_tree(avals: Any) -> Any:
  """The varying manual axes (a frozenset) of each aval in a pytree."""
  return jax.tree.map(compat.varying_axes, avals)


def join_vma(*trees: Any) -> Any:
  """Leafwise union of pytrees of frozensets that share one structure."""
  return jax.tree.map(lambda *axes: frozenset().union(*axes), *trees)


def cast_varying(values: Any, axes: Any) -> Any:
  """Makes each leaf of ``values`` vary over (at least) its ``axes``.

  Inside ``shard_map`` a loop carry must keep one type and the branches of a
  ``cond`` must return one type, including the mesh axes a value varies
  over; a state that becomes per-shard in one step or one branch must
  therefore be per-shard everywhere.
  """
  def one(x, want):
    missing = want - compat.varying_axes(jax.typeof(x))
    if not missing:
      return x
    return jax.lax.pcast(x, tuple(sorted(missing)), to="varying")
  return jax.tree.map(one, values, axes)


# ----------------------------------------------------------------------------
# Eager calls: one cached jax.jit per function and static configuration


class _WeakFun:
  """Holds a function (or bound method) without keeping it alive.

  The eager cache is keyed by the user function(s); the compiled program
  must not keep them alive, or the cache would never drop its entry.
  ``on_death`` runs when the function (or the method's object) is collected.
  """
  __slots__ = ("_ref", "_func")

  def __init__(self, fun: Callable, on_death: Callable | None = None):
    if inspect.ismethod(fun):
      self._ref = weakref.ref(fun.__self__, on_death)
      self._func = fun.__func__
    else:
      self._ref = weakref.ref(fun, on_death)
      self._func = None

  def __call__(self) -> Callable:
    obj = self._ref()
    if obj is None:  # pragma: no cover - the caller holds the function
      raise RuntimeError("brainshard: a cached loop body was garbage-collected")
    return obj if self._func is None else types.MethodType(self._func, obj)


def _cache_key(fun: Callable) -> Hashable:
  """Equal for the same function or the same method of the same object;
  raises TypeError for callables that take no weak references."""
  if inspect.ismethod(fun):
    return weakref.ref(fun.__self__), fun.__func__
  return weakref.ref(fun)


# (functions' keys, static configuration) -> the compiled runner
_eager_cache: Cache = Cache()


def dispatch(name: str, funs: Sequence[Callable], static: Hashable,
             impl: Callable[..., Callable], args: tuple) -> Any:
  """Runs a construct: ``impl(*funs)(*args)`` inline under a trace (so the
  enclosing transform threads its States), at top level through
  :func:`eager_call` (one cached ``jax.jit``, keyed by ``funs`` and
  ``static``).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.ones(2), name='v')
    >>> def scale(k):
    ...   v.value = v.value * k
    >>> twice = lambda f: lambda k: (f(k), f(k))[1]  # a construct: f twice
    >>> dispatch('twice', [scale], (), twice, (3.0,)); v.value
    Array([9., 9.], dtype=float32)
  """
  # is_eager() inlined: this runs on every eager loop and branch call.
  if not frame_stack() and compat.at_top_level():
    return eager_call(name, funs, static, impl, args)
  return impl(*funs)(*args)


def eager_call(name: str, funs: Sequence[Callable], static: Hashable,
               impl: Callable[..., Callable], args: tuple) -> Any:
  """Runs a construct at top level inside one cached ``jax.jit``.

  ``impl(*funs)`` returns the traced implementation, a function of ``args``
  (dynamic arrays only). Programs are cached per user function(s) and
  ``static`` configuration, and dropped when a function is collected;
  ``jax.jit`` caches per argument signature.
  """
  try:
    key = (tuple(_cache_key(f) for f in funs), static)
    runner = _eager_cache.get(key)
  except TypeError:  # a callable without weak references: no cache
    return _make_runner(name, lambda: list(funs), impl)(*args)
  if runner is None:
    drop = lambda _ref: _eager_cache.pop(key, None)  # noqa: E731
    weak = [_WeakFun(f, drop) for f in funs]
    runner = _eager_cache[key] = _make_runner(
        name, lambda: [w() for w in weak], impl)
  return runner(*args)


def _make_runner(name: str, get_funs: Callable[[], list], impl: Callable
                 ) -> StatefulJit:
  def run(*args):
    return impl(*get_funs())(*args)

  run.__name__ = run.__qualname__ = name
  stateful = DiscoveryCache(run, name=name)

  return StatefulJit(run, name, stateful=stateful)
