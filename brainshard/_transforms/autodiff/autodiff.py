"""Stateful autodiff: grad, value_and_grad, vjp, jvp, jacrev, jacfwd, hessian.

Each call discovers the States the function touches for its arguments
(:class:`DiscoveryCache`), picks the *grad states* among those it reads,
and hands JAX a pure function of ``(grad-state values, arguments)`` that
evaluates the discovery's jaxpr. States the function writes leave the JAX
transform as auxiliary outputs, i.e. with their forward values, and are
written back through ``write_results``; the other States it reads enter as
constants. Under an enclosing brainshard transform (``bs.jit``,
``bs.shard_map``, loops) all of this happens inside that trace; at top level
it runs in one cached ``jax.jit`` per function and configuration
(:func:`control.dispatch`), so repeated calls re-trace nothing.

Conventions are JAX's, with the grad states as one extra, *first*
differentiable input:

- ``grad_states=None``: exactly ``jax.grad(fun, argnums or 0)`` (States are
  read as they are and writes still persist).
- ``grad_states`` given, ``argnums=None``: only the state gradients.
- both given: ``(state_grads, arg_grads)``.
- state gradients have the structure of ``grad_states``: an array pytree for
  one State, a list/tuple/dict for a list/tuple/dict of States, and a dict
  ``{State: grad}`` (sorted by creation) for a State subclass or predicate.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax

from brainshard._core.args import fun_name
from brainshard._core.discovery import DiscoveryCache, evaluate
from brainshard._core.frames import write_results
from brainshard._transforms.control import dispatch
from brainshard._transforms.autodiff.grad_states import Selection, freeze, select

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd",
           "hessian"]


# ----------------------------------------------------------------------------
# The pure function of one call


class _Pure(NamedTuple):
  sel: Selection
  gvals: list          # current values of sel.states
  writes: tuple        # states the function writes
  out_shapes: Any      # the function's output (ShapeDtypeStructs)
  call: Callable       # (gvals, args) -> (out, written values)


def _prepare(fun: Callable, frozen: Any, args: tuple, kwargs: dict,
             name: str) -> _Pure:
  """Discovers ``fun`` for this call and builds its pure function."""
  d = DiscoveryCache(fun, name=name).discover(*args, **kwargs)
  sel = select(frozen, d.read_states, d.write_states, name)
  gids = [id(s) for s in sel.states]
  consts = {id(s): s.value for s in d.read_states if id(s) not in gids}
  gvals = [s.value for s in sel.states]

  def call(gvals, args):
    vals = dict(consts)
    vals.update(zip(gids, gvals))
    return evaluate(d, jax.tree.leaves((args, kwargs)),
                    [vals[id(s)] for s in d.read_states])

  return _Pure(sel, gvals, d.write_states, d.out_shapes, call)


def _objective(p: _Pure, args: tuple, nums: tuple[int, ...], has_aux: bool,
               name: str) -> Callable:
  """``f(gvals, diff_args) -> (value, (aux, written))`` for JAX's transforms."""
  def f(gvals, dargs):
    full = list(args)
    for i, a in zip(nums, dargs):
      full[i] = a
    out, written = p.call(gvals, tuple(full))
    if not has_aux:
      return out, (None, written)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
      raise TypeError(
          f"{name} has has_aux=True, so the function must return a pair "
          f"(value, aux); it returned {type(out).__name__}.")
    return out[0], (out[1], written)
  return f


def _check_argnums(argnums: Any, name: str) -> Any:
  if argnums is None or isinstance(argnums, int):
    return argnums
  try:
    nums = tuple(argnums)
  except TypeError:
    nums = (argnums,)
  if not all(isinstance(i, int) for i in nums):
    raise TypeError(f"{name}: argnums must be an int or a tuple of ints; "
                    f"got {argnums!r}.")
  return nums


def _nums(frozen: Any, argnums: Any, nargs: int, name: str) -> tuple:
  if argnums is None:
    argnums = () if frozen is not None else 0
  nums = (argnums,) if isinstance(argnums, int) else argnums
  for i in nums:
    if not -nargs <= i < nargs:
      raise ValueError(
          f"{name}: argnums={argnums!r} but the function was called with "
          f"{nargs} positional argument(s)"
          + ("; to differentiate States pass grad_states=." if not nargs
             else "."))
  return tuple(i % nargs for i in nums)


class _Config(NamedTuple):
  kind: str        # 'value_and_grad', 'grad', 'jacrev', 'jacfwd'
  frozen: Any      # freeze(grad_states)
  argnums: Any     # None, int or tuple (as given)
  has_aux: bool
  name: str

  def assemble(self, gs: list, ga: tuple, sel: Selection) -> Any:
    """(state part, arg part) as the user asked for them."""
    eff = 0 if (self.frozen is None and self.argnums is None) else self.argnums
    arg_part = ga[0] if isinstance(eff, int) else tuple(ga)
    if self.frozen is None:
      return arg_part
    state_part = sel.pack(gs)
    return state_part if self.argnums is None else (state_part, arg_part)


