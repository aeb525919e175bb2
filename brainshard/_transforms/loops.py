"""Stateful loops: ``for_loop``, ``scan`` and ``while_loop``.

The States a loop body writes become part of the ``lax.scan`` /
``lax.while_loop`` carry; States it only reads are closed over (loop
invariants). See :mod:`brainshard._transforms.control` for the shared mechanism.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from brainshard._core import compat
from brainshard._core.args import fun_name
from brainshard._core.discovery import Discovery
from brainshard._core.frames import gather_values, write_results
from brainshard._core.state.state import State
from brainshard._transforms.progress import ProgressBar, as_progress_bar
from brainshard._transforms.cond import cond
from brainshard._transforms.control import (
    avals_of, cast_varying, discover_body, dispatch, join_vma, run_body,
    vma_tree)

__all__ = ["for_loop", "scan", "while_loop", "bounded_while_loop"]


def _scan_length(xs: Any, length: int | None, name: str) -> int:
  leaves = jax.tree.leaves(xs)
  lengths = set()
  for x in leaves:
    shape = getattr(x, "shape", None)
    if not shape:
      raise ValueError(
          f"{name}: every value to loop over needs a leading axis, but one "
          f"is {_describe(x)}.")
    lengths.add(shape[0])
  if length is not None:
    lengths.add(length)
  if not lengths:
    raise ValueError(
        f"{name}: nothing to loop over. Pass arrays to loop over (their "
        "leading axis is the step) or length=.")
  if len(lengths) > 1:
    raise ValueError(
        f"{name}: the values to loop over disagree on the number of steps "
        f"(leading axes / length: {sorted(lengths)}).")
  return lengths.pop()


def _static_length(length: Any, name: str) -> int | None:
  if length is None:
    return None
  try:
    return int(length)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise TypeError(
        f"{name}: length must be a concrete int (got {length!r}); for a "
        "data-dependent number of steps use bs.while_loop.") from None


def _describe(x: Any) -> str:
  try:
    return jax.typeof(x).str_short()
  except TypeError:
    return repr(x)


def _pair(out: Any, name: str) -> tuple[Any, Any]:
  if not (isinstance(out, (tuple, list)) and len(out) == 2):
    raise TypeError(
        f"{name}: the scanned function must return a pair (new_carry, y), "
        f"but it returned {type(out).__name__}.")
  return out[0], out[1]


def _same_structure(a: Any, b: Any) -> bool:
  return jax.tree.structure(a) == jax.tree.structure(b)


class _Carry:
  """The states a loop carries and the per-shard types they must keep."""

  def __init__(self, fun: Callable, args_avals: Callable[[Any], tuple],
               init: Any, name: str, carry_of: Callable[[Any], Any]):
    """Discovers ``fun`` and settles the carry's varying mesh axes.

    ``args_avals(user_carry)`` gives the avals ``fun`` is called with and
    ``carry_of(output)`` picks the new carry from its output. Inside
    ``shard_map`` a step may make a carried value per-shard; the carry then
    enters the loop per-shard, and discovery repeats until the types agree.
    """
    touched = discover_body(fun, args_avals(avals_of(init)), name)
    self.states = touched.write_states
    state_init = gather_values(self.states, name)
    for _ in range(8):
      in_axes = vma_tree((avals_of(init), avals_of(state_init)))
      out_axes = vma_tree((carry_of(touched.out_avals[0]), touched.out_avals[1]))
      if not _same_structure(in_axes, out_axes):
        break  # lax.scan / while_loop report the structure mismatch
      want = join_vma(in_axes, out_axes)
      if want == in_axes:
        break
      init, state_init = cast_varying((init, state_init), want)
      touched = discover_body(fun, args_avals(avals_of(init)), name,
                         inject=list(zip(self.states,
                                         avals_of(state_init))))
      _check_same_writes(self.states, touched, name)
    self.touched: Discovery = touched
    self.init = init
    self.state_init = state_init
    self.axes = vma_tree((avals_of(init), avals_of(state_init)))
    carried = {id(s) for s in self.states}
    self.consts = tuple(s for s in touched.read_states if id(s) not in carried)
    self.const_vals = gather_values(self.consts, name)

  def inputs(self, state_vals: Sequence[Any]) -> list[tuple[State, Any]]:
    return [*zip(self.consts, self.const_vals, strict=True), *zip(self.states, state_vals, strict=True)]

  def keep_types(self, user_carry: Any, state_vals: list[Any]) -> tuple:
    """Gives a step's outputs the carry's varying axes (a step may return a
    value that varies over fewer axes, e.g. after ``psum``)."""
    out = (user_carry, state_vals)
    if not _same_structure(out, self.axes):
      return out
    return cast_varying(out, self.axes)


def _check_same_writes(states: Sequence[State], touched: Discovery,
                       name: str) -> None:
  if {id(s) for s in touched.write_states} != {id(s) for s in states}:
    raise RuntimeError(
        f"{name}: the loop body wrote different States when traced with "
        "per-shard carry values than without; it must write the same States "
        "every time it is traced.")


def _scan_traced(fun: Callable, init: Any, xs: Any, *, length, reverse,
                 unroll, pbar: ProgressBar | None, name: str) -> Any:
  n = _scan_length(xs, length, name)
  x_avals = jax.tree.map(lambda x: compat.step_aval(jax.typeof(x)), xs)
  carry = _Carry(fun, lambda c: (c, x_avals), init, name,
                 lambda out: _pair(out, name)[0])
  ticker = pbar.bind(n, name) if pbar is not None else None

  def body(loop_carry, x):
    step, user_carry, state_vals = loop_carry
    out, new_vals = run_body(fun, (user_carry, x), name,
                             carry.inputs(state_vals), carry.states)
    new_carry, y = _pair(out, name)
    new_carry, new_vals = carry.keep_types(new_carry, new_vals)
    if ticker is not None:
      ticker.tick(step)
      step = step + 1
    return (step, new_carry, new_vals), y

  step0 = jnp.zeros((), jnp.int32) if ticker is not None else None
  (steps, final, state_vals), ys = jax.lax.scan(
      body, (step0, carry.init, carry.state_init), xs, length=n,
      reverse=reverse, unroll=unroll)
  write_results(list(carry.states), state_vals, name)
  return final, ys


def _step(fun: Callable, carry: Any, x: tuple) -> tuple[Any, Any]:
  return carry, fun(*x)


@compat.api_boundary
def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1,
         pbar: ProgressBar | int | None = None) -> tuple[Any, Any]:
  """``jax.lax.scan`` for a function that reads and writes States.

  ``f(carry, x) -> (new_carry, y)`` runs once per step; States it writes are
  carried from step to step and hold their final values afterwards. Returns
  ``(final_carry, stacked_ys)``.

  Args:
    f: the step; may close over States.
    init: the initial carry (a pytree of arrays).
    xs: arrays (pytree) to loop over along their leading axis, or None.
    length: the number of steps when ``xs`` is None.
    reverse, unroll: as in ``jax.lax.scan``.
    pbar: a :class:`ProgressBar` (or an int: report every that many steps).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> total = bs.State(jnp.zeros(()), name='total')
    >>> def step(c, x):
    ...   total.value = total.value + x
    ...   return c + 1, total.value
    >>> bs.scan(step, 0, jnp.arange(4.0))
    (Array(4, dtype=int32, weak_type=True), Array([0., 1., 3., 6.], dtype=float32))
    >>> total.value
    Array(6., dtype=float32)
  """
  name = f"bs.scan({fun_name(f)})"
  pbar = as_progress_bar(pbar)
  options = dict(length=_static_length(length, name), reverse=bool(reverse),
                 unroll=unroll, pbar=pbar, name=name)

  def impl(fun):
    return lambda init, xs: _scan_traced(fun, init, xs, **options)

  return dispatch(name, [f], ("scan", *options.items()), impl, (init, xs))


@compat.api_boundary
def for_loop(f: Callable, *xs: Any, length: int | None = None,
             reverse: bool = False, unroll: int | bool = 1,
             pbar: ProgressBar | int | None = None) -> Any:
  """Runs ``f(*x_t)`` for every step ``t`` and stacks its outputs.

  The loop compiles into one ``lax.scan``: States ``f`` writes are carried
  from step to step (and hold their final values afterwards), States it only
  reads are loop invariants. Works eagerly (one cached compiled program),
  under :func:`brainshard.jit` and inside or around
  :func:`brainshard.shard_map`.

  Args:
    f: the step; may close over States.
    *xs: arrays (pytrees) to loop over along their leading axis; step ``t``
      gets ``x[t]`` of each.
    length: the number of steps when no ``xs`` are given.
    reverse, unroll: as in ``jax.lax.scan``.
    pbar: a :class:`ProgressBar` (or an int: report every that many steps).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(2), name='v')
    >>> def step(i):
    ...   v.value = v.value + i
    ...   return v.value.sum()
    >>> bs.for_loop(step, jnp.arange(3.0))
    Array([0., 2., 6.], dtype=float32)
    >>> v.value
    Array([3., 3.], dtype=float32)
  """
  name = f"bs.for_loop({fun_name(f)})"
  pbar = as_progress_bar(pbar)
  options = dict(length=_static_length(length, name), reverse=bool(reverse),
                 unroll=unroll, pbar=pbar, name=name)

  def impl(fun):
    step = functools.partial(_step, fun)

    def run(xs):
      return _scan_traced(step, (), xs, **options)[1]
    return run

  return dispatch(name, [f], ("for_loop", *options.items()), impl, (xs,))


def _while_traced(cond_fun: Callable, body_fun: Callable, init: Any,
                  name: str) -> Any:
  carry = _Carry(body_fun, lambda c: (c,), init, name, lambda out: out)
  cond_name = f"{name} cond_fun"
  cond_touched = discover_body(cond_fun, (avals_of(carry.init),), cond_name,
                          inject=list(zip(carry.states,
                                          avals_of(carry.state_init))))
  if cond_touched.write_states:
    raise TypeError(
        f"{name}: cond_fun writes {cond_touched.write_states[0].label()}; the "
        "loop condition must only read States. Write states in body_fun.")
  carried = {id(s) for s in carry.states}
  cond_consts = [s for s in cond_touched.read_states
                 if id(s) not in carried and s not in carry.consts]
  cond_vals = gather_values(cond_consts, name)
  cond_inputs = list(zip(cond_consts, cond_vals, strict=True))

  def cond(loop_carry):
    value, state_vals = loop_carry
    pred, _ = run_body(cond_fun, (value,), cond_name,
                       cond_inputs + carry.inputs(state_vals), [])
    return pred

  def body(loop_carry):
    value, state_vals = loop_carry
    new_value, new_vals = run_body(body_fun, (value,), name,
                                   carry.inputs(state_vals), carry.states)
    return carry.keep_types(new_value, new_vals)

  final, state_vals = jax.lax.while_loop(
      cond, body, (carry.init, carry.state_init))
  write_results(list(carry.states), state_vals, name)
  return final


@compat.api_boundary
def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
  """``jax.lax.while_loop`` for functions that read and write States.

  ``body_fun(val) -> val`` runs while ``cond_fun(val)`` is true; States
  ``body_fun`` writes are carried and hold their final values afterwards.
  ``cond_fun`` may read States (it sees the carried values) but not write.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> t = bs.State(jnp.zeros(()), name='t')
    >>> def body(n):
    ...   t.value = t.value + 0.5
    ...   return n + 1
    >>> bs.while_loop(lambda n: t.value < 2.0, body, 0)
    Array(4, dtype=int32, weak_type=True)
    >>> t.value
    Array(2., dtype=float32)
  """
  name = f"bs.while_loop({fun_name(body_fun)})"

  def impl(cond, body):
    return lambda init: _while_traced(cond, body, init, name)

  return dispatch(name, [cond_fun, body_fun], ("while_loop",), impl,
                  (init_val,))


@compat.api_boundary
def bounded_while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any,
                       *, max_steps: int, base: int = 16) -> Any:
  """A :func:`while_loop` that stops after ``max_steps`` steps at most
  (brainstate's ``bounded_while_loop``); reverse-mode differentiable.

  It is a :func:`scan` of ``max_steps`` steps whose :func:`cond` skips the
  body once ``cond_fun`` was false. ``base`` (brainstate's nesting of
  scans, which only trades compile time) is accepted and not used.

  Example:
    >>> import jax, brainshard as bs
    >>> def grow(x):  # triple x while it is below 100, 4 times at most
    ...   return bs.bounded_while_loop(lambda n: n < 100, lambda n: n * 3, x,
    ...                                max_steps=4)
    >>> [float(grow(x)) for x in (2.0, 20.0)], float(jax.grad(grow)(2.0))
    ([162.0, 180.0], 81.0)
  """
  if isinstance(max_steps, bool) or not isinstance(max_steps, int) \
      or max_steps < 0:
    raise ValueError("bs.bounded_while_loop: max_steps must be a "
                     f"non-negative int, got {max_steps!r}.")
  if isinstance(base, bool) or not isinstance(base, int) or base < 2:
    raise ValueError(f"bs.bounded_while_loop: base must be an int >= 2, "
                     f"got {base!r}.")
  init_val = jax.tree.map(jnp.asarray, init_val)
  if max_steps == 0:
    return init_val
  name = f"bs.bounded_while_loop({fun_name(body_fun)})"

  def impl(cond_f, body_f):
    def step(carry, _):
      val, going = carry
      going = jnp.logical_and(going, cond_f(val))
      return (cond(going, body_f, lambda v: v, val), going), None

    def run(init):
      going = jnp.ones((), bool)
      return scan(step, (init, going), length=max_steps)[0][0]
    return run

  return dispatch(name, [cond_fun, body_fun],
                  ("bounded_while_loop", max_steps), impl, (init_val,))
