"""Populations of different sizes on one sharded axis: views, per-population
parameters, and per-population spike and rate records.

A :class:`~brainshard._models.layout.Layout` lays the populations end to end
(padded at the end to whole shards). Here:

- :class:`Population`: one population's ids; ``pop.view(x)`` is its slice
  of a global array or State value (outside ``shard_map``), and
  ``pop.local_mask()`` marks its neurons in the shard's block (inside).
- :func:`population_values`: a per-neuron array from one value per
  population (thresholds, drives...), padding filled with ``fill``.
- :func:`split_spikes` / :func:`population_rates`: a run's SpikeMonitor
  record cut into one record per population (neuron ids counted from the
  population's start) and one rate per population, on the host from the
  events (no device work).
- :func:`population_counts`: a ``bs.StateMonitor`` source counting each
  population's spikes per step on the device (integer sums: exact on any
  mesh), for runs that keep rates but not spikes; :func:`counts_to_rates`
  turns its record into one ``RateData`` per population.

Example:
  >>> import numpy as np
  >>> from brainshard._models.layout import Layout
  >>> from brainshard._models.population import Population, population_values
  >>> lay = Layout({'E': 5, 'I': 2}, n_shards=4)
  >>> Population(lay, 'I').view(np.arange(lay.n_padded)).tolist()
  [5, 6]
  >>> population_values(lay, {'E': 1.0, 'I': 2.0}).tolist()
  [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 0.0]
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from brainshard._core.state.state import State
from brainshard._simulation.monitors.records import RateData, SpikeData
from brainshard._models.layout import Layout

__all__ = ["Population", "population_values", "population_ids",
           "split_spikes", "population_rates", "population_counts",
           "counts_to_rates"]


class Population:
  """Population ``name`` of ``layout``: global ids ``[start, stop)``."""

  def __init__(self, layout: Layout, name: str):
    self.layout, self.name = layout, name
    self.start, self.stop = layout.range(name)

  @property
  def size(self) -> int:
    return self.stop - self.start

  def __repr__(self) -> str:
    return f"Population({self.name!r}, ids [{self.start}, {self.stop}))"

  def view(self, x: Any, axis: int = -1) -> Any:
    """This population's slice of ``x`` (an array or a State, whose value
    is taken) along ``axis``, the neuron axis (padded or not)."""
    if isinstance(x, State):
      x = x.value
    length = x.shape[axis]
    if length not in (self.layout.n, self.layout.n_padded):
      raise ValueError(
          f"Population {self.name!r}: axis {axis} of x has {length} entries; "
          f"the layout's neuron axis has {self.layout.n} "
          f"({self.layout.n_padded} padded).")
    index = [slice(None)] * x.ndim
    index[axis] = slice(self.start, self.stop)
    return x[tuple(index)]

  def local_mask(self, axis_name: str = "x") -> jax.Array:
    """Inside ``bs.shard_map``: bool ``[n_local]``, True for this shard's
    neurons of the population."""
    n_local = self.layout.n_local
    ids = jax.lax.axis_index(axis_name) * n_local + jnp.arange(n_local)
    return (ids >= self.start) & (ids < self.stop)


def population_ids(layout: Layout) -> np.ndarray:
  """int32 ``[n_padded]``: each neuron's population (its position in
  ``layout.names``); ``len(names)`` for padding."""
  out = np.full(layout.n_padded, len(layout.names), np.int32)
  for k, name in enumerate(layout.names):
    start, stop = layout.range(name)
    out[start:stop] = k
  return out


def population_values(layout: Layout, values: Mapping[str, Any],
                      fill: Any = 0, dtype: Any = np.float32) -> np.ndarray:
  """``[n_padded]``: ``values[pop]`` (a scalar, or one value per neuron of
  the population) for every population; ``fill`` for padding. A missing or
  unknown population is an error naming it."""
  unknown = set(values) - set(layout.names)
  missing = set(layout.names) - set(values)
  if unknown or missing:
    raise ValueError(
        f"population_values: populations {sorted(missing)} have no value"
        f"{'' if not unknown else f'; {sorted(unknown)} are not in the layout'}"
        f" (layout: {list(layout.names)}).")
  out = np.full(layout.n_padded, fill, dtype)
  for name in layout.names:
    start, stop = layout.range(name)
    v = np.asarray(values[name], dtype)
    if v.ndim and v.shape != (stop - start,):
      raise ValueError(f"population_values: population {name!r} has "
                       f"{stop - start} neurons, its values shape {v.shape}.")
    out[start:stop] = v
  return out


def split_spikes(spikes: Any, layout: Layout) -> dict[str, Any]:
  """``{population: SpikeData}`` from one ``SpikeData`` over the layout's
  axis; neuron ids count from the population's start, ``n`` is its size.
  Spikes of padding neurons (there should be none) are dropped."""
  pop = population_ids(layout)[np.asarray(spikes.neurons, np.int64)]
  out = {}
  for k, name in enumerate(layout.names):
    start, stop = layout.range(name)
    sel = pop == k
    out[name] = SpikeData(spikes.steps[sel], spikes.neurons[sel] - start,
                          stop - start, spikes.dt)
  return out


def population_rates(spikes: Any, layout: Layout, steps: int,
                     start: int = 0) -> dict[str, Any]:
  """``{population: RateData}`` (spikes per step; ``.rate`` in Hz) for the
  ``steps`` steps from ``start`` (``result.steps``, ``result.start``)."""
  out = {}
  for name, data in split_spikes(spikes, layout).items():
    counts = np.bincount(np.asarray(data.steps, np.int64) - start,
                         minlength=steps)[:steps].astype(np.int32)
    out[name] = RateData(start + np.arange(steps), counts, data.n,
                         spikes.dt)
  return out


def population_counts(layout: Layout, mesh: Any, axis: str = "x"):
  """A ``bs.StateMonitor`` source: ``f(spikes [n_padded]) -> int32
  [len(names)]``, each population's spikes in this step, counted per shard
  and summed over shards (integers: the same on any mesh)."""
  if mesh.shape.get(axis) != layout.n_shards:
    raise ValueError(
        f"population_counts: the layout has {layout.n_shards} shard(s), mesh "
        f"axis {axis!r} has {mesh.shape.get(axis)}; use layout.with_shards().")
  n_pop = len(layout.names)
  table = population_ids(layout).reshape(layout.n_shards, layout.n_local)

  def local(spikes):
    pop = jnp.asarray(table)[jax.lax.axis_index(axis)]
    counts = jax.ops.segment_sum(spikes.astype(jnp.int32), pop,
                                 num_segments=n_pop + 1)[:n_pop]
    return jax.lax.psum(counts, axis)

  def counts(spikes):
    if spikes.shape != (layout.n_padded,):
      raise ValueError(f"population_counts: spikes have shape {spikes.shape}, "
                       f"the layout's padded axis is ({layout.n_padded},).")
    return jax.shard_map(local, mesh=mesh, in_specs=P(axis), out_specs=P())(
        spikes)
  counts.__name__ = "population_counts"
  return counts


def counts_to_rates(trace: Any, layout: Layout) -> dict[str, Any]:
  """``{population: RateData}`` from the record of a
  ``bs.StateMonitor(population_counts(...))``."""
  values = np.asarray(trace.values)
  return {name: RateData(trace.steps, values[:, k],
                         layout.range(name)[1] - layout.range(name)[0],
                         trace.dt)
          for k, name in enumerate(layout.names)}
