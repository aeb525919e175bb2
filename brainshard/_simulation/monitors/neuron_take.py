"""Picking a few neurons of a recorded value (``StateMonitor(index=...)``).

For a State sharded along its first axis, :class:`LocalTake` lets each
shard pick its own neurons, so recording them needs no collective; any
other value goes through :func:`take`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core.state.state import State

__all__ = ["LocalTake", "take"]


class LocalTake:
  """``x[index]`` of a State sharded along its first axis, without a
  collective: each shard picks its own neurons (padded to the same count)
  under ``jax.shard_map``; the result stays sharded and the host puts the
  columns back in order. (``x[index]`` on the global array would gather the
  values across devices every step.)"""

  def __init__(self, mesh, axes, table: np.ndarray, order: np.ndarray):
    self.mesh, self.axes, self.table, self.order = mesh, axes, table, order

  @classmethod
  def plan(cls, source: Any, index: Any) -> "LocalTake | None":
    value = source.slot if isinstance(source, State) else None
    sharding = getattr(value, "sharding", None)
    if (index is None or index.ndim != 1
        or not isinstance(sharding, jax.sharding.NamedSharding)
        or not sharding.spec or sharding.spec[0] is None):
      return None
    axes = sharding.spec[0]
    shards = int(np.prod([sharding.mesh.shape[a] for a in (
        axes if isinstance(axes, tuple) else (axes,))]))
    n_local = value.shape[0] // shards
    shard, local = np.divmod(index.astype(np.int64) % value.shape[0], n_local)
    rank = np.array([np.sum(shard[:j] == shard[j]) for j in range(len(index))],
                    np.int64)
    m = int(rank.max(initial=0)) + 1
    table = np.zeros((shards, m), np.int32)
    table[shard, rank] = local
    return cls(sharding.mesh, axes, table, shard * m + rank)

  def __call__(self, x: Any) -> Any:
    spec = jax.sharding.PartitionSpec(self.axes)
    table, axes = self.table, self.axes

    def local(x):
      return x[jnp.asarray(table)[jax.lax.axis_index(axes)]]
    return jax.shard_map(local, mesh=self.mesh, in_specs=spec,
                         out_specs=spec)(x)


def take(a: Any, index: np.ndarray) -> Any:
  """``a[index]``; under an Explicit mesh the (few) picked rows come back
  replicated, as the sharding type must say where they go.

  Example:
    >>> import jax.numpy as jnp, numpy as np
    >>> take(jnp.arange(5.0), np.array([4, 0]))
    Array([4., 0.], dtype=float32)
  """
  sharding = getattr(jax.typeof(a), "sharding", None)
  if isinstance(sharding, jax.sharding.NamedSharding) and any(
      t == jax.sharding.AxisType.Explicit for t in sharding.mesh.axis_types):
    return a.at[jnp.asarray(index)].get(
        out_sharding=jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec()))
  return a[jnp.asarray(index)]
