"""Putting States on a mesh: ``resolve_spec``, ``place`` and ``sharded_init``.

``place`` moves existing values (``jax.device_put``, or
``jax.make_array_from_process_local_data`` when each process holds its own
part). ``sharded_init`` never materialises a value whole: it runs the
initialiser under ``jax.jit`` with ``out_shardings`` taken from the specs of
the States it creates, so every device computes only its own shard.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from brainshard._core import compat
from brainshard._scaleout import multihost as _multihost
from brainshard._core.axes import (
    current_rules, freeze_rules, merged_rules, using_rules)
from brainshard._core.specs import (
    StateSpecs, check_spec, check_state_specs_arg, leaf_specs,
    resolve_state_spec)
from brainshard._core.args import copy_metadata, fun_name, program_name
from brainshard._core.errors import StateTraceError
from brainshard._core.frames import Frame, write_results
from brainshard._core.state.state import State
from brainshard._core.state.values import canonical, describe_value
from brainshard._core.toplevel import require_top_level

__all__ = ["resolve_spec", "place", "sharded_init", "ShardedInit",
           "states_in", "concrete_mesh"]


def concrete_mesh(mesh: Any, where: str) -> Mesh:
  """``mesh``, or the one set with ``jax.set_mesh``; must be concrete."""
  if mesh is None:
    try:
      mesh = jax.sharding.get_mesh()
    except ValueError:
      mesh = None
    if mesh is None or mesh.empty:
      raise ValueError(
          f"{where} has no mesh: pass mesh=..., or set one with "
          "`jax.set_mesh(mesh)` around the call.")
  if not isinstance(mesh, Mesh):
    raise TypeError(
        f"{where} needs a concrete jax.sharding.Mesh (e.g. from "
        f"jax.make_mesh), got {type(mesh).__name__}.")
  return mesh


def states_in(tree: Any, where: str) -> list[State]:
  """The distinct States in ``tree`` (a State or a pytree of them)."""
  leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, State))
  out: dict[int, State] = {}
  for leaf in leaves:
    if not isinstance(leaf, State):
      raise TypeError(
          f"{where} takes a State or a pytree (list, tuple, dict) of States; "
          f"one leaf is {type(leaf).__name__} ({leaf!r:.60}).")
    out.setdefault(id(leaf), leaf)
  return list(out.values())


def _rules(axis_rules: Any) -> tuple:
  return merged_rules(current_rules(), freeze_rules(axis_rules))


def resolve_spec(state: State, mesh: Any = None, specs: StateSpecs = None,
                 axis_rules: Any = None) -> Any:
  """The PartitionSpec (pytree) ``state`` gets: an entry of ``specs`` (as in
  ``state_in_specs``), else its ``spec``, else its logical ``axes`` mapped
  by the axis rules, else ``P()``. With a ``mesh``, the spec is validated.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> w = bs.State(jnp.zeros((8, 4)), axes=(None, 'hidden'))
    >>> bs.resolve_spec(w, axis_rules={'hidden': 'model'})
    P(None, 'model')
  """
  check_state_specs_arg(specs, "specs")
  value = state.global_value()
  spec = resolve_state_spec(state, specs, rules=_rules(axis_rules), mesh=mesh,
                            value=value)
  if mesh is not None:
    owner = f"{state.label()} ({describe_value(value)})"
    for s, x in zip(leaf_specs(spec, value, owner), jax.tree.leaves(value)):
      check_spec(s, jax.typeof(x).shape, mesh, f"{owner}, spec {s}")
  return spec


# What placement does that needs top level (its one guard's message).
_MOVES = "moves State values between devices"


def place(states: Any, mesh: Any = None, specs: StateSpecs = None,
          axis_rules: Any = None, *, from_process_local: bool = False) -> Any:
  """Puts existing States on ``mesh`` as their resolved specs say.

  Each state's spec is an entry of ``specs`` (None, one PartitionSpec, or a
  dict keyed by States, State subclasses or predicates, as
  ``state_in_specs``), else its own ``spec``, else its ``axes`` mapped by
  the axis rules, else ``P()``. Every spec is checked before anything moves.

  In a multi-process run every process calls ``place`` with the same
  states. By default each process holds the *whole* value (the same on every
  process) and keeps the part its devices need. With
  ``from_process_local=True`` each process holds only *its own part* (e.g.
  the rows it loaded); the global shape is the parts put together along the
  split dimensions (``jax.make_array_from_process_local_data``).

  Args:
    states: a State or a pytree (list, tuple, dict) of States.
    mesh: a ``jax.sharding.Mesh``; None takes the one set by ``jax.set_mesh``.
    specs: specs that win over the states' own, as described above.
    axis_rules: logical-axis rules added on top of the ones in effect.
    from_process_local: see above.

  Returns:
    ``states``, now holding arrays sharded over ``mesh``.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> mesh = jax.make_mesh((2,), ('x',))
    >>> w = bs.ParamState(jnp.zeros((4, 3)), 'w', axes=('neuron', None))
    >>> _ = bs.place(w, mesh, axis_rules={'neuron': 'x'})
    >>> w.sharding.spec
    P('x', None)
  """
  where = "bs.place"
  require_top_level(where, _MOVES)
  check_state_specs_arg(specs, "specs")
  mesh = concrete_mesh(mesh, where)
  flat = states_in(states, where)
  rules = _rules(axis_rules)
  plans = []
  for state in flat:  # resolve and check everything before moving anything
    value = state.global_value()
    owner = f"{where}: {state.label()} ({describe_value(value)})"
    spec = resolve_state_spec(state, specs, rules=rules, mesh=mesh,
                              value=value)
    per_leaf = leaf_specs(spec, value, owner)
    for s, x in zip(per_leaf, jax.tree.leaves(value)):
      shape = jax.typeof(x).shape
      if from_process_local:  # the global shape is known only once put
        shape = _splittable_shape(shape, s, mesh)
      check_spec(s, shape, mesh, f"{owner}, spec {s}")
    plans.append((state, value, per_leaf))
  put = _multihost.put_process_local if from_process_local else (
      _multihost.put_global)
  new_values = []
  for state, value, per_leaf in plans:
    leaves, treedef = jax.tree.flatten(value)
    owner = f"{where}: {state.label()}"
    new_values.append(jax.tree.unflatten(treedef, [
        put(x, NamedSharding(mesh, s), owner)
        for x, s in zip(leaves, per_leaf)]))
  write_results(flat, new_values, where)
  return states


def _splittable_shape(shape: Sequence[int], spec: P, mesh: Any) -> tuple:
  """A shape every split of ``spec`` divides, so ``check_spec`` checks only
  the axis names and the rank (for process-local parts)."""
  if len(spec) > len(shape):
    return tuple(shape)
  sizes = dict(mesh.shape)
  out = list(shape)
  for dim, entry in enumerate(spec):
    axes = [a for a in (entry if isinstance(entry, tuple) else (entry,))
            if a in sizes]
    for a in axes:
      out[dim] *= sizes[a]
  return tuple(out)


# ----------------------------------------------------------------------------
# Sharded initialisation


def _shapes(value: Any) -> tuple:
  leaves, treedef = jax.tree.flatten(value)
  return treedef, tuple((x.shape, x.dtype) for x in leaves)


class _InitFrame(Frame):
  """Collects the States an initialiser creates (in creation order)."""

  def created(self) -> list[State]:
    return [slot.state for slot in self.slots.values() if slot.created]


class ShardedInit:
  """The result of :func:`sharded_init`: call it with the initialiser's
  arguments. ``.lower(...)`` gives the ``jax.stages.Lowered`` of the
  initialiser (``.compile().memory_analysis()`` shows per-device bytes).

  Calling it runs the initialiser once, compiled with the output shardings
  the States' resolved specs ask for, so each device computes only its own
  shards, and returns what the initialiser returns, its States already
  placed. Make one with :func:`sharded_init` rather than directly.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> mesh = jax.make_mesh((2,), ('x',))
    >>> def make(n):
    ...   return bs.ParamState(jnp.ones((n, 3)), 'w', spec=jax.P('x'))
    >>> init = bs.sharded_init(make, mesh, static_argnums=0)
    >>> isinstance(init, bs.ShardedInit)
    True
    >>> init(4).value.sharding.spec
    P('x',)
  """

  def __init__(self, init_fn: Callable, mesh: Any = None,
               specs: StateSpecs = None, axis_rules: Any = None,
               static_argnums: int | Sequence[int] = (),
               static_argnames: str | Sequence[str] = ()):
    check_state_specs_arg(specs, "specs")
    if isinstance(specs, dict) and any(isinstance(k, State) for k in specs):
      raise TypeError(
          "sharded_init: specs may not be keyed by State objects (the States "
          "do not exist before the initialiser runs); key them by State "
          "subclass or by a predicate such as `lambda s: s.name == 'w'`.")
    self.init_fn = init_fn
    self.mesh = mesh
    self.specs = specs
    self.axis_rules = freeze_rules(axis_rules)
    self.static_argnums = static_argnums
    self.static_argnames = static_argnames
    self.name = f"bs.sharded_init({fun_name(init_fn)})"
    copy_metadata(self, init_fn)

  def _traceable(self, box: list) -> Callable:
    """The initialiser as a pure function of its arguments, returning the
    created States' values and the traced leaves of its output."""
    def run(*args, **kwargs):
      frame = _InitFrame(self.name)
      with frame:
        out = self.init_fn(*args, **kwargs)
      written = frame.written_states()
      if written:
        raise StateTraceError(
            f"{self.name} wrote {written[0].label()}, which existed before "
            "it ran; an initialiser may only create States (and read "
            "existing ones).")
      created = frame.created()
      values = [canonical(frame.value_of(s), s.label()) for s in created]
      leaves, treedef = jax.tree.flatten(out)
      traced = [i for i, x in enumerate(leaves)
                if isinstance(x, compat.Tracer)]
      box.append((created, leaves, treedef, traced))
      return values, [leaves[i] for i in traced]
    run.__name__ = run.__qualname__ = program_name(self.init_fn)
    return run

  def _jit(self, box: list, **kw) -> Any:
    return jax.jit(self._traceable(box), static_argnums=self.static_argnums,
                   static_argnames=self.static_argnames, **kw)

  def _prepare(self, args, kwargs, box: list) -> Any:
    require_top_level(self.name, _MOVES)
    mesh = concrete_mesh(self.mesh, self.name)
    rules = merged_rules(current_rules(), self.axis_rules)
    shapes_box: list = []
    with using_rules(rules):
      state_shapes, extra_shapes = self._jit(shapes_box).eval_shape(
          *args, **kwargs)
      created = shapes_box[-1][0]
      shardings = []
      for state, shapes in zip(created, state_shapes):
        owner = (f"{self.name}: {state.label()} "
                 f"({describe_value(shapes)})")
        spec = resolve_state_spec(state, self.specs, rules=rules, mesh=mesh,
                                  value=shapes)
        per_leaf = leaf_specs(spec, shapes, owner)
        for s, x in zip(per_leaf, jax.tree.leaves(shapes)):
          check_spec(s, x.shape, mesh, f"{owner}, spec {s}")
        shardings.append(jax.tree.unflatten(
            jax.tree.structure(shapes),
            [NamedSharding(mesh, s) for s in per_leaf]))
    replicated = NamedSharding(mesh, P())
    expected = [_shapes(v) for v in state_shapes]
    return self._jit(box, out_shardings=(
        shardings, [replicated] * len(extra_shapes))), expected

  def lower(self, *args, **kwargs) -> Any:
    """Lowers the initialiser with the shardings it would run with."""
    jitted, _ = self._prepare(args, kwargs, [])
    return jitted.lower(*args, **kwargs)

  def __call__(self, *args, **kwargs) -> Any:
    box: list = []
    jitted, expected = self._prepare(args, kwargs, box)
    values, extra = jitted(*args, **kwargs)
    created, leaves, treedef, traced = box[-1]
    got = [_shapes(v) for v in values]
    if len(created) != len(expected) or got != expected:
      raise RuntimeError(
          f"{self.name} created different States when traced twice with the "
          f"same arguments ({len(expected)} then {len(created)}); an "
          "initialiser must create the same States every time it runs.")
    for state, value in zip(created, values):
      state.set_global(value)
    for i, x in zip(traced, extra):
      leaves[i] = x
    return jax.tree.unflatten(treedef, leaves)

  def __repr__(self) -> str:
    return f"<{self.name}>"


