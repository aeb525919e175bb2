"""A run's records on disk, in a zarr v3 group: appended chunk by chunk,
committed atomically, readable while the run goes on and after a kill.

Why zarr v3: its arrays are chunked and appendable, so each chunk's records
go to disk as the run goes and host memory stays flat; it is an open format
that zarr, xarray and dask read (in Python, and zarr-python's peers in
other languages); and each of its files is written whole (a temporary file
renamed over the old one), so a killed writer never leaves a torn file.
HDF5 keeps its index in the file it appends to: a writer killed mid-append
can leave the whole file unreadable. NWB sits on HDF5 (or zarr) and wants
far more metadata than a spike record has.

Layout of ``run.zarr`` (one group per monitor)::

  zarr.json                 root attributes ``brainshard_records``: dt,
                            start, steps, end, the monitors, and the number
                            of rows each array holds (the commit)
  spikes/steps, /neurons    int64 / int32 [spike]: one event per row
  rate/counts               int32 [time]: spikes per step from ``start``
  v/steps, /values          int64 [time], dtype [time, neuron, ...]

Kill safety: a chunk's rows are appended to every array first (zarr grows
the array, then writes its chunk files), and only then does one write of
the root's ``zarr.json`` commit the new row counts. A reader trusts those
counts alone, never an array's shape: after a kill, rows past them (a half
written chunk) are ignored, and a writer reopening the group cuts them off.

Example:
  >>> import tempfile, numpy as np
  >>> store = ZarrStore(tempfile.mkdtemp() + '/run.zarr')
  >>> store.begin({'s': {'kind': 'spikes', 'n': 4}}, dt=0.1, start=0, end=8)
  >>> store.append('s', 'steps', np.array([1, 5]))
  >>> store.append('s', 'neurons', np.array([0, 3], np.int32))
  >>> store.get('s', 'steps').tolist()   # appended, not committed yet
  []
  >>> store.commit(steps=8)
  >>> store.get('s', 'steps').tolist(), store.rows('s', 'neurons')
  ([1, 5], 2)
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from brainshard._simulation.monitors.records import Result, Store
from brainshard._simulation.monitors.tree_spec import (
    count_leaves, flatten_tree, unflatten_tree)

__all__ = ["ZarrStore", "KEY", "open_zarr", "open_store", "load_records"]

KEY = "brainshard_records"   # the root attribute that holds the commit
VERSION = 1
CHUNK_BYTES = 2 << 20        # bytes per zarr chunk: a cheap rewrite per append


def open_zarr() -> Any:
  """The zarr module (v3), or an ImportError saying how to install it."""
  try:
    import zarr
  except ImportError:
    raise ImportError("recording to disk needs zarr >= 3: "
                      "pip install 'brainshard[record]'") from None
  if int(zarr.__version__.split(".")[0]) < 3:
    raise ImportError(f"recording to disk needs zarr >= 3, found "
                      f"{zarr.__version__}: pip install -U 'zarr>=3'")
  return zarr


def open_store(store: Any, record_to: Any, kinds: dict, dt: float) -> Any:
  """A Runner's records: in memory (``record_to`` None or ``'memory'``), in
  raw files (``store``, a directory), or in a zarr record (``record_to``)."""
  if record_to is not None and store is not None:
    raise ValueError("Runner: give record_to (a zarr record) or store (raw "
                     "files), not both")
  if record_to is None or record_to == "memory":
    return Store(store)
  return ZarrStore(record_to, kinds=kinds, dt=dt)


class ZarrStore:
  """Append-only columns ``(monitor, field)`` in a zarr v3 group at ``path``.

  The Runner calls :meth:`begin` before a run, :meth:`append` per field and
  :meth:`commit` per chunk, :meth:`mark`/:meth:`truncate` to drop a chunk
  that failed half-way, :meth:`rewind` to continue from an earlier step.
  ``mode='r'`` opens a record read-only (:func:`~brainshard.load_records`).
  ``kinds`` (``{monitor: kind}``) and ``dt``, when given, must be those of
  a record already at ``path``: checked before anything there changes.
  """

  def __init__(self, path: str | os.PathLike, mode: str = "a", *,
               kinds: dict | None = None, dt: float | None = None):
    zarr = open_zarr()
    self.path = os.fspath(path)
    self.writable = mode != "r"
    if not self.writable and not os.path.exists(self.path):
      raise FileNotFoundError(f"no record at {self.path}")
    if self.writable and os.path.isfile(self.path):
      raise ValueError(f"record_to={self.path!r} is a file; give a directory "
                       "path (e.g. 'run.zarr')")
    if self.writable and os.path.isdir(self.path) and os.listdir(self.path):
      if not os.path.exists(os.path.join(self.path, "zarr.json")):
        raise ValueError(f"record_to={self.path!r} is a directory that holds "
                         "something else than a record; give a new path")
    self.root = zarr.open_group(self.path, mode=mode, zarr_format=3)
    info = self.root.attrs.get(KEY)
    if info is None and (not self.writable or len(list(self.root.keys()))):
      raise ValueError(f"{self.path} is a zarr group but no brainshard record "
                       f"(no {KEY!r} attribute)")
    self.info: dict = dict(info or {})
    self.committed: dict[str, int] = dict(self.info.get("lengths", {}))
    self.pending = dict(self.committed)   # rows written, committed or not
    self._arrays: dict[str, Any] = {}
    if kinds is not None and self.monitors:
      self._check({n: {"kind": k} for n, k in kinds.items()}, dt, ("kind",))
    if self.writable and info is not None:
      self._cut_to_committed()

  # -- state of the record ----------------------------------------------------

  @property
  def start(self) -> int:
    return int(self.info.get("start", 0))

  @property
  def steps(self) -> int:
    return int(self.info.get("steps", 0))

  @property
  def monitors(self) -> dict:
    return self.info.get("monitors", {})

  def _array(self, key: str) -> Any:
    if key not in self._arrays:
      self._arrays[key] = self.root[key]
    return self._arrays[key]

  def _cut_to_committed(self) -> None:
    """Rows a killed writer appended but never committed are cut off, and
    its temporary files removed: the group is as the last commit left it."""
    for key, rows in self.committed.items():
      arr = self._array(key)
      if arr.shape[0] != rows:
        arr.resize((rows, *arr.shape[1:]))
    for folder, _, files in os.walk(self.path):
      for f in files:
        if f.endswith(".partial"):
          os.remove(os.path.join(folder, f))

  def _write_info(self) -> None:
    """The commit: one atomic write of the root's zarr.json."""
    self.root.attrs[KEY] = self.info

  # -- the Runner's calls -----------------------------------------------------

  def begin(self, monitors: dict, dt: float, start: int, end: int) -> None:
    """Before a run: checks that the record holds the same monitors (names,
    kinds, sizes) and dt, makes their groups, and notes the planned end."""
    old = self.monitors
    if old:
      self._check(monitors, dt, ("kind", "n", "every"))
    for name, meta in monitors.items():
      if name not in self.root:  # what a plain zarr reader needs to know
        group = self.root.create_group(name)
        group.attrs.update({**meta, "dt": dt, "start": start})
    merged = {n: {**m, "fields": old.get(n, {}).get("fields", {})}
              for n, m in monitors.items()}
    self.info = {**self.info, "format": KEY, "version": VERSION, "dt": dt,
                 "monitors": merged, "end": end, "start": start,
                 "steps": self.steps, "lengths": dict(self.committed)}
    self._write_info()

  def _check(self, monitors: dict, dt: float | None, keys: tuple) -> None:
    old = self.monitors
    if set(old) != set(monitors) or any(
        {k: old[n].get(k) for k in keys} != {k: m.get(k) for k in keys}
        for n, m in monitors.items()):
      raise ValueError(
          f"record_to={self.path!r} holds the records of monitors "
          f"{_describe(old)}; this runner records {_describe(monitors)}. "
          "Give a new path (or delete the old record).")
    if dt is not None and self.info.get("dt", dt) != dt:
      raise ValueError(f"record_to={self.path!r} was recorded with dt="
                       f"{self.info['dt']}, this runner has dt={dt}")

  def append(self, name: str, field: str, value: Any) -> None:
    """Appends ``value`` (an array, or a dict/list/tuple of arrays, with
    rows along the first axis) to column ``(name, field)``, uncommitted."""
    spec, leaves = flatten_tree(value, f"monitor {name!r}")
    fields = self.info["monitors"][name]["fields"]
    if fields.setdefault(field, spec) != spec:
      raise ValueError(f"monitor {name!r}: field {field!r} changed structure "
                       f"from {fields[field]} to {spec}")
    for k, leaf in enumerate(leaves):
      key = _key(name, field, k, spec)
      if key not in self.pending:
        self._create(name, key, leaf, len(leaves) == 1)
      arr = self._array(key)
      if arr.dtype != leaf.dtype or arr.shape[1:] != leaf.shape[1:]:
        raise ValueError(
            f"record_to={self.path!r}: {key} holds {arr.dtype}{list(arr.shape)}"
            f", this run appends {leaf.dtype}{list(leaf.shape)}")
      if len(leaf):
        arr.append(leaf, axis=0)
      self.pending[key] = self.pending.get(key, 0) + len(leaf)

  def _create(self, name: str, key: str, leaf: np.ndarray, alone: bool) -> None:
    row = max(1, leaf.dtype.itemsize * int(np.prod(leaf.shape[1:])))
    rows = max(1, min(CHUNK_BYTES // row, 1 << 20))
    first = "spike" if self.monitors[name]["kind"] == "spikes" else "time"
    leaf_name = key.split("/", 1)[1]
    rest = (["neuron"] + [f"dim_{i}" for i in range(2, leaf.ndim)] if alone
            else [f"{leaf_name}_dim{i}" for i in range(1, leaf.ndim)])
    if key in self.root:   # left by a run that committed none of it
      del self.root[key]
    self._arrays[key] = self.root.create_array(
        key, shape=(0, *leaf.shape[1:]), dtype=leaf.dtype,
        chunks=(rows, *leaf.shape[1:]), fill_value=0,
        dimension_names=[first, *rest[:leaf.ndim - 1]])

  def commit(self, steps: int, start: int | None = None) -> None:
    """Makes every row appended so far part of the record, which now holds
    ``steps`` steps (from ``start``): one atomic write."""
    self.info.update(steps=steps, lengths=dict(self.pending))
    if start is not None:
      self.info["start"] = start
    self._write_info()
    self.committed = dict(self.pending)

  def mark(self) -> dict:
    return dict(self.pending)

  def truncate(self, mark: dict) -> None:
    """Drops the rows appended since ``mark`` (a chunk that failed)."""
    for key, rows in self.pending.items():
      if rows != mark.get(key, 0):
        arr = self._array(key)
        arr.resize((mark.get(key, 0), *arr.shape[1:]))
    self.pending = {k: mark.get(k, 0) for k in self.pending}

  def clear(self, start: int = 0) -> None:
    """Drops every record; the next ones start at step ``start``."""
    self._cut(dict.fromkeys(self.pending, 0), start, 0)

  def extent(self, step: int) -> tuple[int, int]:
    """``(start, steps)`` of the record as it is (a new one starts at
    ``step``); nothing changes until a run or a restore :meth:`rewind` it."""
    return (self.start, self.steps) if self.steps else (step, 0)

  def rewind(self, step: int) -> tuple[int, int]:
    """Keeps the records of the steps before ``step`` (all of them, when
    ``step`` is the record's end; none when it is before the record's
    start), so that a run continued from ``step`` appends after them.
    Returns the record's ``(start, steps)``."""
    start, end = self.start, self.start + self.steps
    if self.steps and step > end:
      raise ValueError(
          f"record_to={self.path!r} holds steps [{start}, {end}); a run from "
          f"step {step} would leave a gap. Give a new path, or continue from "
          f"step {end} or before.")
    if self.steps and step < end:
      print(f"bs.Runner: {self.path} held steps [{start}, {end}); the records "
            f"of steps [{max(step, start)}, {end}) are dropped and the run "
            f"appends from step {step}.", file=sys.stderr)
    if not self.steps or step <= start:
      self.clear(step)
      return step, 0
    rows = {}
    for name in self.monitors:
      below = self._rows_before(name, step)
      for key in self.pending:
        if key.startswith(name + "/"):
          rows[key] = below
    self._cut(rows, start, step - start)
    return start, step - start

  def _rows_before(self, name: str, step: int) -> int:
    """Rows of monitor ``name`` recorded before ``step``: by binary search
    in its sorted ``steps`` array, or one row per step (a rate)."""
    key = f"{name}/steps"
    if key not in self.committed:
      return max(0, step - self.start)
    arr, lo, hi = self._array(key), 0, self.committed[key]
    while lo < hi:  # each probe reads one zarr chunk, never the whole array
      mid = (lo + hi) // 2
      if int(arr[mid]) < step:
        lo = mid + 1
      else:
        hi = mid
    return lo

  def _cut(self, rows: dict, start: int, steps: int) -> None:
    """Commits the shorter record first, then shrinks the arrays, so that a
    reader (or a kill) in between sees committed rows that all exist."""
    self.pending = {k: min(rows.get(k, 0), n) for k, n in self.pending.items()}
    self.commit(steps, start)
    for name in self.monitors:
      if name in self.root:
        self.root[name].attrs["start"] = start
    for key, n in self.pending.items():
      arr = self._array(key)
      if arr.shape[0] != n:
        arr.resize((n, *arr.shape[1:]))

  # -- reading ----------------------------------------------------------------

  def rows(self, name: str, field: str) -> int:
    """Committed rows of a column (0 if it has none)."""
    spec = self.monitors.get(name, {}).get("fields", {}).get(field)
    return 0 if spec is None else self.committed.get(
        _key(name, field, 0, spec), 0)

  def get(self, name: str, field: str) -> Any:
    """The committed rows of a column as NumPy arrays (read from disk on
    every call: nothing is kept in memory), or None if it has none."""
    spec = self.monitors.get(name, {}).get("fields", {}).get(field)
    if spec is None:
      return None
    leaves = []
    for k in range(count_leaves(spec)):
      key = _key(name, field, k, spec)
      rows = self.committed.get(key, 0)
      leaves.append(self._array(key)[:rows] if key in self.root
                    else np.zeros(0))
    return unflatten_tree(spec, leaves)


def _describe(monitors: dict) -> str:
  return ", ".join(f"{n} ({m.get('kind')}, n={m.get('n')})"
                   for n, m in monitors.items()) or "none"


def _key(name: str, field: str, k: int, spec: Any) -> str:
  """The array of leaf ``k``: ``name/field``, or ``name/field_k`` for a
  dict, list or tuple of arrays."""
  return f"{name}/{field}" if spec == 0 else f"{name}/{field}_{k}"


def load_records(path: str | os.PathLike) -> Result:
  """A record written with ``bs.Runner(..., record_to=path)`` as the
  :class:`~brainshard.Result` an in-memory run gives: ``SpikeData``,
  ``RateData`` and ``TraceData`` by monitor name, read from disk when asked
  for. It holds what was committed when it was loaded: call it again to see
  a run that is still going on; after a kill, every chunk completed before.
  ``result.interrupted`` is True when the record ends before the end its
  last run planned.

  Example:
    >>> import tempfile, brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(3), name='v')
    >>> def step():
    ...   v.value = v.value + jnp.array([1.0, 2.0, 3.0])
    ...   return v.value % 4 == 0
    >>> path = tempfile.mkdtemp() + '/run.zarr'
    >>> _ = bs.Runner(step, {'spikes': bs.SpikeMonitor()}, chunk=4,
    ...               progress=False, record_to=path).run(6)
    >>> res = bs.load_records(path)
    >>> res.steps, res.spikes.steps.tolist(), res.spikes.neurons.tolist()
    (6, [1, 3, 3, 3, 5], [1, 0, 1, 2, 1])
  """
  store = ZarrStore(path, mode="r")
  kinds = {n: m["kind"] for n, m in store.monitors.items()}
  sizes = {n: m["n"] for n, m in store.monitors.items() if "n" in m}
  result = Result(kinds, sizes, store.info.get("dt", 1.0), store)
  result.start, result.steps = store.start, store.steps
  end = store.info.get("end")
  result.interrupted = end is not None and store.start + store.steps < end
  return result
