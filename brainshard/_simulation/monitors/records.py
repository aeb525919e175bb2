"""What a run recorded: host-side storage and the result object.

Each chunk's records are appended per monitor and field, in memory (NumPy
arrays, concatenated when read) or, with a ``store`` directory, to raw files
on disk that are read back as ``numpy.memmap`` (host memory then holds one
chunk at a time); ``zarr_store.py`` keeps them in a zarr group instead
(``record_to``). :class:`Result` gives them by monitor name as
:class:`SpikeData`, :class:`RateData` or :class:`TraceData`, and draws them
(``plot_raster``, ``plot_rate``, ``plot_traces``; needs matplotlib).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import numpy as np

from brainshard._simulation.monitors import plots as _plots

__all__ = ["Store", "Result", "SpikeData", "RateData", "TraceData"]


class Store:
  """Append-only columns ``(monitor, field)``, in memory or on disk."""

  def __init__(self, path: str | os.PathLike | None = None):
    self.path = None if path is None else os.fspath(path)
    if self.path is not None:
      os.makedirs(self.path, exist_ok=True)
    self._cols: dict[tuple[str, str], list] = {}
    # per column: treedef, rows per leaf, (dtype, row shape) per leaf
    self._meta: dict[tuple[str, str], tuple] = {}
    self._cache: dict[tuple[str, str], Any] = {}

  def append(self, name: str, field: str, value: Any) -> None:
    key = (name, field)
    leaves, treedef = jax.tree.flatten(value)
    leaves = [np.ascontiguousarray(x) for x in leaves]
    meta = self._meta.get(key)
    rows = [0] * len(leaves) if meta is None else meta[1]
    self._meta[key] = (treedef, [r + len(x) for r, x in zip(rows, leaves)],
                       [(x.dtype, x.shape[1:]) for x in leaves])
    self._cache.pop(key, None)
    if self.path is None:
      self._cols.setdefault(key, []).append(leaves)
      return
    for k, x in enumerate(leaves):
      with open(self._file(key, k), "ab") as f:
        x.tofile(f)

  def _file(self, key: tuple[str, str], k: int) -> str:
    return os.path.join(self.path, f"{key[0]}.{key[1]}.{k}.bin")

  def get(self, name: str, field: str) -> Any:
    key = (name, field)
    if key in self._cache:
      return self._cache[key]
    meta = self._meta.get(key)
    if meta is None:
      return None
    treedef, rows, kinds = meta
    if self.path is None:
      chunks = self._cols[key]
      leaves = [np.concatenate([c[k] for c in chunks])
                for k in range(len(kinds))]
    else:
      leaves = [np.memmap(self._file(key, k), dtype=dt, mode="r",
                          shape=(r, *shape)) if r else np.zeros((0, *shape), dt)
                for k, (r, (dt, shape)) in enumerate(zip(rows, kinds))]
    value = self._cache[key] = jax.tree.unflatten(treedef, leaves)
    return value

  def rows(self, name: str, field: str) -> int:
    """Rows of a column (of its first leaf), without reading it."""
    meta = self._meta.get((name, field))
    return 0 if meta is None else int(meta[1][0]) if meta[1] else 0

  # Kept in this process only: nothing to check, make or commit on disk.
  def begin(self, monitors: dict, dt: float, start: int, end: int) -> None:
    pass

  def commit(self, steps: int, start: int | None = None) -> None:
    pass

  def extent(self, step: int) -> tuple[int, int]:
    """``(start, steps)`` of the records a runner at ``step`` starts with."""
    return step, 0

  def rewind(self, step: int) -> tuple[int, int]:
    """Records start afresh at ``step``: returns ``(start, steps)``."""
    self.clear()
    return step, 0

  def mark(self) -> dict:
    """Where each column ends now, for :meth:`truncate`."""
    return {key: (meta, len(self._cols.get(key, ())))
            for key, meta in self._meta.items()}

  def truncate(self, mark: dict) -> None:
    """Drops what was appended since ``mark``: a chunk whose records were
    not all written (a full disk) leaves no part of itself behind."""
    for key in list(self._meta):
      meta, chunks = mark.get(key, (None, 0))
      if self.path is None:
        del self._cols.setdefault(key, [])[chunks:]
      else:
        for k, (dt, shape) in enumerate(self._meta[key][2]):
          rows = 0 if meta is None else meta[1][k]
          size = rows * int(np.prod(shape, dtype=np.int64)) * dt.itemsize
          if os.path.exists(self._file(key, k)):
            os.truncate(self._file(key, k), size)
      if meta is None:
        del self._meta[key]
      else:
        self._meta[key] = meta
    self._cache.clear()

  def clear(self, start: int = 0) -> None:
    if self.path is not None:
      for key, (_, rows, _) in self._meta.items():
        for k in range(len(rows)):
          if os.path.exists(self._file(key, k)):
            os.remove(self._file(key, k))
    self._cols.clear()
    self._meta.clear()
    self._cache.clear()


def _times(record) -> np.ndarray:
  """The record's times (``steps * dt``, in the unit of ``dt``)."""
  return record.steps * record.dt


