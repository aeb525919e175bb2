"""Discovery: which States a function touches, found by tracing it once.

:func:`discover` traces a function with ``jax.make_jaxpr`` while a
:class:`DiscoveryFrame` is on this thread's frame stack. The first read of a
State inside the trace appends a new input to the jaxpr (after the
function's own arguments), so state values are never baked in as constants;
a State that is only written is an output, not an input. Every transform
discovers through this one function; :class:`StatefulFunction` adds the
call-signature cache on top.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax

from brainshard._core import compat
from brainshard._core.args import Call, StaticArgs, fun_name
from brainshard._core.caches import Cache
from brainshard._core.frames import Frame, current_signature
from brainshard._core.state.state import State
from brainshard._core.state.values import Signature, signature

__all__ = ["DiscoveryCache", "Discovery", "DiscoveryFrame", "discover",
           "evaluate", "still_valid"]


class Discovery(NamedTuple):
  """What one trace of a function at one call signature found."""
  states: tuple[State, ...]        # every state touched, first-touch order
  read_states: tuple[State, ...]   # read before written: the jaxpr's inputs
  write_states: tuple[State, ...]  # written: outputs after the function's own
  jaxpr: Any                       # ClosedJaxpr(*arg_leaves, *read_leaves)
  out_tree: Any                    # treedef of (out, [written values])
  out_avals: Any                   # (out, [written]) as a pytree of avals
  out_shapes: Any                  # ShapeDtypeStructs of the function's output
  state_sigs: tuple[Signature, ...]  # signature of each of `states` when traced
  placements: dict                 # id(state) -> PlacementHint from shard_maps


def _same(state: State, sig: Signature) -> Signature:
  return sig


class DiscoveryFrame(Frame):
  """Turns each state's first read into a new input of the jaxpr in flight.

  ``state_signature(state, outer_sig)`` gives the avals that input gets
  (the outer ones by default; whole and unsharded for shard_map's outer
  discovery).
  """

  def __init__(self, name: str, trace: Any,
               state_signature: Callable[[State, Signature], Signature] = _same):
    super().__init__(name)
    self._input_trace = trace
    self._state_signature = state_signature
    self.placements: dict[int, Any] = {}

  def hint_placement(self, state: State, hint: Any) -> None:
    self.placements.setdefault(id(state), hint)
    super().hint_placement(state, hint)

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    return self._state_signature(state, outer_sig)

  def write_signature(self, state: State) -> Signature:
    # Seeing states as the enclosing frame does, a write must also be what
    # that frame accepts (a shard_map body's out-spec block, say).
    if self._state_signature is _same and self.parent is not None:
      return self.parent.write_signature(state)
    return super().write_signature(state)

  def first_read(self, state: State, outer_value: Any) -> Any:
    return self.new_input(self._state_signature(state, signature(outer_value)))

  def new_input(self, sig: Signature) -> Any:
    """A value of signature ``sig`` made of new inputs of the jaxpr."""
    treedef, avals = sig
    return jax.tree.unflatten(treedef, [
        compat.new_trace_input(self._input_trace, a) for a in avals])


def discover(fun: Callable, leaves: Sequence[Any], name: str, *,
             state_signature: Callable[[State, Signature], Signature] = _same,
             inject: Sequence[tuple[State, Any]] = (),
             axis_env: Sequence[tuple[Hashable, int]] | None = None
             ) -> Discovery:
  """Traces ``fun(*leaves)`` once (``leaves``: arrays or avals).

  ``inject`` gives some states the avals they have inside the construct
  (e.g. a loop carry made per-shard); the others are read from outside.
  """
  # What the trace found, without the frame: its slots hold the trace's
  # tracers, and keeping it past the trace is a leak (jax.checking_leaks).
  found: list[tuple] = []

  def traced(*leaves):
    frame = DiscoveryFrame(name, compat.current_trace(), state_signature)
    with frame:
      for state, avals in inject:
        a_leaves, a_tree = jax.tree.flatten(avals)
        frame.inject(state, frame.new_input((a_tree, tuple(a_leaves))))
      out = fun(*leaves)
      _check_no_state_out(name, out)
      written = [frame.value_of(s) for s in frame.written_states()]
    found.append((tuple(frame.touched_states()), tuple(frame.input_states()),
                  tuple(frame.written_states()), frame.placements))
    return out, written

  closed, shapes = jax.make_jaxpr(
      traced, axis_env=list(axis_env) if axis_env else None,
      return_shape=True)(*leaves)
  states, read_states, write_states, placements = found[-1]
  out_tree = jax.tree.structure(shapes)
  return Discovery(
      states=states,
      read_states=read_states,
      write_states=write_states,
      jaxpr=closed,
      out_tree=out_tree,
      out_avals=jax.tree.unflatten(out_tree, closed.out_avals),
      out_shapes=shapes[0],
      state_sigs=tuple(current_signature(s) for s in states),
      placements=placements)


class StateOutputError(TypeError, ValueError):
  """A function returned a State. A ``TypeError`` (what JAX raises for a
  non-array output) that is also the ``ValueError`` brainstate raises."""


def _check_no_state_out(name: str, out: Any) -> None:
  for leaf in jax.tree.leaves(out, is_leaf=lambda x: isinstance(x, State)):
    if isinstance(leaf, State):
      raise StateOutputError(
          f"{name} returned {leaf.label()}. A transformed function returns "
          "arrays: return `state.value` (a State stays where it is and its "
          "writes are kept anyway).")


def _static_range_error(static: StaticArgs, fun: Callable) -> str | None:
  """The message for static_argnums past a fixed signature (jax.jit raises
  for those too), else None."""
  try:
    params = list(inspect.signature(fun).parameters.values())
  except (TypeError, ValueError):
    return None
  if any(p.kind == p.VAR_POSITIONAL for p in params):
    return None
  n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
          for p in params)
  bad = [i for i in static.argnums if i >= n]
  if not bad:
    return None
  return (f"{static.owner}: static_argnums contains index {bad[0]}, but the "
          f"function takes {n} positional argument(s).")


def evaluate(d: Discovery, arg_leaves: Sequence[Any], read_vals: Sequence[Any]
             ) -> tuple[Any, list[Any]]:
  """Runs a discovery's jaxpr: ``(out, written values)``, without Python."""
  outs = compat.jaxpr_as_fun(d.jaxpr)(*arg_leaves, *jax.tree.leaves(read_vals))
  return jax.tree.unflatten(d.out_tree, outs)


