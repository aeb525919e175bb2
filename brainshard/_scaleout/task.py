"""Stateful programs on sub-meshes (MPMD): ``bs.task`` and ``bs.split_mesh``.

JAX has no MPMD API; its documented way is one mesh per group of devices
(``jax.make_mesh(..., devices=subset)``), one compiled program per mesh,
``jax.device_put`` between meshes and asynchronous dispatch, so programs on
disjoint devices run at the same time. A :class:`Task` is that, for a
stateful step: ``bs.jit(bs.shard_map(fun, mesh=submesh, ...))`` whose States
are checked to live on ``submesh`` and whose arguments coming from another
mesh are moved there (device to device, ``move.py``) when the task consumes
them. Nothing
in a call waits for the devices or goes through the host, so a Python loop
calling two tasks on disjoint meshes keeps both busy.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from brainshard._core.args import fun_name
from brainshard._core.compat import Tracer
from brainshard._core.specs import (
    check_spec, leaf_specs, resolve_state_spec, spec_axes)
from brainshard._core.state.state import State
from brainshard._scaleout.describe import device_ids
from brainshard._scaleout.move import move_array
from brainshard._transforms.jit import jit
from brainshard._transforms.progress import TextBar, tqdm_class
from brainshard._transforms.shard_map.shard_map import shard_map

__all__ = ["Task", "task", "split_mesh", "check_disjoint", "move_array",
           "run_tasks"]


def split_mesh(devices: Any = None, sizes: Sequence[int] = (),
               axis_name: str = "x") -> tuple[Mesh, ...]:
  """Disjoint 1-D meshes over consecutive groups of ``devices``.

  Args:
    devices: a list of devices or a Mesh (its devices, in order); None for
      ``jax.devices()``.
    sizes: devices per sub-mesh; their sum may not exceed the devices.
    axis_name: the one mesh axis of every sub-mesh.

  In a multi-process run, where every size divides by the number of
  processes, each sub-mesh takes the same share of every process's devices:
  arrays then move between sub-meshes inside each process, which JAX
  supports (it cannot move them between processes on CPU or GPU).

  Example:
    >>> import jax, brainshard as bs
    >>> a, b = bs.split_mesh(jax.devices()[:2], (1, 1))
    >>> a.devices.size, b.devices.size, set(a.devices.flat) & set(b.devices.flat)
    (1, 1, set())
  """
  if devices is None:
    devices = jax.devices()
  elif isinstance(devices, Mesh):
    devices = list(devices.devices.flat)
  devices = list(devices)
  if not sizes or any(int(n) < 1 for n in sizes) or sum(sizes) > len(devices):
    raise ValueError(
        f"bs.split_mesh: sizes {tuple(sizes)} must be positive and sum to at "
        f"most the {len(devices)} devices given.")
  by_process: dict[int, list] = {}
  for d in devices:
    by_process.setdefault(d.process_index, []).append(d)
  if len(by_process) > 1 and all(n % len(by_process) == 0 for n in sizes):
    # Multi-process: every sub-mesh takes the same share of every process's
    # devices, so arrays move between sub-meshes inside each process.
    queues = [iter(ds) for _, ds in sorted(by_process.items())]
    groups = [[next(q) for q in queues for _ in range(n // len(queues))]
              for n in sizes]
    groups = [sorted(g, key=lambda d: (d.process_index, d.id)) for g in groups]
  else:
    starts = np.cumsum((0, *sizes))
    groups = [devices[a:b] for a, b in zip(starts[:-1], starts[1:])]
  return tuple(Mesh(np.array(g), (axis_name,)) for g in groups)


def check_disjoint(*tasks_or_meshes: Any) -> None:
  """Raises ``ValueError`` if two of the tasks' (or meshes') device sets
  overlap: tasks meant to run at the same time must not share devices.

  Example:
    >>> import jax, brainshard as bs
    >>> a, b = bs.split_mesh(jax.devices()[:2], (1, 1))
    >>> bs.check_disjoint(a, b)
    >>> bs.check_disjoint(a, a)
    Traceback (most recent call last):
    ...
    ValueError: bs.check_disjoint: mesh 0 and mesh 1 share devices 0.
  """
  sets = []
  for i, t in enumerate(tasks_or_meshes):
    mesh = t.mesh if isinstance(t, Task) else t
    name = t.name if isinstance(t, Task) else f"mesh {i}"
    sets.append((name, frozenset(mesh.devices.flat)))
  for i, (name_a, a) in enumerate(sets):
    for name_b, b in sets[i + 1:]:
      if a & b:
        raise ValueError(f"bs.check_disjoint: {name_a} and {name_b} share "
                         f"devices {device_ids(a & b)}.")


class Task:
  """A stateful step bound to a sub-mesh; see :func:`task`."""

  def __init__(self, fun: Callable, mesh: Mesh, *, in_specs: Any, out_specs,
               state_in_specs, state_out_specs, move_states: bool,
               check_vma: bool, donate_states, static_argnums, name):
    if not isinstance(mesh, Mesh):
      raise TypeError(f"bs.task: mesh must be a jax.sharding.Mesh, got "
                      f"{type(mesh).__name__}.")
    self.mesh = mesh
    self.devices = frozenset(mesh.devices.flat)
    self.name = name or f"bs.task({fun_name(fun)})"
    self.move_states = move_states
    self._in_specs = in_specs
    self._sm = shard_map(fun, mesh=mesh, in_specs=in_specs,
                         out_specs=out_specs, state_in_specs=state_in_specs,
                         state_out_specs=state_out_specs, check_vma=check_vma,
                         static_argnums=static_argnums)
    self._jit = jit(self._sm, donate_states=donate_states,
                    static_argnums=static_argnums)

  def __repr__(self) -> str:
    return f"<{self.name} on devices {device_ids(self.devices)}>"

  def __call__(self, *args, **kwargs):
    args = tuple(self._move_arg(a, i) for i, a in enumerate(args))
    d = self._jit.stateful.discover(*args, **kwargs)
    self._check_states(_own(d.read_states, d.write_states))
    return self._jit(*args, **kwargs)

  def states(self, *args, **kwargs) -> tuple[State, ...]:
    """The States a call with these arguments reads (traced once per
    signature, abstractly, and cached; the call itself reuses the trace).
    Per signature, not the compiled program's: a new argument shape may
    take a branch that reads a State the program has not seen yet."""
    return tuple(self._jit.stateful.discover(*args, **kwargs).read_states)

  # -- arguments from other meshes ------------------------------------------

  def _spec_of_arg(self, i: int) -> Any:
    specs = self._in_specs
    if isinstance(specs, P):
      return specs
    if isinstance(specs, (tuple, list)) and i < len(specs) and isinstance(
        specs[i], P):
      return specs[i]
    return P()  # a pytree spec: replicate here, the shard_map reshards

  def _move_arg(self, arg: Any, i: int) -> Any:
    target = None

    def move(x):
      nonlocal target
      if not self._elsewhere(x):
        return x
      if target is None:
        target = NamedSharding(self.mesh, self._spec_of_arg(i))
      return move_array(x, target, self.name)
    return jax.tree.map(move, arg)

  def _elsewhere(self, x: Any) -> bool:
    """A committed array on devices outside this task's mesh."""
    return (isinstance(x, jax.Array) and not isinstance(x, Tracer)
            and x.committed and not x.sharding.device_set <= self.devices)

  # -- States ----------------------------------------------------------------

  def _check_states(self, states: Sequence[State]) -> None:
    """Every State the call reads lives on this mesh, or is moved here with
    ``move_states`` (all checked and moved before any State changes)."""
    moves = []
    for s in states:
      leaves = jax.tree.leaves(s.slot)
      # A State placed nowhere is not an error: the call places it here
      # once (_core/program/placement.py); move_states places it now, with its spec.
      if not any(self._elsewhere(x) or (self.move_states and _unplaced(x))
                 for x in leaves):
        continue
      if not self.move_states:
        raise ValueError(self._not_here(s, leaves))
      moves.append((s, self._moved_here(s)))
    for s, value in moves:
      s.value = value

  def _not_here(self, s: State, leaves: list) -> str:
    fix = ("Place it on the task's mesh (bs.place(state, mesh) or "
           "bs.sharded_init(..., mesh=mesh)), or pass move_states=True to "
           "move it there (device to device, keeping its spec) when the task "
           "reads it.")
    arrays = [x for x in leaves if isinstance(x, jax.Array)]
    where = device_ids(set().union(*(x.sharding.device_set for x in arrays)))
    return (f"{self.name}: {s.label()} lives on devices {where}, outside "
            f"this task's mesh (devices {device_ids(self.devices)}). {fix}")

  def _moved_here(self, s: State) -> Any:
    """``s``'s value on this mesh: each leaf keeps the spec the task reads it
    with (state_in_specs, the State's spec or axes) or, where that is P(),
    the split it has now when this mesh has those axes."""
    leaves, treedef = jax.tree.flatten(s.slot)
    spec = resolve_state_spec(s, self._sm.state_in_specs, mesh=self.mesh)
    specs = leaf_specs(spec, s.slot, f"{self.name}: {s.label()}")
    targets = []
    for x, spec in zip(leaves, specs, strict=True):
      check_spec(spec, x.shape, self.mesh,
                 f"{self.name}: moving {s.label()} with move_states=True")
      targets.append(NamedSharding(self.mesh, spec if spec_axes(spec)
                                   else self._kept_spec(x)))
    return jax.tree.unflatten(treedef, [
        move_array(x, t, self.name) if self._elsewhere(x) or _unplaced(x)
        else x for x, t in zip(leaves, targets)])

  def _kept_spec(self, x: Any) -> P:
    """``x``'s current split where this mesh can hold it so, else P()."""
    now = getattr(x, "sharding", None)
    if not isinstance(now, NamedSharding):
      return P()
    try:
      check_spec(now.spec, x.shape, self.mesh, "")
    except ValueError:  # an axis this mesh lacks, or sizes that don't divide
      return P()
    return now.spec


