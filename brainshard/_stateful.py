"""StatefulFunction: find the States a function touches and make it pure.

Discovery traces the function once with ``jax.make_jaxpr`` while a
:class:`_DiscoveryFrame` is on this thread's frame stack. The first read of a
State inside the trace appends a new input to the jaxpr (after the function's
own arguments), so state values are never baked in as constants; a State that
is only written is an output, not an input.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax
from jax.extend.core import jaxpr_as_fun

from brainshard import _compat
from brainshard._state import (
    Frame, Signature, State, current_signature, describe_signature,
    describe_value, signature)

__all__ = ["StatefulFunction", "Discovery", "fun_name", "copy_metadata"]


def fun_name(fun: Callable) -> str:
  while isinstance(fun, functools.partial):
    fun = fun.func
  return getattr(fun, "__qualname__", None) or getattr(fun, "__name__", repr(fun))


_METADATA = ("__module__", "__name__", "__qualname__", "__doc__")


def copy_metadata(wrapper: Any, fun: Callable) -> None:
  """Gives a wrapper object ``fun``'s name, docstring and ``__wrapped__``.

  Unlike ``functools.update_wrapper`` it never copies ``fun.__dict__``: a
  ``jax.grad`` or ``functools.wraps`` function carries the attributes of the
  function *it* wraps there, and copying them would overwrite the wrapper's
  own (a ``bs.jit`` of ``jax.grad(bs.jit(f))`` would then call ``f``).
  """
  for attr in _METADATA:
    try:
      value = getattr(fun, attr)
    except AttributeError:
      continue
    try:
      setattr(wrapper, attr, value)
    except (AttributeError, TypeError):  # read-only on some objects
      pass
  wrapper.__wrapped__ = fun


class Discovery(NamedTuple):
  """What one trace of a function at one call signature found."""
  states: tuple[State, ...]        # every state touched, first-touch order
  read_states: tuple[State, ...]   # read before written: the jaxpr's inputs
  write_states: tuple[State, ...]  # written: outputs after the function's own
  jaxpr: Any                       # ClosedJaxpr(*dyn_arg_leaves, *read_leaves)
  out_tree: Any                    # treedef of (out, [written values])
  out_shapes: Any                  # ShapeDtypeStructs of the function's output
  state_sigs: tuple[Signature, ...]  # signature of each of `states` when traced
  placements: dict                 # id(state) -> PlacementHint from shard_maps


class _DiscoveryFrame(Frame):
  """Turns each state's first read into a new input of the jaxpr in flight."""

  def __init__(self, name: str, trace: Any,
               state_signature: Callable[[State, Signature], Signature]):
    super().__init__(name)
    self._input_trace = trace
    self._state_signature = state_signature
    self.placements: dict[int, Any] = {}

  def hint_placement(self, state: State, hint: Any) -> None:
    self.placements.setdefault(id(state), hint)
    super().hint_placement(state, hint)

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    return self._state_signature(state, outer_sig)

  def first_read(self, state: State, outer_value: Any) -> Any:
    treedef, avals = self._state_signature(state, signature(outer_value))
    leaves = [_compat.new_trace_input(self._input_trace, a) for a in avals]
    return jax.tree.unflatten(treedef, leaves)


def _normalize_argnums(argnums: int | Sequence[int]) -> tuple[int, ...]:
  return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _normalize_argnames(argnames: str | Sequence[str]) -> tuple[str, ...]:
  return (argnames,) if isinstance(argnames, str) else tuple(argnames)


class _CallSplit(NamedTuple):
  key: Hashable      # static values + treedef + avals of the dynamic part
  dyn_leaves: list   # leaves of the dynamic args/kwargs
  rebuild: Callable  # dyn leaves -> (args, kwargs) for the user function


def _identity_signature(state: State, sig: Signature) -> Signature:
  return sig


