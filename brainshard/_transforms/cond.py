"""Stateful branches: ``cond`` and ``switch``.

Each branch is discovered at the operands' avals. The branches together
read the union of their read states and write the union of their written
states; a branch that does not write a state returns it unchanged, so a
state written in only one branch works. States are closed over (``lax.cond``
turns them into shared operands); written ones come back as extra outputs.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax

from brainshard._core import compat
from brainshard._core.args import fun_name
from brainshard._core.frames import gather_values, union, write_results
from brainshard._transforms.control import (
    avals_of, cast_varying, discover_body, dispatch, join_vma, run_body,
    vma_tree)

__all__ = ["cond", "switch", "ifelse"]


def _branches_traced(select: Callable, branches: Sequence[Callable],
                     operands: tuple, name: str) -> Any:
  op_avals = avals_of(operands)
  found = [discover_body(b, op_avals, f"{name} branch {i}")
           for i, b in enumerate(branches)]
  writes = union(*(t.write_states for t in found))
  reads = union(*(t.read_states for t in found), writes)
  values = gather_values(reads, name)
  inputs = list(zip(reads, values, strict=True))
  axes = _joined_axes(found, writes, dict(zip(map(id, reads), values, strict=True)))

  def make(branch: Callable, i: int) -> Callable:
    def run(*ops):
      out, new_vals = run_body(branch, ops, f"{name} branch {i}", inputs,
                               writes)
      if axes is not None:
        out, new_vals = cast_varying((out, new_vals), axes)
      return out, new_vals
    return run

  out, new_vals = select([make(b, i) for i, b in enumerate(branches)],
                         operands)
  write_results(list(writes), new_vals, name)
  return out


def _joined_axes(found, writes, values_by_id) -> Any:
  """The varying mesh axes every branch's outputs must share, or None when
  the branches' output structures differ (``lax.cond`` reports that)."""
  trees = []
  for t in found:
    written = dict(zip(map(id, t.write_states), t.out_avals[1], strict=True))
    trees.append(vma_tree((t.out_avals[0], [
        written.get(id(s), avals_of(values_by_id[id(s)])) for s in writes])))
  if any(jax.tree.structure(t) != jax.tree.structure(trees[0])
         for t in trees):
    return None
  return join_vma(*trees)


@compat.api_boundary
def cond(pred: Any, true_fun: Callable, false_fun: Callable,
         *operands: Any) -> Any:
  """``jax.lax.cond`` for functions that read and write States.

  Both branches are traced; the one ``pred`` selects runs. A state written
  by only one branch keeps its value when the other runs.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> n = bs.State(jnp.zeros((), jnp.int32), name='n')
    >>> def bump(x):
    ...   n.value = n.value + 1
    ...   return x * 2
    >>> bs.cond(True, bump, lambda x: x, 3.0), n.value
    (Array(6., dtype=float32, weak_type=True), Array(1, dtype=int32))
    >>> bs.cond(False, bump, lambda x: x, 3.0), n.value
    (Array(3., dtype=float32, weak_type=True), Array(1, dtype=int32))
  """
  name = f"bs.cond({fun_name(true_fun)}, {fun_name(false_fun)})"

  def impl(true_f, false_f):
    def run(p, ops):
      return _branches_traced(
          lambda wrapped, o: jax.lax.cond(p, wrapped[0], wrapped[1], *o),
          [true_f, false_f], ops, name)
    return run

  return dispatch(name, [true_fun, false_fun], ("cond",), impl,
                  (pred, operands))


@compat.api_boundary
def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
  """``jax.lax.switch`` for functions that read and write States.

  ``branches[index](*operands)`` runs (``index`` is clamped to the valid
  range); a state written by some branches keeps its value when another runs.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(()), name='v')
    >>> def add(x):
    ...   v.value = v.value + x
    >>> def sub(x):
    ...   v.value = v.value - x
    >>> bs.switch(1, [add, sub, lambda x: None], 2.0); v.value
    Array(-2., dtype=float32)
  """
  branches = tuple(branches)
  if not branches:
    raise ValueError("bs.switch needs at least one branch.")
  name = f"bs.switch({', '.join(fun_name(b) for b in branches)})"

  def impl(*fns):
    def run(i, ops):
      return _branches_traced(
          lambda wrapped, o: jax.lax.switch(i, wrapped, *o), fns, ops, name)
    return run

  return dispatch(name, branches, ("switch",), impl, (index, operands))


@compat.api_boundary
def ifelse(conditions: Any, branches: Sequence[Callable], *operands: Any,
           check_cond: bool = True) -> Any:
  """``if / elif / else`` over States (brainstate's ``ifelse``), on
  :func:`switch`.

  ``branches[i](*operands)`` runs for the first true ``conditions[i]``; the
  last branch runs when none is true. With ``check_cond`` (the default) and
  concrete conditions, anything but exactly one true condition is a
  ``ValueError`` (brainstate's check); traced conditions are not checked.

  Example:
    >>> import brainshard as bs
    >>> def grade(a):
    ...   return bs.ifelse([a > 5, a > 0, True],
    ...                    [lambda: 2.0, lambda: 1.0, lambda: 0.0],
    ...                    check_cond=False)
    >>> float(grade(7)), float(grade(3)), float(grade(-1))
    (2.0, 1.0, 0.0)
  """
  branches = tuple(branches)
  if not branches or not all(callable(b) for b in branches):
    raise TypeError("bs.ifelse: branches must be a non-empty sequence of "
                    f"callables; got {branches!r}.")
  conds = [jax.numpy.asarray(c) for c in conditions]
  if len(conds) != len(branches):
    raise ValueError(f"bs.ifelse: {len(conds)} conditions for "
                     f"{len(branches)} branches; give one per branch.")
  bad = [i for i, c in enumerate(conds) if c.shape != ()]
  if bad:
    raise ValueError(f"bs.ifelse: condition {bad[0]} has shape "
                     f"{conds[bad[0]].shape}; each must be a scalar.")
  pred = jax.numpy.stack([c.astype(bool) for c in conds])
  if check_cond and not compat.is_traced(pred):
    n_true = int(pred.sum())
    if n_true != 1:
      raise ValueError(
          f"bs.ifelse: {n_true} of {len(conds)} conditions are true, but "
          "with check_cond=True exactly one must be; pass check_cond=False "
          "for first-true-wins.")
  index = jax.numpy.where(pred.any(), jax.numpy.argmax(pred), len(conds) - 1)
  return switch(index, branches, *operands)
