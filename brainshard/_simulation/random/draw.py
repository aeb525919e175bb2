"""The one draw path of :mod:`brainshard.random`, and its core draws.

:func:`draw` takes the key a draw uses (split off the RandomState, folded
with the ``bs.vmap`` member index), works out the block of the unsharded
draw this shard holds inside ``bs.shard_map`` (``random_blocks.layout``) and
runs the sampler through one ``jax.jit`` keyed by sampler, shape, dtype,
options and layout, so an eager draw compiles once per kind and shape and a
traced draw is inlined.

``RandomState`` (``state.py``) sits above this module, as its methods are
the draws; the draw path reaches it through one hook, :data:`RANDOM_STATE`.

Example:
  >>> import brainshard as bs
  >>> rng = bs.RandomState(0)
  >>> bool((rng.normal(size=4) == bs.RandomState(0).normal(size=4)).all())
  True
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core import compat
from brainshard._core.frames import manual_axes
from brainshard._core.state.state import State
from brainshard._core.threads import frame_stack
from brainshard._simulation.random import (
    blocks as random_blocks, counts as random_counts, small as random_small)
from brainshard._simulation.random.params import (
    Size, _float_dtype, _shape, as_key, as_param, check)

__all__ = ["draw", "normal", "uniform", "bernoulli", "poisson", "randint",
           "from_table"]


# ----------------------------------------------------------------------------
# The key of a draw


class RandomStateHook:
  """How the draw path, below ``RandomState``, reaches it: ``state.py``
  fills both slots as it is imported (``brainshard`` imports it), before
  any draw runs.

  ``cls`` is the class a ``key=`` may be (a draw advances its key);
  ``default()`` the RandomState a draw without ``key=`` advances
  (``bs.random.default_state``).
  """
  cls: type
  default: Callable[[], Any]


RANDOM_STATE = RandomStateHook()


def _key(key: Any, where: str) -> jax.Array:
  """The key one draw uses: split off a RandomState (the default one
  without ``key=``), or the key given."""
  if key is None:
    return RANDOM_STATE.default()._next_key()
  if isinstance(key, RANDOM_STATE.cls):
    return key._next_key()
  if isinstance(key, State):
    raise TypeError(
        f"bs.random.{where}: key= got {key.label()}, which is not a "
        "RandomState; pass a bs.RandomState or a key array.")
  return as_key(key, f"bs.random.{where}")


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


def _draw_context(spec: Any) -> tuple[Any, tuple]:
  """What a draw folds into its key (or None) and the manual mesh axes
  that may split it.

  Inside ``bs.vmap`` inside ``bs.shard_map`` the mesh splits the members
  (an ensemble sharded over the mesh), unless ``spec=`` says how it splits
  the draw itself.
  """
  axes = manual_axes()
  if axes and spec is None and _member_axes():
    return _shard_index(), ()
  return _fold_members(None, axes), axes


# ----------------------------------------------------------------------------
# The one draw path


@functools.partial(jax.jit, static_argnames=("fn", "shape", "dtype", "opts",
                                             "lay", "ranks"))
def _run(key, *params, fn, shape, dtype, opts, lay, ranks):
  # One compiled program per draw kind and shape, so eager draws do not run
  # (and compile) op by op; under a transform it is inlined as usual.
  params = tuple(_in_dtype(dtype, p) for p in params)

  def sample(k, *ps, shape):
    ps = jax.tree.map(functools.partial(_like_key, k), ps)
    return fn(k, *ps, shape=shape, dtype=dtype, **dict(opts))

  return random_blocks.run(sample, key, lay, params, ranks, shape)


def _in_dtype(dtype, x):
  """A float parameter in the draw's float dtype (jax.random refuses to
  narrow)."""
  if x is not None and dtype is not None and jnp.issubdtype(
      dtype, jnp.floating) and jnp.issubdtype(x.dtype, jnp.floating):
    return x.astype(dtype)
  return x


def _like_key(key, x):
  """``x`` varying over the mesh axes the (block) key varies over: loops
  inside ``shard_map`` need one carry type."""
  missing = compat.varying_axes(jax.typeof(key)) - compat.varying_axes(
      jax.typeof(x))
  if missing:
    x = jax.lax.pcast(x, tuple(sorted(missing)), to="varying")
  return x


def draw(where: str, key: Any, fn, params: tuple, shape: tuple[int, ...],
         dtype: Any, *, spec: Any = None, ranks: tuple[int, ...] | None = None,
         event: tuple[int, ...] = (), bits_event: tuple[int, ...] = (),
         unsplit: tuple[str, Any] | None = None, blocked: bool = True,
         **opts: Any) -> jax.Array:
  """Runs sampler ``fn(key, *params, shape=, dtype=, **opts)`` for a draw
  of batch shape ``shape`` (per shard inside ``bs.shard_map``).

  The key is split off the RandomState (under ``SLOT_LOCK``), folded with
  the ``bs.vmap`` member index, and, inside ``bs.shard_map``, made a block
  key for the block ``spec`` gives this shard (``random_blocks``).
  ``event`` are trailing output dimensions the sampler adds (never split);
  ``bits_event`` those it adds to the shape it draws jax.random at;
  ``ranks`` the event rank of each param (default 0: elementwise);
  ``unsplit=(what, dims)``: a spec splitting one of ``dims`` (None: any)
  raises, saying ``what`` the sampler does along it; ``blocked=False``
  draws the same whole draw on every shard (for samplers whose bits are
  not at the output's shape).
  ``opts`` are static (hashable) options.
  """
  index, axes = _draw_context(spec)
  params = tuple(as_param(p) for p in params)
  shape = tuple(shape)
  lay = random_blocks.layout(where, shape + tuple(event), spec, axes,
                             len(event), tuple(bits_event))
  if unsplit is not None:
    _check_unsplit(where, lay, *unsplit)
  if not blocked:  # the same whole draw on every shard
    lay = None
  sub = _key(key, where)  # advanced only once the draw is known to be valid
  if index is not None:
    sub = jax.random.fold_in(sub, index)
  dtype = None if dtype is None else jnp.dtype(dtype)
  ranks = tuple(ranks) if ranks is not None else (0,) * len(params)
  return _run(sub, *params, fn=fn, shape=shape, dtype=dtype,
              opts=tuple(sorted(opts.items())), lay=lay, ranks=ranks)


def _check_unsplit(where: str, lay: Any, what: str, dims: Any) -> None:
  if lay is None:
    return
  split = [d for d, (_, n) in enumerate(lay.dims)
           if n > 1 and (dims is None or d in dims)]
  if split:
    d = split[0]
    raise ValueError(
        f"bs.random.{where}: inside bs.shard_map spec= splits axis {d} of "
        f"the draw over mesh axes {lay.dims[d][0]} (global shape "
        f"{lay.global_shape}), but {where} {what} along it, which no shard "
        f"can draw block by block. Pass a spec= that leaves axis {d} whole "
        "(spec=P() draws the same on every shard).")


def _normal(key, loc, scale, *, shape, dtype):
  return (loc + scale * jax.random.normal(key, shape, dtype)).astype(dtype)


def _uniform(key, low, high, *, shape, dtype):
  return jax.random.uniform(key, shape, dtype, minval=low, maxval=high)


def _bernoulli(key, p, *, shape, dtype):
  return jax.random.bernoulli(key, p, shape)


def _poisson(key, lam, *, shape, dtype):
  return random_counts.poisson(key, lam, shape, dtype)


def _randint(key, low, high, *, shape, dtype):
  return jax.random.randint(key, shape, low, high, dtype)


def normal(loc=0.0, scale=1.0, size: Size = None, key: Any = None,
           dtype: Any = None, spec: Any = None) -> jax.Array:
  """Normal samples with mean ``loc`` and standard deviation ``scale``
  (``None`` means the default, brainstate's spelling).

  ``size`` is the output shape (default: the broadcast shape of the
  parameters). Inside ``bs.shard_map`` it is the per-shard shape and the
  draw is this shard's block of the unsharded draw; ``spec=`` (a
  PartitionSpec over the global shape) says which block (default: the
  leading axis split over all manual mesh axes).

  Example:
    >>> import brainshard as bs
    >>> bs.RandomState(0).normal(1.0, 2.0, size=(2, 3)).shape
    (2, 3)
  """
  loc = 0.0 if loc is None else loc
  scale = 1.0 if scale is None else scale
  return draw("normal", key, _normal, (loc, scale), _shape(size, loc, scale),
              _float_dtype(dtype, loc, scale), spec=spec)


def uniform(low=0.0, high=1.0, size: Size = None, key: Any = None,
            dtype: Any = None, spec: Any = None) -> jax.Array:
  """Uniform samples in ``[low, high)`` (``spec=``: see :func:`normal`)."""
  return draw("uniform", key, _uniform, (low, high), _shape(size, low, high),
              _float_dtype(dtype, low, high), spec=spec)


def bernoulli(p=0.5, size: Size = None, key: Any = None,
              check_valid: bool = True, spec: Any = None) -> jax.Array:
  """Booleans that are True with probability ``p`` (a concrete ``p``
  outside ``[0, 1]`` raises unless ``check_valid=False``)."""
  if check_valid:
    check("bernoulli", lambda p: (p >= 0) & (p <= 1), "p must be in [0, 1]", p)
  return draw("bernoulli", key, _bernoulli, (p,), _shape(size, p), None,
              spec=spec)


def poisson(lam=1.0, size: Size = None, key: Any = None,
            dtype: Any = jnp.int32, spec: Any = None) -> jax.Array:
  """Poisson counts with rate ``lam``, exact.

  A concrete ``lam`` (Python, NumPy, or a jax array outside a trace) of
  small rates is inverted against a table built on the host
  (``random_small``: one 31-bit uniform per element); a traced ``lam``, or
  large or tiny rates, run the exact loop of ``random_counts``.

  Example:
    >>> import brainshard as bs
    >>> bs.RandomState(0).poisson(2.4, size=3).dtype
    dtype('int32')
  """
  table = random_small.poisson_plan(as_param(lam))
  if table is not None:
    return _from_table("poisson", np.moveaxis(table, 0, -1),
                       _shape(size, lam), key, dtype, spec)
  return draw("poisson", key, _poisson, (lam,), _shape(size, lam),
              jnp.dtype(dtype or jnp.int32), spec=spec)


def from_table(table, size: Size = None, key: Any = None,
               dtype: Any = jnp.int32, spec: Any = None) -> jax.Array:
  """Counts drawn from a threshold table ``[K, *shape]`` of
  ``bs.random.poisson_table`` or ``binomial_table``: the rows whose
  threshold 31 random bits pass, one draw per element (exact to
  ``2**-31`` per probability: ``random_small``). Built once on the
  host, a table may live in a State (sharded like the rates, its rows
  whole), for per-element rates that are traced where the draw is.

  Example:
    >>> import brainshard as bs
    >>> t = bs.random.poisson_table([0.5, 2.0, 0.0])
    >>> bs.RandomState(0).from_table(t).shape
    (3,)
  """
  table = jnp.asarray(as_param(table))
  if table.ndim < 1 or table.dtype != jnp.int32:
    raise TypeError(f"bs.random.from_table: table must be an int32 array "
                    f"[K, *shape] of thresholds (bs.random.poisson_table); "
                    f"got {table.dtype} of shape {table.shape}.")
  # the rows last: the draw path's event axes are trailing
  each = np.broadcast_to(np.zeros((), bool), table.shape[1:])
  return _from_table("from_table", jnp.moveaxis(table, 0, -1),
                     _shape(size, each), key, dtype, spec)


def _from_table(where, table, shape, key, dtype, spec):
  dtype = jnp.dtype(dtype or jnp.int32)
  plan = random_small.guide_plan(table)
  if plan is not None:  # one table known at trace time: the same counts
    return draw(where, key, random_small.sample_guided, plan, shape, dtype,
                spec=spec, ranks=(1, 1))
  return draw(where, key, random_small.sample, (table,), shape, dtype,
              spec=spec, ranks=(1,))


def randint(low, high=None, size: Size = None, key: Any = None,
            dtype: Any = jnp.int32, spec: Any = None) -> jax.Array:
  """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None)."""
  if high is None:
    low, high = 0, low
  return draw("randint", key, _randint, (low, high), _shape(size, low, high),
              jnp.dtype(dtype or jnp.int32), spec=spec)
