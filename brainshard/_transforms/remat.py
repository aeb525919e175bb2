"""Stateful rematerialisation: ``jax.checkpoint`` for functions using States.

``bs.remat(step)`` discovers the States ``step`` reads and writes, wraps the
discovery's jaxpr, as a pure function of ``(read values, arguments) ->
(out, written values)``, in ``jax.checkpoint``, and writes the results back.
Under a gradient the forward activations of ``step`` are then recomputed in
the backward pass instead of being stored, exactly as ``jax.checkpoint`` does
for a pure function. (Not called ``checkpoint``: to users that means saving
to disk.)
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax

from brainshard._core.args import fun_name
from brainshard._core.discovery import DiscoveryCache, evaluate
from brainshard._core.frames import write_results
from brainshard._transforms.control import dispatch

__all__ = ["remat"]


def _traced(fun: Callable, statics: dict[int, Any], prevent_cse: bool,
            policy: Any, name: str, dyn: tuple, kwargs: dict) -> Any:
  def bound(*dyn_args, **kw):
    it = iter(dyn_args)
    n = len(dyn_args) + len(statics)
    full = [statics[i] if i in statics else next(it) for i in range(n)]
    return fun(*full, **kw)

  d = DiscoveryCache(bound, name=name).discover(*dyn, **kwargs)
  read_vals = [s.value for s in d.read_states]

  def pure(read_vals, dyn, kwargs):
    return evaluate(d, jax.tree.leaves((dyn, kwargs)), read_vals)

  out, written = jax.checkpoint(pure, prevent_cse=prevent_cse, policy=policy)(
      read_vals, dyn, kwargs)
  write_results(list(d.write_states), written, name)
  return out


def remat(fun: Callable | None = None, *, prevent_cse: bool = True,
          policy: Callable | None = None,
          static_argnums: int | Sequence[int] = ()) -> Callable:
  """``jax.checkpoint`` (remat) for a function that reads and writes States.

  Gradients through ``bs.remat(step)`` equal those through ``step``; under a
  gradient the step's intermediate values are recomputed on the backward
  pass rather than stored (e.g. per step of a long ``bs.for_loop``).

  Args:
    fun: the function; may close over States. Usable as a decorator.
    prevent_cse, policy: as in ``jax.checkpoint``.
    static_argnums: positional arguments that are Python values (hashable).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.ParamState(jnp.array(2.), name='w')
    >>> v = bs.State(jnp.array(0.), name='v')
    >>> @bs.remat
    ... def step(x):
    ...   v.value = jnp.sin(w.value * x)
    ...   return v.value
    >>> bs.grad(lambda: step(1.0) ** 2, grad_states=w)()
    Array(-0.7568025, dtype=float32)
  """
  if fun is None:
    return functools.partial(remat, prevent_cse=prevent_cse, policy=policy,
                             static_argnums=static_argnums)
  nums = ((static_argnums,) if isinstance(static_argnums, int)
          else tuple(static_argnums))
  name = f"bs.remat({fun_name(fun)})"
  options = (bool(prevent_cse), policy)

  def rematted(*args, **kwargs):
    n = len(args)
    static_pos = sorted({i % n for i in nums if -n <= i < n})
    statics = {i: args[i] for i in static_pos}
    dyn = tuple(a for i, a in enumerate(args) if i not in statics)
    impl = functools.partial(_impl, statics, options, name)
    key = ("remat", options, tuple(statics.items()), n)
    return dispatch(name, [fun], key, impl, (dyn, kwargs))

  # Not functools.wraps: bs.jit copies a wrapped function's __dict__.
  rematted.__name__ = rematted.__qualname__ = name
  rematted.__doc__ = getattr(fun, "__doc__", None)
  return rematted


def _impl(statics: dict, options: tuple, name: str, fun: Callable) -> Callable:
  return lambda dyn, kwargs: _traced(fun, statics, *options, name, dyn, kwargs)
