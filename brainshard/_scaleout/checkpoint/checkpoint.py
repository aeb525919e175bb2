"""Saving and restoring States: sharded checkpoints on orbax-checkpoint.

``save_states`` writes the values of named States (any pytree, any sharding;
each process writes its own shards) and ``restore_states`` reads them back
into the States, each leaf straight into the sharding the State would get
now, so a checkpoint moves between meshes of different sizes. The layout on
disk and the atomic commit are in :mod:`brainshard._scaleout.checkpoint.store`.

Typed PRNG keys (a :class:`~brainshard.RandomState`) are saved as their key
data plus the name of the key implementation, and restored with
``jax.random.wrap_key_data``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from brainshard._core.frames import write_results
from brainshard._core.keys import is_typed_key
from brainshard._core.state.state import State, expect_state
from brainshard._core.state.values import describe_value
from brainshard._core.toplevel import require_top_level
from brainshard._scaleout.checkpoint import store
from brainshard._scaleout.place import resolve_spec

__all__ = ["save_states", "restore_states"]

FORMAT = "brainshard.checkpoint"
FORMAT_VERSION = 1


class CheckpointMismatchError(ValueError):
  """A checkpoint does not fit the States it is restored into."""


# ----------------------------------------------------------------------------
# Arguments


def _named_states(states: Any, where: str) -> dict[str, State]:
  """``{key: State}`` from a mapping or an iterable of named States."""
  if isinstance(states, State):
    states = [states]
  if isinstance(states, Mapping):
    out = dict(states)
    for key, state in out.items():
      if not isinstance(key, str) or not key:
        raise ValueError(
            f"{where}: the keys of `states` must be non-empty strings; got "
            f"{key!r}.")
      expect_state(state, f"{where}: states[{key!r}]")
    return out
  if not isinstance(states, Iterable) or isinstance(states, (str, bytes)):
    raise TypeError(
        f"{where}: `states` must be a dict {{name: State}} or an iterable of "
        f"named States; got {type(states).__name__}.")
  out = {}
  for state in states:
    expect_state(state, f"{where}: each item of `states`")
    if not isinstance(state.name, str) or not state.name:
      raise ValueError(
          f"{where}: {state.label()} has no name, so the checkpoint could "
          "not tell it apart: give it one (`State(..., name='v')`) or pass a "
          "dict {name: State}.")
    if state.name in out:
      raise ValueError(
          f"{where}: two States are named {state.name!r}; names identify "
          "States in a checkpoint, so they must be unique (or pass a dict "
          "{name: State}).")
    out[state.name] = state
  return out


def _leaf_entry(x: Any) -> dict:
  entry = {"shape": list(x.shape), "dtype": str(x.dtype)}
  if is_typed_key(x):
    entry["key_impl"] = str(jax.random.key_impl(x))
  return entry


# ----------------------------------------------------------------------------
# save_states


def save_states(path: str | os.PathLike, states: Any, *,
                overwrite: bool = False, metadata: dict | None = None,
                block: bool = True) -> store.SaveHandle:
  """Saves the values of named States to the directory ``path``.

  Args:
    path: a directory; it must not exist unless ``overwrite``.
    states: a dict ``{name: State}``, or an iterable of States with unique
      non-empty names. Values may be any pytree of arrays with any sharding;
      each process writes the shards its devices hold. The default random
      state is saved only when it is passed
      (``{'rng': bs.random.default_state(), ...}``).
    overwrite: replace the checkpoint at ``path``. The new one becomes
      current atomically; the old one is deleted only after that.
    metadata: a small JSON-able dict saved beside (step, time, config);
      :func:`restore_states` returns it.
    block: wait until the checkpoint is committed. With ``block=False`` the
      values are captured now and written in the background: the simulation
      may step on; ``handle.wait()`` waits for the commit.

  Returns:
    A handle with ``.wait()`` (already done when ``block``).

  Example:
    >>> import tempfile, os, jax.numpy as jnp, brainshard as bs
    >>> v = bs.State(jnp.arange(3.0), name='v')
    >>> path = os.path.join(tempfile.mkdtemp(), 'ckpt')
    >>> _ = bs.save_states(path, [v], metadata={'step': 10})
    >>> v.value = jnp.zeros(3)
    >>> bs.restore_states(path, [v])
    {'step': 10}
    >>> v.value
    Array([0., 1., 2.], dtype=float32)
  """
  where = "bs.save_states"
  require_top_level(where, "reads and writes files")
  named = _named_states(states, where)
  path = os.path.abspath(os.fspath(path))
  try:
    meta = json.loads(json.dumps({} if metadata is None else metadata))
  except (TypeError, ValueError) as e:
    raise ValueError(f"{where}: metadata must be JSON-able: {e}") from None
  if not isinstance(meta, dict):
    raise ValueError(f"{where}: metadata must be a dict, got "
                     f"{type(metadata).__name__}.")
  tree, entries = _capture(named)
  store.wait_pending(path)
  # Every process looks before any creates anything (the barrier), so all of
  # them see the same directory and raise the same error, or none does.
  exists = os.path.lexists(path)
  version = store.next_version(path)
  store.barrier("checked")
  if exists and not overwrite:
    raise FileExistsError(
        f"{where}: {path!r} exists; pass overwrite=True to replace the "
        "checkpoint there.")
  if exists and not os.path.isdir(path):
    raise FileExistsError(
        f"{where}: {path!r} exists and is not a checkpoint directory.")
  if jax.process_index() == 0:
    os.makedirs(path, exist_ok=True)
  store.barrier("created")
  manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
              "metadata": meta, "states": entries}
  return store.save_tree(path, version, tree, manifest, block)


def _capture(named: dict[str, State]) -> tuple[dict, dict]:
  """The arrays to write (``{key: [leaf, ...]}``) and their descriptions."""
  multi = jax.process_count() > 1
  tree, entries = {}, {}
  for key, state in named.items():
    value = state.value
    leaves, treedef = jax.tree.flatten(value)
    entries[key] = {"type": type(state).__name__, "structure": str(treedef),
                    "value": describe_value(value),
                    "leaves": [_leaf_entry(x) for x in leaves]}
    arrays = [jax.random.key_data(x) if is_typed_key(x) else x for x in leaves]
    if multi:  # a value each process holds whole: written once, by process 0
      arrays = [x if not x.is_fully_addressable else np.asarray(x)
                for x in arrays]
    tree[key] = arrays
  return tree, entries


# ----------------------------------------------------------------------------
# restore_states


def restore_states(path: str | os.PathLike, states: Any, *,
                   strict: bool = True) -> dict:
  """Restores named States from the checkpoint at ``path``; returns its
  metadata.

  Each State is found under the key it is given (its name for an iterable).
  A restored leaf takes the sharding of the State's current value when that
  value is placed on devices; otherwise the State's ``spec`` / logical
  ``axes`` on the current mesh (``jax.set_mesh``) when it has one; otherwise
  it is left unplaced, like a freshly created State. Each process reads only
  the shards its devices hold, so a checkpoint written on 8 devices restores
  onto 1 and the reverse.

  All or nothing: a missing key, an extra saved key (with ``strict``), or a
  different pytree structure, shape or dtype raises a ValueError naming the
  State and both descriptions, and no State changes.

  Args:
    path: the checkpoint directory written by :func:`save_states`.
    states: a dict ``{name: State}`` or an iterable of named States.
    strict: fail when the checkpoint holds States not asked for; with
      ``strict=False`` those are ignored (a State asked for and missing is
      always an error).
  """
  where = "bs.restore_states"
  require_top_level(where, "reads and writes files")
  named = _named_states(states, where)
  path = os.path.abspath(os.fspath(path))
  store.wait_pending(path)
  directory = store.read_pointer(path)
  manifest = store.restore_manifest(directory)
  if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
    raise ValueError(
        f"{where}: {directory!r} is not a checkpoint written by "
        "bs.save_states.")
  saved = manifest["states"]
  values = {key: state.value for key, state in named.items()}
  _check(named, values, saved, strict, path)
  item, restore_args = _targets(named, values)
  restored = store.restore_tree(directory, item, restore_args,
                                partial=len(named) < len(saved))
  new_values = []
  for key, state in named.items():
    leaves, treedef = jax.tree.flatten(values[key])
    new_values.append(jax.tree.unflatten(treedef, [
        _finish(x, entry) for x, entry in
        zip(restored[key], saved[key]["leaves"])]))
  write_results(list(named.values()), new_values, where)
  return manifest.get("metadata", {})


def _check(named, values, saved, strict, path) -> None:
  """Raises one CheckpointMismatchError listing every problem, if any."""
  where = "bs.restore_states"
  problems = []
  for key, state in named.items():
    if key not in saved:
      problems.append(
          f"{key!r} ({state.label()}) is not in the checkpoint, which holds "
          f"{sorted(saved)}")
      continue
    entry, value = saved[key], values[key]
    leaves, treedef = jax.tree.flatten(value)
    current = [_leaf_entry(x) for x in leaves]
    if str(treedef) != entry["structure"]:
      problems.append(
          f"{key!r}: saved with pytree structure {entry['structure']} "
          f"({entry['value']}), but the State now holds {treedef} "
          f"({describe_value(value)})")
    elif current != entry["leaves"]:
      problems.append(
          f"{key!r}: saved as {entry['value']}, but the State now holds "
          f"{describe_value(value)} (shape or dtype differs)")
  extra = sorted(set(saved) - set(named))
  if strict and extra:
    problems.append(
        f"the checkpoint also holds {extra}, which were not asked for (pass "
        "them too, or strict=False to ignore them)")
  if problems:
    raise CheckpointMismatchError(
        f"{where}: the checkpoint at {path!r} does not fit the States given; "
        "no State was changed:\n  " + "\n  ".join(problems))


def _current_mesh() -> Mesh | None:
  try:
    mesh = jax.sharding.get_mesh()
  except ValueError:
    return None
  return mesh if isinstance(mesh, Mesh) and not mesh.empty else None


def _leaf_specs(state: State, value: Any, mesh: Mesh | None) -> list:
  """The spec of every leaf from the State's spec / axes, or Nones."""
  leaves = jax.tree.leaves(value)
  if mesh is None or (state.spec is None and state.axes is None):
    return [None] * len(leaves)
  spec = resolve_spec(state, mesh)  # validated against the mesh
  is_spec = lambda s: s is None or isinstance(s, P)  # noqa: E731
  full = jax.tree.broadcast(spec, value, is_leaf=is_spec)
  return [P() if s is None else s
          for s in jax.tree.leaves(full, is_leaf=is_spec)]


