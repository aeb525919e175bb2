"""``bs.shard_map``: a state-aware ``jax.shard_map``, traced or eager.

The user function is re-run inside ``jax.shard_map`` at per-shard shapes:
the per-shard values of the states it reads are injected into a frame, and
the values it writes are collected and returned as extra outputs. This
module is the public entry: it checks the arguments and sends each call one
of two ways. Under another brainshard transform (or a JAX trace) the
function's :class:`~brainshard._transforms.shard_map.plan.ShardPlanner`
emits ``jax.shard_map`` into that trace; at top level the call runs under
one cached ``jax.jit`` per mesh (``eager.py``), so repeated calls re-run no
Python and compile nothing new.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from jax.sharding import PartitionSpec as P

from brainshard._core import compat
from brainshard._core.args import StaticArgs, copy_metadata, fun_name
from brainshard._core.axes import (
    Rules, current_rules, freeze_rules, merged_rules, using_rules)
from brainshard._core.caches import Cache
from brainshard._core.specs import (
    StateSpecs, check_kwarg_specs, check_state_specs_arg)
from brainshard._core.threads import thread_frames
from brainshard._transforms.shard_map.eager import eager_runner
from brainshard._transforms.shard_map.plan import ShardPlanner

__all__ = ["shard_map", "ShardMappedFunction"]

_PLANNER_FIELDS = frozenset(
    f.name for f in dataclasses.fields(ShardPlanner) if f.init)


class ShardMappedFunction:
  """The result of :func:`shard_map`: call it like the function it wraps."""

  def __init__(self, fun: Callable, mesh: Any, in_specs: Any, out_specs: Any,
               state_in_specs: StateSpecs, state_out_specs: StateSpecs,
               axis_names: frozenset, check_vma: bool,
               static_argnums: Any = (), static_argnames: Any = (),
               kwarg_specs: dict | None = None, axis_rules: Any = None):
    check_state_specs_arg(state_in_specs, "state_in_specs")
    check_state_specs_arg(state_out_specs, "state_out_specs")
    if not (in_specs is None or isinstance(in_specs, (P, tuple, list))):
      raise TypeError(
          "in_specs must be None, a PartitionSpec, or a tuple with one entry "
          f"per positional argument; got {type(in_specs).__name__}.")
    name = f"bs.shard_map({fun_name(fun)})"
    static = StaticArgs(fun, static_argnums, static_argnames, owner=name)
    self.planner = ShardPlanner(
        fun, name, mesh, in_specs, out_specs,
        check_kwarg_specs(kwarg_specs, static.argnames), state_in_specs,
        state_out_specs, frozenset(axis_names), check_vma, static)
    self.axis_rules = freeze_rules(axis_rules)
    self._eager: Cache = Cache()
    copy_metadata(self, fun)

  def __getattr__(self, name: str) -> Any:
    # The function, its name, mesh and specs are the planner's, held once.
    planner = self.__dict__.get("planner")
    if planner is not None:
      if name in _PLANNER_FIELDS:
        return getattr(planner, name)
      if name in ("static_argnums", "static_argnames"):
        return getattr(planner.static, name.removeprefix("static_"))
    raise AttributeError(
        f"{type(self).__name__!r} object has no attribute {name!r}")

  def __repr__(self) -> str:
    mesh = "from jax.set_mesh" if self.mesh is None else dict(self.mesh.shape)
    return f"<{self.name} mesh={mesh}>"

  @compat.api_boundary
  def __call__(self, *args, **kwargs):
    # Logical-axis rules are read while planning, so the rules this call
    # sees are part of every cache key (the eager runner's included).
    rules = current_rules()
    if self.axis_rules:
      rules = merged_rules(rules, self.axis_rules)
      with using_rules(rules):
        return self._call(rules, args, kwargs)
    return self._call(rules, args, kwargs)

  def _call(self, rules: Rules, args: tuple, kwargs: dict) -> Any:
    planner = self.planner
    mesh = planner.mesh if planner.mesh is not None else planner.resolve_mesh()
    if thread_frames.stack or not compat.at_top_level():
      return planner.run(mesh, args, kwargs)
    planner.take_fresh(None)  # a plan left by a failed call is stale
    runner = self._eager.get((mesh, rules))
    if runner is None:
      runner = self._eager[(mesh, rules)] = eager_runner(planner, mesh)
    return runner.entry(*args, **kwargs)


def shard_map(fun: Callable | None = None, mesh: Any = None,
              in_specs: Any = None, out_specs: Any = P(), *,
              state_in_specs: StateSpecs = None,
              state_out_specs: StateSpecs = None,
              axis_names: frozenset = frozenset(),
              check_vma: bool = True,
              static_argnums: int | Sequence[int] = (),
              static_argnames: str | Sequence[str] = (),
              kwarg_specs: dict | None = None,
              axis_rules: Any = None):
  """``jax.shard_map`` for functions that read and write States.

  The function runs once per shard on per-shard values of its arguments and
  of the States it touches; each state is split as ``state_in_specs`` says
  and written back as ``state_out_specs`` says (by default, as it came in).

  Args:
    fun: the per-shard function; may close over States.
    mesh: a ``jax.sharding.Mesh``; None takes the one set by ``jax.set_mesh``.
    in_specs: one PartitionSpec for every dynamic positional argument, a
      tuple with one spec (or spec pytree prefix, e.g. a dict of specs for a
      dict argument) per dynamic positional argument, or None to take each
      argument's own (Explicit) sharding. Static arguments take no entry.
    out_specs: PartitionSpec pytree prefix of the output (default ``P()``).
    state_in_specs, state_out_specs: None, one PartitionSpec for every state,
      or a dict keyed by States, State subclasses or predicates
      ``(state) -> bool``. First match wins: the State itself, then
      type/predicate keys in dict order, then the state's own ``spec``, then
      its logical ``axes`` mapped by the axis rules, then ``P()``.
    axis_names: mesh axes the function is manual over (default: all); the
      other axes stay automatic (compiler-sharded). A State's spec may name
      automatic axes: they set where it lives, and only its manual part
      splits the value the function sees. Argument specs name manual axes
      only.
    check_vma: as in ``jax.shard_map``.
    static_argnums, static_argnames: arguments that are hashable Python
      values steering the trace (e.g. a number of steps), as in ``jax.jit``:
      they are part of the cache key and are passed to the function as they
      are.
    kwarg_specs: ``{name: spec or spec pytree prefix}`` for keyword
      arguments; keyword arguments not named here are replicated.
    axis_rules: logical-axis rules (see :func:`brainshard.axis_rules`) added
      on top of the ones in effect when the function is called.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> from jax.sharding import PartitionSpec as P
    >>> mesh = jax.make_mesh((1,), ('x',))
    >>> v = bs.State(jnp.zeros(4), name='v')
    >>> @bs.shard_map(mesh=mesh, in_specs=P('x'), out_specs=P(),
    ...               state_in_specs={v: P('x')})
    ... def step(i):
    ...   v.value = v.value + i
    ...   return jax.lax.psum(v.value.sum(), 'x')
    >>> step(jnp.ones(4))
    Array(4., dtype=float32)
  """
  def wrap(f):
    return ShardMappedFunction(f, mesh, in_specs, out_specs, state_in_specs,
                               state_out_specs, axis_names, check_vma,
                               static_argnums, static_argnames, kwarg_specs,
                               axis_rules)
  return wrap if fun is None else wrap(fun)