def _diff_impl(cfg: _Config) -> Callable:
  """``impl(fun)`` for :func:`dispatch`: holds no reference to ``fun``."""
  def impl(fun):
    def run(args, kwargs):
      p = _prepare(fun, cfg.frozen, args, kwargs, cfg.name)
      nums = _nums(cfg.frozen, cfg.argnums, len(args), cfg.name)
      f = _objective(p, args, nums, cfg.has_aux, cfg.name)
      primals = (p.gvals, tuple(args[i] for i in nums))
      if cfg.kind in ("grad", "value_and_grad"):
        (value, (aux, written)), (gs, ga) = jax.value_and_grad(
            f, argnums=(0, 1), has_aux=True)(*primals)
        grads = cfg.assemble(gs, ga, p.sel)
        write_results(list(p.writes), written, cfg.name)
        if cfg.kind == "grad":
          return (grads, aux) if cfg.has_aux else grads
        return ((value, aux) if cfg.has_aux else value), grads
      transform = jax.jacrev if cfg.kind == "jacrev" else jax.jacfwd
      jac, (aux, written) = transform(f, argnums=(0, 1), has_aux=True)(
          *primals)
      out_tree = jax.tree.structure(
          p.out_shapes[0] if cfg.has_aux else p.out_shapes)
      jac = out_tree.unflatten([cfg.assemble(gs, ga, p.sel) for gs, ga in
                                out_tree.flatten_up_to(jac)])
      write_results(list(p.writes), written, cfg.name)
      return (jac, aux) if cfg.has_aux else jac
    return run
  return impl


def _transform(kind: str, fun: Callable, grad_states: Any, argnums: Any,
               has_aux: bool) -> Callable:
  name = f"bs.{kind}({fun_name(fun)})"
  cfg = _Config(kind, freeze(grad_states, name),
                _check_argnums(argnums, name), bool(has_aux), name)
  impl = _diff_impl(cfg)

  def transformed(*args, **kwargs):
    return dispatch(name, [fun], cfg, impl, (args, kwargs))

  transformed.__name__ = transformed.__qualname__ = name
  transformed.__doc__ = getattr(fun, "__doc__", None)
  return transformed


# ----------------------------------------------------------------------------
# Public API


def grad(fun: Callable, grad_states: Any = None, argnums: Any = None,
         has_aux: bool = False) -> Callable:
  """The gradient of a scalar function with respect to States and arguments.

  Args:
    fun: returns a scalar (or ``(scalar, aux)`` with ``has_aux``); may read
      and write States.
    grad_states: the States to differentiate with respect to: a State, a
      list/tuple/dict of States, a State subclass (every State of that type
      the function reads) or a predicate ``State -> bool``. Each must be
      read by the function (else ``ValueError``) and hold floats (else
      ``TypeError``).
    argnums: positional arguments to differentiate too (int or tuple).
    has_aux: as in ``jax.grad``.

  Returns a function giving the state gradients in the structure of
  ``grad_states`` (a ``{State: grad}`` dict for a type or predicate), or
  ``(state_grads, arg_grads)`` when ``argnums`` is given too, or exactly
  ``jax.grad``'s result when ``grad_states`` is None. States the function
  writes keep their forward values.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.ParamState(jnp.array([1., 2.]), name='w')
    >>> loss = lambda x: jnp.sum(w.value * x) ** 2
    >>> bs.grad(loss, grad_states=w)(jnp.array([1., 1.]))
    Array([6., 6.], dtype=float32)
    >>> g = bs.grad(loss, grad_states=bs.ParamState)(jnp.array([1., 1.]))
    >>> g[w]
    Array([6., 6.], dtype=float32)
  """
  return _transform("grad", fun, grad_states, argnums, has_aux)


def value_and_grad(fun: Callable, grad_states: Any = None,
                   argnums: Any = None, has_aux: bool = False) -> Callable:
  """Like :func:`grad` but returns ``(value, grads)`` (``((value, aux),
  grads)`` with ``has_aux``), as ``jax.value_and_grad`` does.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.ParamState(jnp.array(3.), name='w')
    >>> bs.value_and_grad(lambda: w.value ** 2, grad_states=w)()
    (Array(9., dtype=float32), Array(6., dtype=float32))
  """
  return _transform("value_and_grad", fun, grad_states, argnums, has_aux)