def _unplaced(x: Any) -> bool:
  """An array never placed anywhere (JAX's uncommitted default device)."""
  return (isinstance(x, jax.Array) and not isinstance(x, Tracer)
          and not x.committed)


def _own(reads: Sequence[State], writes: Sequence[State]) -> list[State]:
  """The States a task must find on its mesh: all it reads, except those
  it only reads that another program placed (a table two tasks share). Their
  first placement stays; this task's program reads a copy and warns once,
  naming the State (_core/program/placement.py ``keep_placed``)."""
  written = {id(s) for s in writes}
  return [s for s in reads
          if id(s) in written or not s.placed_by_program()]


def task(fun: Callable | None = None, *, mesh: Mesh, in_specs: Any = P(),
         out_specs: Any = P(), state_in_specs: Any = None,
         state_out_specs: Any = None, move_states: bool = False,
         check_vma: bool = True, donate_states: bool | str = "auto",
         static_argnums: int | Sequence[int] = (), name: str | None = None):
  """A stateful step bound to a sub-mesh: one program of an MPMD model.

  ``bs.task(fun, mesh=submesh, ...)`` is ``bs.jit(bs.shard_map(fun,
  mesh=submesh, ...))`` (same arguments) with the checks and movement that
  running several such programs on disjoint devices needs:

  - every State the step reads must live on ``submesh`` (create it there with
    ``bs.sharded_init(..., mesh=submesh)`` or ``bs.place``); one on other
    devices is an error naming it and both device sets, raised before
    anything runs or changes, unless ``move_states=True``: then it is moved
    here device to device, keeping its spec (the one the task reads it with:
    ``state_in_specs``, the State's ``spec`` or ``axes``; where that is
    ``P()``, the split it has, if ``submesh`` has those axes); a State made
    from a plain array (placed nowhere) is placed here by the first call, and
    one that only this task reads but another task's program placed first
    (a shared table) stays there: this task reads a copy and warns once,
    naming it;
  - an argument produced on another mesh (another task's output) is moved
    to this mesh device to device when consumed, also where its layout
    changes (``brainshard/_scaleout/move.py``: no host round trip on any
    supported JAX); outputs stay where they were produced;
  - a call never waits for the devices: a Python loop calling tasks on
    disjoint meshes dispatches them all and the devices run them at once.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> from jax.sharding import PartitionSpec as P
    >>> a, b = bs.split_mesh(jax.devices()[:2], (1, 1))
    >>> va = bs.sharded_init(lambda: bs.State(jnp.zeros(4), 'va'), mesh=a)()
    >>> vb = bs.sharded_init(lambda: bs.State(jnp.ones(4), 'vb'), mesh=b)()
    >>> @bs.task(mesh=a, out_specs=P())
    ... def area_a(drive):
    ...   va.value = va.value + drive
    ...   return va.value
    >>> @bs.task(mesh=b, out_specs=P())
    ... def area_b(drive):
    ...   vb.value = vb.value * drive
    ...   return vb.value
    >>> out_b = vb.value
    >>> for _ in range(3):
    ...   out_a = area_a(out_b)   # moved from b's devices to a's
    ...   out_b = area_b(out_a)
    >>> va.value, vb.value
    (Array([4., 4., 4., 4.], dtype=float32), Array([8., 8., 8., 8.], dtype=float32))
  """
  def wrap(f):
    return Task(f, mesh, in_specs=in_specs, out_specs=out_specs,
                state_in_specs=state_in_specs, state_out_specs=state_out_specs,
                move_states=move_states, check_vma=check_vma,
                donate_states=donate_states, static_argnums=static_argnums,
                name=name)
  return wrap if fun is None else wrap(fun)