class SpikeData(NamedTuple):
  """Spike events: ``steps[k]`` (global step index) and ``neurons[k]``."""
  steps: np.ndarray
  neurons: np.ndarray
  n: int          # neurons in the population
  dt: float
  times = property(_times)

  def __len__(self) -> int:
    return len(self.steps)


class RateData(NamedTuple):
  """Spikes per step of a population; ``rate`` in Hz for ``dt`` in ms."""
  steps: np.ndarray
  counts: np.ndarray
  n: int
  dt: float
  times = property(_times)

  @property
  def rate(self) -> np.ndarray:
    return self.counts / (self.n * self.dt * 1e-3)


class TraceData(NamedTuple):
  """Values recorded at ``steps`` (leading axis of ``values``)."""
  steps: np.ndarray
  values: Any
  dt: float
  times = property(_times)


class Result:
  """The records of a :class:`~brainshard.Runner`, by monitor name.

  ``result['spikes']`` or ``result.spikes``; ``result.steps`` is how many
  steps have run, ``result.interrupted`` whether the last run stopped early.
  Drawing needs matplotlib: :meth:`plot_raster`, :meth:`plot_rate`,
  :meth:`plot_traces`, or :meth:`plot` for all of them.
  """

  def __init__(self, kinds: dict[str, str], sizes: dict[str, int], dt: float,
               store: Store):
    self.kinds = kinds
    self.sizes = sizes
    self.dt = dt
    self.store = store
    self.start = 0
    self.steps = 0
    self.interrupted = False

  def __repr__(self) -> str:
    parts = ", ".join(f"{n}: {self._describe(n)}" for n in self.kinds)
    return (f"<Result: {self.steps} steps (from step {self.start}), "
            f"dt={self.dt}"
            f"{', interrupted' if self.interrupted else ''}; {parts}>")

  def _describe(self, name: str) -> str:
    # Row counts only: a record on disk is not read to be described.
    kind, rows = self.kinds[name], self.store.rows
    if kind == "spikes":
      return f"{rows(name, 'steps')} spikes"
    if kind == "rate":
      return f"rate over {rows(name, 'counts')} steps"
    return f"{rows(name, 'steps')} records"

  def keys(self) -> list[str]:
    return list(self.kinds)

  def __getitem__(self, name: str) -> Any:
    kind = self.kinds.get(name)
    if kind is None:
      raise KeyError(f"no monitor named {name!r}; monitors: {self.keys()}")
    get = lambda f: self.store.get(name, f)  # noqa: E731
    if kind == "spikes":
      steps, neurons = get("steps"), get("neurons")
      if steps is None:
        steps, neurons = np.zeros(0, np.int64), np.zeros(0, np.int32)
      return SpikeData(steps, neurons, self.sizes[name], self.dt)
    if kind == "rate":
      counts = get("counts")
      counts = np.zeros(0, np.int32) if counts is None else counts
      return RateData(self.start + np.arange(len(counts)), counts,
                      self.sizes[name], self.dt)
    steps = get("steps")
    return TraceData(np.zeros(0, np.int64) if steps is None else steps,
                     get("values"), self.dt)

  def __getattr__(self, name: str) -> Any:
    if name.startswith("_") or name not in self.__dict__.get("kinds", {}):
      raise AttributeError(name)
    return self[name]

  def _first(self, kind: str, name: str | None) -> str:
    if name is not None:
      return name
    for n, k in self.kinds.items():
      if k == kind:
        return n
    raise ValueError(f"no {kind} monitor recorded; monitors: {self.keys()}")

  def plot_raster(self, name: str | None = None, ax: Any = None, **kw) -> Any:
    """Spike raster (time vs neuron) of a SpikeMonitor; returns the Axes."""
    return _plots.raster(self[self._first("spikes", name)], ax, **kw)

  def plot_rate(self, name: str | None = None, ax: Any = None, *,
                bin_ms: float = 1.0, **kw) -> Any:
    """Population rate (Hz) in bins of ``bin_ms``, from a RateMonitor (or a
    SpikeMonitor's events); returns the Axes."""
    name = name or next((n for n, k in self.kinds.items() if k == "rate"),
                        None) or self._first("spikes", None)
    data = self[name]
    if isinstance(data, SpikeData):
      counts = np.bincount(data.steps - self.start, minlength=self.steps)
      data = RateData(self.start + np.arange(self.steps), counts, data.n,
                      self.dt)
    return _plots.rate(data, ax, bin_ms=bin_ms, **kw)

  def plot_traces(self, name: str | None = None, ax: Any = None, **kw) -> Any:
    """Recorded traces (e.g. membrane potentials); returns the Axes."""
    return _plots.traces(self[self._first("trace", name)], ax, **kw)

  def plot(self, title: str | None = None) -> Any:
    """One figure: raster, rate and traces (those recorded); returns it."""
    return _plots.overview(self, title)