def still_valid(d: Discovery) -> bool:
  """Whether every state still has the signature it was discovered with."""
  return all(current_signature(s) == sig
             for s, sig in zip(d.states, d.state_sigs, strict=True))


class DiscoveryCache:
  """The discoveries of one function, cached per call signature.

  The key is the static arguments' values, the treedef and the avals of the
  others (``StaticArgs.key``); a discovery is reused while every state it
  found keeps its signature. Every transform finds a function's States
  through one of these; :class:`~brainshard.StatefulFunction` adds
  brainstate's public methods on top.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> from brainshard._core.discovery import DiscoveryCache
    >>> w = bs.State(jnp.ones(3), name='w')
    >>> def f(x):
    ...   w.value = w.value * x
    >>> d = DiscoveryCache(f).discover(2.0)
    >>> d.read_states == d.write_states == (w,)
    True
  """

  def __init__(self, fun: Callable, *,
               static_argnums: int | Sequence[int] = (),
               static_argnames: str | Sequence[str] = (),
               axis_env: Sequence[tuple[Hashable, int]] | None = None,
               name: str | None = None,
               static: StaticArgs | None = None):
    self.fun = fun
    self.name = name or f"StatefulFunction({fun_name(fun)})"
    self.static = static or StaticArgs(fun, static_argnums, static_argnames,
                                       owner=self.name)
    self.static_argnums = self.static.argnums
    self.static_argnames = self.static.argnames
    self.axis_env = list(axis_env) if axis_env else None
    self._static_error = _static_range_error(self.static, fun)
    self._cache: Cache = Cache()
    self.last: Discovery | None = None  # the most recent discovery

  def clear_cache(self) -> None:
    """Forgets every cached discovery of this function."""
    self._cache.clear()
    self.last = None

  # -- discovery ------------------------------------------------------------

  def lookup(self, args: tuple, kwargs: dict) -> tuple[Discovery | None, Call,
                                                       Hashable, list]:
    """The cached discovery for this call (None if there is none or a state
    changed signature since), with the split call, its key and leaves."""
    call = self.static.split(args, kwargs)
    key, leaves, _ = self.static.key(call)
    found = self._cache.get(key)
    if found is not None and not still_valid(found):
      found = None
    return found, call, key, leaves

  def cached(self, key: Hashable) -> Discovery | None:
    """The discovery cached under ``key`` (a :meth:`lookup` key), even one
    a state's new signature made stale; None if there is none."""
    return self._cache.get(key)

  def discover(self, *args, **kwargs) -> Discovery:
    """Traces (or fetches from the cache) the discovery for this call."""
    found, call, key, leaves = self.lookup(args, kwargs)
    if found is None:
      if self._static_error:
        raise ValueError(self._static_error)
      treedef = call.flat()[1]

      def run(*dyn_leaves):
        a, kw = call.unflatten(treedef, dyn_leaves)
        return self.fun(*a, **kw)

      found = self._cache[key] = discover(run, leaves, self.name,
                                          axis_env=self.axis_env)
    self.last = found
    return found