def _cpu_default_inflight() -> int | None:
  # XLA:CPU can deadlock in a collective's rendezvous when many
  # multi-device programs are queued (pure JAX too).
  return 8 if jax.default_backend() == "cpu" else None


def run_tasks(step: Callable, carry: tuple, blocks: int, *,
              steps_per_block: int = 1, progress: bool = False,
              desc: str | None = None, max_inflight: int | None = -1,
              record: bool = True) -> tuple[tuple, list]:
  """Calls ``carry = step(*carry)`` ``blocks`` times without waiting for the
  devices, so tasks on disjoint sub-meshes inside ``step`` run at once.

  Each ``step`` typically calls every task once and advances the model
  ``steps_per_block`` steps (a block: each task's ``bs.for_loop`` of K
  steps, exchanging every K steps, the min-delay rule). The host waits only
  where it must: for the block dispatched ``max_inflight`` blocks ago (the
  default: 8 on CPU, whose collectives can deadlock with more queued; None
  never waits) and, with ``progress``, at the end so the one bar (tqdm if
  installed) completes; blocks are counted as the devices finish them.

  Returns ``(carry, outputs)``: the last carry and, with ``record``, the
  carry after every block.

  Example:
    >>> import jax.numpy as jnp, brainshard as bs
    >>> (x,), outs = bs.run_tasks(lambda x: (x + 1,), (jnp.zeros(2),), 3)
    >>> x, len(outs)
    (Array([3., 3.], dtype=float32), 3)
  """
  if max_inflight == -1:
    max_inflight = _cpu_default_inflight()
  bar = _open_bar(blocks * steps_per_block, desc) if progress else None
  pending: list = []  # one leaf of each block not yet seen finished
  outputs = []
  for _ in range(blocks):
    carry = tuple(step(*carry))
    if record:
      outputs.append(carry)
    leaves = [x for x in jax.tree.leaves(carry) if isinstance(x, jax.Array)]
    if leaves:
      pending.append(leaves[-1])
    while pending and (pending[0].is_ready() or (
        max_inflight is not None and len(pending) > max_inflight)):
      pending.pop(0).block_until_ready()
      if bar is not None:
        bar.update(steps_per_block)
  if bar is not None:
    for x in pending:
      x.block_until_ready()
      bar.update(steps_per_block)
    bar.close()
  return carry, outputs


def _open_bar(total: int, desc: str | None) -> Any:
  cls = tqdm_class()
  return cls(total=total, desc=desc) if cls is not None else TextBar(
      total, desc, None)
