"""Where each neuron lives: populations concatenated on one sharded axis.

A network's neurons are its populations laid end to end in the order given,
so a neuron's global id (population offset + index) never depends on the
mesh. The axis is padded at its end to a multiple of the number of shards;
shard ``s`` holds global ids ``[s * n_local, (s + 1) * n_local)``. Padding
neurons are inert: no rule connects them and no record counts them.

Example:
  >>> from brainshard._models.layout import Layout
  >>> lay = Layout({'E': 10, 'I': 3}, n_shards=4)
  >>> lay.n, lay.n_padded, lay.n_local, lay.range('I')
  (13, 16, 4, (10, 13))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import jax
import numpy as np

__all__ = ["Layout", "mesh_axis"]


@dataclass(frozen=True)
class Layout:
  """Populations (name -> size, in order) on ``n_shards`` equal blocks."""

  sizes: Mapping[str, int] | Sequence[tuple[str, int]]
  n_shards: int = 1
  _sizes: tuple[tuple[str, int], ...] = field(init=False, repr=False)

  def __post_init__(self):
    items = tuple(self.sizes.items() if isinstance(self.sizes, Mapping)
                  else self.sizes)
    if not items:
      raise ValueError("Layout needs at least one population.")
    for name, size in items:
      if isinstance(size, (bool, np.bool_)) or not isinstance(
          size, (int, np.integer)) or size < 0:
        raise ValueError(f"Layout: population {name!r} has size {size!r}; "
                         "sizes are non-negative ints.")
    items = tuple((name, int(size)) for name, size in items)
    if len({name for name, _ in items}) != len(items):
      raise ValueError(f"Layout: population names repeat: {[n for n, _ in items]}.")
    if isinstance(self.n_shards, (bool, np.bool_)) or not isinstance(
        self.n_shards, (int, np.integer)) or self.n_shards < 1:
      raise ValueError(f"Layout: n_shards must be a positive int, got {self.n_shards!r}.")
    object.__setattr__(self, "n_shards", int(self.n_shards))
    object.__setattr__(self, "_sizes", items)

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(name for name, _ in self._sizes)

  @property
  def n(self) -> int:
    """Real neurons, all populations."""
    return sum(size for _, size in self._sizes)

  @property
  def n_local(self) -> int:
    """Neurons per shard (padding included)."""
    return max(1, -(-self.n // self.n_shards))

  @property
  def n_padded(self) -> int:
    return self.n_local * self.n_shards

  def range(self, name: str) -> tuple[int, int]:
    """Global ids ``[start, stop)`` of population ``name``."""
    start = 0
    for other, size in self._sizes:
      if other == name:
        return start, start + size
      start += size
    raise KeyError(f"Layout has no population {name!r}; it has {list(self.names)}.")

  def shard_block(self, shard: int) -> tuple[int, int]:
    """Global ids ``[start, stop)`` shard ``shard`` holds (padding included)."""
    return shard * self.n_local, (shard + 1) * self.n_local

  def with_shards(self, n_shards: int) -> "Layout":
    return Layout(self._sizes, n_shards)


def mesh_axis(mesh: Any, axis: str | None, owner: str, *,
              all_devices: bool = False) -> tuple[jax.sharding.Mesh, str]:
  """The mesh and the axis the neurons are split over: ``mesh`` None takes
  the one set with ``jax.set_mesh`` (else, with ``all_devices``, every
  device on one axis ``'x'``); ``axis`` None the mesh's only axis. Errors
  name ``owner``."""
  if mesh is None:
    mesh = jax.sharding.get_mesh()
    if mesh is None or mesh.empty:
      if not all_devices:
        raise ValueError(f"{owner} has no mesh: pass mesh=..., or set one "
                         "with `jax.set_mesh(mesh)` around the call.")
      mesh = jax.make_mesh((jax.device_count(),), ("x",))
  if not isinstance(mesh, jax.sharding.Mesh):
    raise TypeError(f"{owner}: mesh must be a concrete jax.sharding.Mesh "
                    f"(e.g. from jax.make_mesh), got {type(mesh).__name__}.")
  names = tuple(mesh.axis_names)
  if axis is None:
    if len(names) != 1:
      raise ValueError(f"{owner}: the mesh has axes {names}; name the one "
                       "the neurons are split over with axis=...")
    axis = names[0]
  if axis not in names:
    raise ValueError(f"{owner}: axis {axis!r} is not an axis of the mesh "
                     f"{dict(mesh.shape)}.")
  return mesh, axis