def _targets(named: dict, values: dict) -> tuple[dict, dict]:
  """orbax's ``item`` and ``restore_args``: per key, per leaf, what to read
  and into which sharding."""
  mesh = _current_mesh()
  item, restore_args = {}, {}
  for key, state in named.items():
    try:
      plan = _plan(state, values[key], mesh)
    except ValueError as e:
      raise CheckpointMismatchError(
          f"bs.restore_states: {key!r} cannot take its spec on the current "
          f"mesh; no State was changed: {e}") from None
    item[key] = [target for target, _ in plan]
    restore_args[key] = [args for _, args in plan]
  return item, restore_args


def _plan(state: State, value: Any, mesh: Mesh | None) -> list:
  """Per leaf: what orbax restores (its target) and how."""
  ocp = store.orbax()
  leaves = jax.tree.leaves(value)
  plan = []
  for x, spec in zip(leaves, _leaf_specs(state, value, mesh)):
    key_dims = 0
    if is_typed_key(x):
      data = jax.random.key_data(x)
      key_dims, shape, dtype = data.ndim - x.ndim, data.shape, data.dtype
    else:
      shape, dtype = x.shape, x.dtype
    if isinstance(x, jax.Array) and x.committed:
      sharding = jax.random.key_data(x).sharding if key_dims else x.sharding
    elif spec is not None:
      sharding = NamedSharding(mesh, P(*spec, *[None] * (
          len(shape) - len(spec))))
    else:  # unplaced: whole on the host, then the default device
      plan.append((jax.ShapeDtypeStruct(shape, dtype),
                   ocp.RestoreArgs(restore_type=np.ndarray)))
      continue
    plan.append((jax.ShapeDtypeStruct(shape, dtype, sharding=sharding),
                 ocp.ArrayRestoreArgs(sharding=sharding, global_shape=shape,
                                      dtype=dtype)))
  return plan


def _finish(x: Any, entry: dict) -> Any:
  if isinstance(x, np.ndarray):
    x = jnp.asarray(x)
  if "key_impl" in entry:
    x = jax.random.wrap_key_data(x, impl=entry["key_impl"])
  return x