class StatefulFunction:
  """A function that closes over States, seen as a pure function of them.

  Args:
    fun: the Python function. It may read and write ``state.value`` of any
      State it can reach.
    static_argnums, static_argnames: arguments that are Python values steering
      the trace (hashed into the cache key, like ``jax.jit``).
    axis_env: ``[(axis_name, size), ...]`` so collectives such as
      ``jax.lax.psum(x, 'x')`` can be traced outside ``shard_map``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.State(jnp.ones(3), name='w')
    >>> def f(x):
    ...   w.value = w.value * x
    ...   return w.value.sum()
    >>> sf = bs.StatefulFunction(f)
    >>> sf.get_states(2.0) == (w,)
    True
    >>> new_vals, out = sf.jaxpr_call([w.value], 2.0)
    >>> out, w.value  # jaxpr_call is pure: w is untouched
    (Array(6., dtype=float32), Array([1., 1., 1.], dtype=float32))
  """

  def __init__(self, fun: Callable, *,
               static_argnums: int | Sequence[int] = (),
               static_argnames: str | Sequence[str] = (),
               axis_env: Sequence[tuple[Hashable, int]] | None = None,
               name: str | None = None,
               state_signature: Callable[[State, Signature], Signature] | None = None):
    self.fun = fun
    self.static_argnums = _normalize_argnums(static_argnums)
    self.static_argnames = _normalize_argnames(static_argnames)
    self.axis_env = list(axis_env) if axis_env else None
    self.name = name or f"StatefulFunction({fun_name(fun)})"
    self._state_signature = state_signature or _identity_signature
    self._cache: dict[Hashable, Discovery] = {}
    self._last: Discovery | None = None
    try:
      self._signature = inspect.signature(fun)
    except (TypeError, ValueError):
      self._signature = None

  # -- call splitting -------------------------------------------------------

  def _split(self, args: tuple, kwargs: dict) -> _CallSplit:
    n = len(args)
    static_pos = sorted({i % n for i in self.static_argnums if -n <= i < n})
    static_vals = tuple(args[i] for i in static_pos)
    static_kw = tuple(sorted(
        (k, kwargs[k]) for k in self.static_argnames if k in kwargs))
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static_pos)
    dyn_kwargs = {k: v for k, v in kwargs.items()
                  if k not in self.static_argnames}
    for a in dyn_args + tuple(dyn_kwargs.values()):
      for leaf in jax.tree.leaves(a):
        if isinstance(leaf, State):
          raise TypeError(
              f"{self.name} was passed {leaf._label()} as an argument. "
              "States are not arguments: close over the State in the "
              "function (read `state.value` inside it) and brainshard threads "
              "it through the transform.")
    leaves, treedef = jax.tree.flatten((dyn_args, dyn_kwargs))
    try:
      key = (static_vals, static_kw, treedef, tuple(map(jax.typeof, leaves)))
      hash(key)
    except TypeError as e:
      raise TypeError(
          f"{self.name}: static arguments must be hashable and the other "
          f"arguments pytrees of arrays ({e}).") from None

    def rebuild(dyn_leaves):
      d_args, d_kwargs = jax.tree.unflatten(treedef, dyn_leaves)
      it = iter(d_args)
      full = [args[i] if i in static_pos else next(it) for i in range(n)]
      return tuple(full), {**d_kwargs, **dict(static_kw)}

    return _CallSplit(key, leaves, rebuild)

  # -- discovery ------------------------------------------------------------

  def discover(self, *args, **kwargs) -> Discovery:
    """Traces (or fetches from the cache) the discovery for this call."""
    split = self._split(args, kwargs)
    found = self._cache.get(split.key)
    if found is not None and all(
        current_signature(s) == sig
        for s, sig in zip(found.states, found.state_sigs)):
      self._last = found
      return found
    found = self._trace(split)
    self._cache[split.key] = self._last = found
    return found

  def _trace(self, split: _CallSplit) -> Discovery:
    frame_box: list[_DiscoveryFrame] = []

    def traced(*dyn_leaves):
      args, kwargs = split.rebuild(list(dyn_leaves))
      frame = _DiscoveryFrame(self.name, _compat.current_trace(),
                              self._state_signature)
      frame_box.append(frame)
      with frame:
        out = self.fun(*args, **kwargs)
        written = [frame.value_of(s) for s in frame.written_states()]
      return out, written

    closed, shapes = jax.make_jaxpr(
        traced, axis_env=self.axis_env, return_shape=True)(*split.dyn_leaves)
    frame = frame_box[-1]
    states = tuple(frame.touched_states())
    return Discovery(
        states=states,
        read_states=tuple(frame.input_states()),
        write_states=tuple(frame.written_states()),
        jaxpr=closed,
        out_tree=jax.tree.structure(shapes),
        out_shapes=shapes[0],
        state_sigs=tuple(current_signature(s) for s in states),
        placements=frame.placements)

  # -- public API -----------------------------------------------------------

  def make_jaxpr(self, *args, **kwargs) -> Any:
    """The ClosedJaxpr: inputs are the dynamic argument leaves, then the
    leaves of the read states; outputs are the function's output leaves,
    then the leaves of the written states."""
    return self.discover(*args, **kwargs).jaxpr

  def _discovery_for(self, args, kwargs) -> Discovery:
    if not args and not kwargs and self._last is not None:
      return self._last
    return self.discover(*args, **kwargs)

  def get_states(self, *args, **kwargs) -> tuple[State, ...]:
    """Every State the function touches (for these arguments; with no
    arguments, for the most recent discovery)."""
    return self._discovery_for(args, kwargs).states

  def get_read_states(self, *args, **kwargs) -> tuple[State, ...]:
    """States read before being written: the pure function's inputs."""
    return self._discovery_for(args, kwargs).read_states

  def get_write_states(self, *args, **kwargs) -> tuple[State, ...]:
    """States the function writes."""
    return self._discovery_for(args, kwargs).write_states

  def jaxpr_call(self, state_vals: Sequence[Any], *args, **kwargs
                 ) -> tuple[list[Any], Any]:
    """Runs the function purely: ``state_vals`` are the values of
    :meth:`get_states` (in that order); returns ``(new_state_vals, out)``.
    No State is read or written."""
    d = self.discover(*args, **kwargs)
    state_vals = list(state_vals)
    if len(state_vals) != len(d.states):
      raise ValueError(
          f"{self.name}.jaxpr_call got {len(state_vals)} state values, but "
          f"the function touches {len(d.states)} states "
          f"({', '.join(s._label() for s in d.states)}).")
    for s, v, sig in zip(d.states, state_vals, d.state_sigs):
      if jax.tree.structure(v) != sig[0]:
        raise ValueError(
            f"{self.name}.jaxpr_call: the value given for {s._label()} is "
            f"{describe_value(v)}, but the state holds "
            f"{describe_signature(sig)}; pass one value per state of "
            "get_states(), in that order.")
    by_id = {id(s): v for s, v in zip(d.states, state_vals)}
    split = self._split(args, kwargs)
    read_leaves = jax.tree.leaves([by_id[id(s)] for s in d.read_states])
    out_leaves = jaxpr_as_fun(d.jaxpr)(*split.dyn_leaves, *read_leaves)
    out, written = jax.tree.unflatten(d.out_tree, out_leaves)
    for s, v in zip(d.write_states, written):
      by_id[id(s)] = v
    return [by_id[id(s)] for s in d.states], out