def sharded_init(init_fn: Callable | None = None, mesh: Any = None, *,
                 specs: StateSpecs = None, axis_rules: Any = None,
                 static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = ()):
  """Creates States directly in their shards, never whole on one device.

  Wraps an initialiser that creates States (and returns them in any
  container or object). Calling the result runs the initialiser under
  ``jax.jit`` with ``out_shardings`` from the created States' specs: an
  entry of ``specs`` (keyed by State subclass or predicate), else the
  State's ``spec``, else its ``axes`` mapped by the axis rules, else
  replicated. The initialiser is traced twice per call (once for shapes,
  once to compile) and each call returns new States. Arrays it returns that
  are not in a State come back replicated.

  Args:
    init_fn: the initialiser; usable as a decorator.
    mesh: a ``jax.sharding.Mesh``; None takes the one set by ``jax.set_mesh``.
    specs: specs that win over the States' own (see above).
    axis_rules: logical-axis rules added on top of the ones in effect.
    static_argnums, static_argnames: as in ``jax.jit`` (e.g. sizes).

  Example:
    >>> import jax, brainshard as bs
    >>> mesh = jax.make_mesh((2,), ('x',))
    >>> @bs.sharded_init(mesh=mesh, axis_rules={'neuron': 'x'},
    ...                  static_argnums=1)
    ... def init(key, n):
    ...   return {'w': bs.ParamState(jax.random.normal(key, (n, n)), 'w',
    ...                              axes=('neuron', None))}
    >>> params = init(jax.random.key(0), 8)
    >>> [s.data.shape for s in params['w'].value.addressable_shards]
    [(4, 8), (4, 8)]
  """
  def wrap(f):
    return ShardedInit(f, mesh, specs, axis_rules, static_argnums,
                       static_argnames)
  return wrap if init_fn is None else wrap(init_fn)
