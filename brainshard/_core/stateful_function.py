"""``bs.StatefulFunction``: brainstate's stateful-function object.

A :class:`~brainshard._core.discovery.DiscoveryCache` (the States a function
touches, per call signature) with brainstate's methods: ``get_states`` and
friends, ``make_jaxpr``, a pure ``jaxpr_call`` and a compiled ``__call__``
(the same program as ``bs.jit``). It sits above ``program.py`` because
calling it compiles; the transforms discover through the cache below.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import jax

from brainshard._core.args import StaticArgs
from brainshard._core.discovery import Discovery, DiscoveryCache, evaluate
from brainshard._core.program.program import StatefulJit
from brainshard._core.state.state import State
from brainshard._core.state.values import describe_signature, describe_value

__all__ = ["StatefulFunction"]


class StatefulFunction(DiscoveryCache):
  """A function that closes over States, seen as a pure function of them.

  Args:
    fun: the Python function. It may read and write ``state.value`` of any
      State it can reach.
    static_argnums, static_argnames: arguments that are Python values steering
      the trace (hashed into the cache key, like ``jax.jit``).
    axis_env: ``[(axis_name, size), ...]`` so collectives such as
      ``jax.lax.psum(x, 'x')`` can be traced outside ``shard_map``.

  Discoveries are cached per call signature (static arguments, treedef and
  avals of the others) and reused while every state keeps its signature;
  :meth:`clear_cache` (or ``bs.clear_caches()``) forgets them.

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
               name: str | None = None, static: StaticArgs | None = None):
    super().__init__(fun, static_argnums=static_argnums,
                     static_argnames=static_argnames, axis_env=axis_env,
                     name=name, static=static)
    self._core: StatefulJit | None = None  # __call__'s program, made once

  def clear_cache(self) -> None:
    """Forgets every cached discovery of this function (and the program
    calling it compiled)."""
    super().clear_cache()
    self._core = None

  # -- public API -----------------------------------------------------------

  def make_jaxpr(self, *args, **kwargs) -> Any:
    """The ClosedJaxpr: inputs are the dynamic argument leaves, then the
    leaves of the read states; outputs are the function's output leaves,
    then the leaves of the written states."""
    return self.discover(*args, **kwargs).jaxpr

  def _discovery_for(self, args, kwargs, compile_if_miss: bool = True
                     ) -> Discovery:
    if not args and not kwargs and self.last is not None:
      return self.last
    if not compile_if_miss:
      found = self.lookup(args, kwargs)[0]
      if found is None:
        raise ValueError(
            f"{self.name}: nothing discovered (not compiled) for these "
            "arguments yet and compile_if_miss=False; call it, or pass "
            "compile_if_miss=True.")
      return found
    return self.discover(*args, **kwargs)

  def get_states(self, *args, compile_if_miss: bool = True, **kwargs
                 ) -> tuple[State, ...]:
    """Every State the function touches (for these arguments; with no
    arguments, for the most recent discovery). ``compile_if_miss=False``
    (brainstate's keyword) raises instead of tracing an unseen call."""
    return self._discovery_for(args, kwargs, compile_if_miss).states

  def get_read_states(self, *args, compile_if_miss: bool = True, **kwargs
                      ) -> tuple[State, ...]:
    """States read before being written: the pure function's inputs."""
    return self._discovery_for(args, kwargs, compile_if_miss).read_states

  def get_write_states(self, *args, compile_if_miss: bool = True, **kwargs
                       ) -> tuple[State, ...]:
    """States the function writes."""
    return self._discovery_for(args, kwargs, compile_if_miss).write_states

  def get_jaxpr(self, *args, compile_if_miss: bool = True, **kwargs) -> Any:
    """:meth:`make_jaxpr` for these arguments (with none, the most recent);
    ``compile_if_miss=False`` raises instead of tracing an unseen call."""
    return self._discovery_for(args, kwargs, compile_if_miss).jaxpr

  def get_out_shapes(self, *args, compile_if_miss: bool = True, **kwargs
                     ) -> Any:
    """ShapeDtypeStructs of the function's output (as :meth:`get_jaxpr`)."""
    return self._discovery_for(args, kwargs, compile_if_miss).out_shapes

  def get_out_treedef(self, *args, compile_if_miss: bool = True, **kwargs
                      ) -> Any:
    """The treedef of the function's output (as :meth:`get_jaxpr`)."""
    return jax.tree.structure(
        self._discovery_for(args, kwargs, compile_if_miss).out_shapes)

  def __call__(self, *args, **kwargs) -> Any:
    """Runs the function and writes its results to the States, compiled
    once per call signature exactly as ``bs.jit(fun)`` (brainstate's
    ``sf(*args)``). Its discoveries are this object's.

    Example:
      >>> import brainshard as bs, jax.numpy as jnp
      >>> c = bs.State(jnp.zeros(()), name='c')
      >>> def tick(dt):
      ...   c.value = c.value + dt
      ...   return c.value
      >>> sf = bs.StatefulFunction(tick)
      >>> sf(0.5), sf(0.5)
      (Array(0.5, dtype=float32), Array(1., dtype=float32))
    """
    core = self._core
    if core is None:
      core = self._core = StatefulJit(self.fun, self.name, stateful=self)
    return core.entry(*args, **kwargs)

  def jaxpr_call(self, state_vals: Sequence[Any], *args, **kwargs
                 ) -> tuple[list[Any], Any]:
    """Runs the function purely: ``state_vals`` are the values of
    :meth:`get_states` (in that order); returns ``(new_state_vals, out)``.
    No State is read or written."""
    d = self.discover(*args, **kwargs)
    state_vals = list(state_vals)
    if len(state_vals) != len(d.states):
      raise ValueError(
          f"{self.name}.jaxpr_call: State length mismatch: got "
          f"{len(state_vals)} state values, but the function touches "
          f"{len(d.states)} states "
          f"({', '.join(s.label() for s in d.states)}).")
    for i, (s, v, sig) in enumerate(zip(d.states, state_vals, d.state_sigs)):
      if jax.tree.structure(v) != sig[0]:
        raise ValueError(
            f"{self.name}.jaxpr_call: the value given for {s.label()} is "
            f"{describe_value(v)} at index {i}, but the state holds "
            f"{describe_signature(sig)}; pass one value per state of "
            "get_states(), in that order.")
    by_id = {id(s): v for s, v in zip(d.states, state_vals)}
    _, leaves, _ = self.static.key(self.static.split(args, kwargs))
    out, written = evaluate(d, leaves, [by_id[id(s)] for s in d.read_states])
    for s, v in zip(d.write_states, written, strict=True):
      by_id[id(s)] = v
    return [by_id[id(s)] for s in d.states], out