def jacrev(fun: Callable, grad_states: Any = None, argnums: Any = None,
           has_aux: bool = False) -> Callable:
  """Reverse-mode Jacobian, with :func:`grad`'s ``grad_states``/``argnums``
  conventions applied at every leaf of the output.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.ParamState(jnp.array([1., 2.]), name='w')
    >>> bs.jacrev(lambda: w.value ** 2, grad_states=w)()
    Array([[2., 0.],
           [0., 4.]], dtype=float32)
  """
  return _transform("jacrev", fun, grad_states, argnums, has_aux)


def jacfwd(fun: Callable, grad_states: Any = None, argnums: Any = None,
           has_aux: bool = False) -> Callable:
  """Forward-mode Jacobian; same conventions as :func:`jacrev`.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.ParamState(jnp.array([1., 2.]), name='w')
    >>> bs.jacfwd(lambda x: w.value * x, grad_states=w)(3.)
    Array([[3., 0.],
           [0., 3.]], dtype=float32)
  """
  return _transform("jacfwd", fun, grad_states, argnums, has_aux)


def hessian(fun: Callable, grad_states: Any = None, argnums: Any = None,
            has_aux: bool = False) -> Callable:
  """``jacfwd(jacrev(fun))`` with the same ``grad_states``/``argnums``: the
  Hessian nests the gradient structure twice (``H[a][b]`` for a dict).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.ParamState(jnp.array([1., 2.]), name='w')
    >>> bs.hessian(lambda: jnp.sum(w.value ** 3), grad_states=w)()
    Array([[ 6.,  0.],
           [ 0., 12.]], dtype=float32)
  """
  inner = jacrev(fun, grad_states, argnums, has_aux)
  return _transform("jacfwd", inner, grad_states, argnums, has_aux)


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], *,
        grad_states: Any = None, state_tangents: Any = None,
        has_aux: bool = False) -> tuple:
  """``jax.jvp`` for a function that uses States.

  ``grad_states`` picks States to perturb and ``state_tangents`` gives
  their tangents in the structure of ``grad_states`` (a ``{State: tangent}``
  dict for a type or predicate). Returns ``(out, tangent_out)`` (and
  ``aux`` with ``has_aux``), as ``jax.jvp``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.State(jnp.array(2.), name='w')
    >>> bs.jvp(lambda x: w.value * x, (3.,), (1.,), grad_states=w,
    ...        state_tangents=jnp.array(10.))
    (Array(6., dtype=float32), Array(32., dtype=float32))
  """
  name = f"bs.jvp({fun_name(fun)})"
  frozen = freeze(grad_states, name)
  if (frozen is None) != (state_tangents is None):
    raise ValueError(
        f"{name}: pass state_tangents exactly when grad_states is given.")
  impl = _jvp_impl(frozen, bool(has_aux), name)
  args = (tuple(primals), tuple(tangents), state_tangents)
  return dispatch(name, [fun], ("jvp", frozen, bool(has_aux)), impl, args)


def _jvp_impl(frozen: Any, has_aux: bool, name: str) -> Callable:
  def impl(fun):
    def run(primals, tangents, state_tangents):
      p = _prepare(fun, frozen, primals, {}, name)
      f = _objective(p, primals, tuple(range(len(primals))), has_aux, name)
      gt = p.sel.unpack(state_tangents)
      value, tan, (aux, written) = jax.jvp(
          f, (p.gvals, primals), (gt, tangents), has_aux=True)
      write_results(list(p.writes), written, name)
      return (value, tan, aux) if has_aux else (value, tan)
    return run
  return impl


def vjp(fun: Callable, *primals: Any, grad_states: Any = None,
        has_aux: bool = False) -> tuple:
  """``jax.vjp`` for a function that uses States.

  Returns ``(out, vjp_fn)`` (``(out, vjp_fn, aux)`` with ``has_aux``).
  ``vjp_fn(cotangent)`` returns one cotangent per primal, as in JAX; with
  ``grad_states`` the state cotangents (in the structure of
  ``grad_states``) come first: ``(state_cts, *primal_cts)``. Written States
  get their forward values when ``vjp`` is called. At top level this runs
  op by op (wrap it in ``bs.jit`` to compile).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.State(jnp.array(2.), name='w')
    >>> out, f_vjp = bs.vjp(lambda x: w.value * x, 3., grad_states=w)
    >>> f_vjp(jnp.array(1.))
    (Array(3., dtype=float32), Array(2., dtype=float32, weak_type=True))
  """
  name = f"bs.vjp({fun_name(fun)})"
  frozen = freeze(grad_states, name)
  p = _prepare(fun, frozen, primals, {}, name)
  f = _objective(p, primals, tuple(range(len(primals))), has_aux, name)
  value, pull, (aux, written) = jax.vjp(f, p.gvals, tuple(primals),
                                        has_aux=True)
  write_results(list(p.writes), written, name)

  def vjp_fn(cotangent):
    gs, ga = pull(cotangent)
    return tuple(ga) if frozen is None else (p.sel.pack(gs), *ga)

  return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)
