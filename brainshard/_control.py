"""Machinery shared by the stateful loops and branches.

Every construct (``for_loop``, ``scan``, ``while_loop``, ``cond``,
``switch``) works in three steps:

1. **Discovery** (:func:`discover`): the user function is traced once with
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

At top level a construct runs in one cached ``jax.jit`` (:func:`eager_call`),
so a repeated eager call re-traces and re-compiles nothing.
"""

from __future__ import annotations

import inspect
import types
import weakref
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax

from brainshard import _compat
from brainshard._jit import ReplayFrame, StatefulJit, replay, union
from brainshard._state import State, frame_stack
from brainshard._stateful import StatefulFunction, _DiscoveryFrame

__all__ = ["Touched", "discover", "run_body", "eager_call", "is_eager",
           "union", "avals_of", "vma_tree", "join_vma", "cast_varying",
           "manual_axes"]


class Touched(NamedTuple):
  """What one trace of a loop body or branch found."""
  reads: tuple[State, ...]   # read before being written, first-touch order
  writes: tuple[State, ...]  # written
  out: Any                   # pytree of the avals the function returned
  written: list[Any]         # per written state: pytree of its new avals


def _same_signature(state: State, sig: Any) -> Any:
  return sig


def avals_of(tree: Any) -> Any:
  """The pytree of avals of ``tree`` (a pytree of arrays or tracers)."""
  return jax.tree.map(jax.typeof, tree)


def discover(fun: Callable, args: tuple, name: str,
             inject: Sequence[tuple[State, Any]] = ()) -> Touched:
  """Traces ``fun(*args)`` once, where ``args`` is a pytree of avals.

  ``inject`` gives some states the avals they have inside the construct
  (e.g. a carry made per-shard); the others are read from outside.
  """
  leaves, treedef = jax.tree.flatten(args)
  frames: list[_DiscoveryFrame] = []

  def traced(*leaves):
    trace = _compat.current_trace()
    frame = _DiscoveryFrame(name, trace, _same_signature)
    with frame:
      for state, avals in inject:
        a_leaves, a_tree = jax.tree.flatten(avals)
        frame.inject(state, jax.tree.unflatten(
            a_tree, [_compat.new_trace_input(trace, a) for a in a_leaves]))
      out = fun(*jax.tree.unflatten(treedef, list(leaves)))
      written = [frame.value_of(s) for s in frame.written_states()]
    frames.append(frame)
    return out, written

  closed, shapes = jax.make_jaxpr(traced, return_shape=True)(*leaves)
  frame = frames[-1]
  out, written = jax.tree.unflatten(jax.tree.structure(shapes),
                                    closed.out_avals)
  return Touched(tuple(frame.input_states()), tuple(frame.written_states()),
                 out, written)


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


def manual_axes() -> tuple[tuple[str, int], ...]:
  """``(axis name, size)`` of every manual mesh axis of the ``bs.shard_map``
  bodies being traced on this thread, outermost first (empty outside one).

  A shard_map body's frame carries its axes as ``manual_axes``.
  """
  axes: list[tuple[str, int]] = []
  for frame in frame_stack():
    for axis in getattr(frame, "manual_axes", ()):
      if axis not in axes:
        axes.append(axis)
  return tuple(axes)


def vma_tree(avals: Any) -> Any:
  """The varying manual axes (a frozenset) of each aval in a pytree."""
  return jax.tree.map(_compat.varying_axes, avals)


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
    missing = want - _compat.varying_axes(jax.typeof(x))
    if not missing:
      return x
    return jax.lax.pcast(x, tuple(sorted(missing)), to="varying")
  return jax.tree.map(one, values, axes)


# ----------------------------------------------------------------------------
# Eager calls: one cached jax.jit per function and static configuration


def is_eager() -> bool:
  """True at top level: no brainshard frame and no JAX trace active."""
  return not frame_stack() and _compat.at_top_level()


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
_eager_cache: dict[Hashable, StatefulJit] = {}


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
  stateful = StatefulFunction(run, name=name)

  def states(args, kwargs):
    d = stateful.discover(*args, **kwargs)
    runner.placements.update(d.placements)
    return d.read_states, d.write_states

  runner = StatefulJit(run, name, discover=states, stateful=stateful)
  return runner
