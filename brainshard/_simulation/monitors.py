"""Monitors: what a run records, and how it is recorded inside each chunk.

A monitor names a *source*: ``None`` (the step's return value), a State
(its value after the step), or a callable (``f()`` reading States, or
``f(out)`` given the step's return value). :class:`SpikeMonitor` and
:class:`RateMonitor` read a boolean spike vector per step and share one
compacted event stream per source (see ``_spikes.py``); :class:`StateMonitor`
records any value (a State, selected neurons of it, any function of States)
every ``every`` steps. :class:`Recorder` turns a step and its monitors into
the body of a chunk program and the host-side collection of its outputs.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._simulation import spikes as _spikes
from brainshard._simulation.chunked import takes_arguments
from brainshard._core.state import State
from brainshard._core.discovery import StatefulFunction

__all__ = ["SpikeMonitor", "RateMonitor", "StateMonitor", "Recorder"]


class _Monitor:
  source: Any = None

  def _read(self, out: Any) -> Any:
    src = self.source
    if src is None:
      return out
    if isinstance(src, State):
      return src.value
    return src(out) if takes_arguments(src) else src()


class SpikeMonitor(_Monitor):
  """Records spikes as sparse (step, neuron) events.

  Args:
    source: the boolean spike vector ``[n]`` of each step: ``None`` (the
      step's return value), a State, or a callable (see the module doc).
    capacity: events per shard per chunk the device buffer holds at first;
      ``None`` picks one from the chunk size.
    on_overflow: ``'grow'`` (compact the chunk again with a bigger buffer;
      nothing is lost) or ``'raise'`` (a RuntimeError naming the counts).

  Example:
    >>> import brainshard as bs
    >>> bs.SpikeMonitor()
    SpikeMonitor(source=None, capacity=None)
  """

  def __init__(self, source: Any = None, *, capacity: int | None = None,
               on_overflow: str = "grow"):
    if on_overflow not in ("grow", "raise"):
      raise ValueError(
          f"on_overflow must be 'grow' or 'raise', got {on_overflow!r}")
    if capacity is not None and (not isinstance(capacity, int) or capacity < 1):
      raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    self.source = source
    self.capacity = capacity
    self.on_overflow = on_overflow

  def __repr__(self) -> str:
    return (f"SpikeMonitor(source={_name(self.source)}, "
            f"capacity={self.capacity})")


class RateMonitor(_Monitor):
  """Records the population's spike count per step (its rate in Hz on the
  result); shares the compacted events of a SpikeMonitor of the same source.

  Example:
    >>> import brainshard as bs
    >>> bs.RateMonitor()
    RateMonitor(source=None)
  """

  def __init__(self, source: Any = None):
    self.source = source

  def __repr__(self) -> str:
    return f"RateMonitor(source={_name(self.source)})"


class StateMonitor(_Monitor):
  """Records a value every ``every`` steps (at the steps ``every - 1``,
  ``2 * every - 1``, ...).

  Args:
    source: a State, or a callable: ``f()`` reading States, or ``f(out)``
      given the step's return value; any pytree of arrays.
    index: optional indices along the first axis (e.g. neurons to keep).
    every: record every that many steps (computed only on those steps).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(100), name='v')
    >>> bs.StateMonitor(v, index=[0, 5], every=10)
    StateMonitor(source=v, index=[0, 5], every=10)
  """

  def __init__(self, source: Any, *, index: Any = None, every: int = 1):
    if source is None or not (isinstance(source, State) or callable(source)):
      raise TypeError(
          f"StateMonitor: source must be a State or a callable, got {source!r}")
    if not isinstance(every, int) or every < 1:
      raise ValueError(
          f"StateMonitor: every must be a positive int, got {every!r}")
    self.source = source
    self.index = None if index is None else np.asarray(index)
    self.every = every
    self._local: _LocalTake | None = None

  def plan(self) -> None:
    """At top level, before tracing: picks neurons per shard when the source
    is a sharded State (see :class:`_LocalTake`)."""
    self._local = _LocalTake.plan(self.source, self.index)

  def value(self, out: Any) -> Any:
    x = self._read(out)
    if self.index is None:
      return x
    if self._local is not None:
      return self._local(x)
    return jax.tree.map(lambda a: _take(a, self.index), x)

  def to_host(self, values: Any) -> Any:
    """Host copies of recorded values, columns in the order of ``index``."""
    values = jax.tree.map(_host, values)
    if self._local is None:
      return values
    return values[:, self._local.order]

  def __repr__(self) -> str:
    index = None if self.index is None else self.index.tolist()
    return (f"StateMonitor(source={_name(self.source)}, index={index}, "
            f"every={self.every})")


class _LocalTake:
  """``x[index]`` of a State sharded along its first axis, without a
  collective: each shard picks its own neurons (padded to the same count)
  under ``jax.shard_map``; the result stays sharded and the host puts the
  columns back in order. (``x[index]`` on the global array would gather the
  values across devices every step.)"""

  def __init__(self, mesh, axes, table: np.ndarray, order: np.ndarray):
    self.mesh, self.axes, self.table, self.order = mesh, axes, table, order

  @classmethod
  def plan(cls, source: Any, index: Any) -> "_LocalTake | None":
    value = source._value if isinstance(source, State) else None
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


def _take(a: Any, index: np.ndarray) -> Any:
  """``a[index]``; under an Explicit mesh the (few) picked rows come back
  replicated, as the sharding type must say where they go."""
  sharding = getattr(jax.typeof(a), "sharding", None)
  if isinstance(sharding, jax.sharding.NamedSharding) and any(
      t == jax.sharding.AxisType.Explicit for t in sharding.mesh.axis_types):
    return a.at[jnp.asarray(index)].get(
        out_sharding=jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec()))
  return a[jnp.asarray(index)]


def _name(source: Any) -> str:
  if source is None or isinstance(source, State):
    return "None" if source is None else (source.name or "State")
  return getattr(source, "__name__", repr(source))


def _source_key(source: Any) -> Any:
  return ("out",) if source is None else ("id", id(source))


class Recorder:
  """The chunk body that runs ``step`` and records ``monitors``.

  Carry of a chunk: ``(i0, spike word buffers, every-M trace buffers)``;
  per-step outputs: the ``every=1`` traces.
  """

  def __init__(self, step: Callable, monitors: Mapping[str, Any], index: bool):
    self.step = step
    self.index = index
    self.monitors = dict(monitors)
    self.sources: list[Any] = []   # distinct spike sources
    self.source_of: dict[str, int] = {}
    keys: list[Any] = []
    for name, m in self.monitors.items():
      if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"monitor names must be identifiers, got {name!r}")
      if isinstance(m, (SpikeMonitor, RateMonitor)):
        key = _source_key(m.source)
        if key not in keys:
          keys.append(key)
          self.sources.append(m)
        self.source_of[name] = keys.index(key)
      elif not isinstance(m, StateMonitor):
        raise TypeError(f"monitor {name!r}: expected a SpikeMonitor, "
                        f"RateMonitor or StateMonitor, got {type(m).__name__}")
    self.every1 = [n for n, m in self.monitors.items()
                   if isinstance(m, StateMonitor) and m.every == 1]
    self.sparse = [n for n, m in self.monitors.items()
                   if isinstance(m, StateMonitor) and m.every > 1]
    self._avals: Any = None
    self.capacity: dict[int, int] = {}

  def run_step(self, i: Any) -> Any:
    return self.step(i) if self.index else self.step()

  def discover(self) -> tuple[Any, tuple[State, ...]]:
    """Avals of the recorded values and the States the step writes."""
    if self._avals is None:
      for m in self.monitors.values():
        if isinstance(m, StateMonitor):
          m.plan()

      def probe(i):
        out = self.run_step(i)
        return ([m._read(out) for m in self.sources],
                {n: self.monitors[n].value(out)
                 for n in self.sparse + self.every1})
      d = StatefulFunction(probe).discover(np.int32(0))
      for k, aval in enumerate(d.out_shapes[0]):
        if len(aval.shape) != 1:
          raise ValueError(
              f"spike source {_name(self.sources[k].source)} gives "
              f"{aval.dtype}{list(aval.shape)} per step; a spike monitor needs "
              "a 1-D vector (flatten it in a source function).")
      self._avals = d.out_shapes
      self.writes = d.write_states
    return self._avals, self.writes

  def bytes_per_step(self) -> float:
    """Device bytes a chunk holds per step for its records."""
    (spikes, traces), _ = self.discover()
    total = sum(a.shape[0] / 8 for a in spikes)
    total += sum(np.prod(a.shape) * a.dtype.itemsize / self.monitors[n].every
                 for n, tree in traces.items() for a in jax.tree.leaves(tree))
    return float(total) + 4.0

  # -- inside the chunk program ----------------------------------------------

  def init(self, i0: Any, length: int) -> tuple:
    (spikes, avals), _ = self.discover()
    bufs = [_spikes.zeros_like_aval(a, _spikes.word_rows(length), jnp.uint32)
            for a in spikes]
    traces = {n: jax.tree.map(lambda a, n=n: _spikes.zeros_like_aval(
        a, length // self.monitors[n].every + 2, a.dtype), avals[n])
        for n in self.sparse}
    return i0, bufs, traces

  def body(self, carry: tuple, i: Any) -> tuple:
    i0, bufs, traces = carry
    out = self.run_step(i)
    base = i0 // _spikes.BITS
    bufs = [_spikes.record_spikes(b, m._read(out), i, base)
            for b, m in zip(bufs, self.sources)]
    new_traces = {}
    for n, buf in traces.items():
      m = self.monitors[n]
      row = (i + 1) // m.every - 1 - i0 // m.every

      def write(b, m=m, row=row):
        return jax.tree.map(lambda b, v: b.at[row].set(v), b, m.value(out))
      new_traces[n] = jax.lax.cond((i + 1) % m.every == 0, write,
                                   lambda b: b, buf)
    ys = {n: self.monitors[n].value(out) for n in self.every1}
    return (i0, bufs, new_traces), ys

  # -- after the chunk ---------------------------------------------------------

  def dispatch(self, out: Any) -> tuple:
    """Starts the device-side compaction of a chunk's outputs (async)."""
    (_, bufs, traces), ys = out
    comps = [_spikes.compact(b, self.capacity.get(k)
                             or self._monitor_capacity(k))
             for k, b in enumerate(bufs)]
    for k, c in enumerate(comps):
      self.capacity.setdefault(k, c.capacity)
    for x in jax.tree.leaves((traces, ys)):
      x.copy_to_host_async()
    return bufs, comps, traces, ys

  def _monitor_capacity(self, k: int) -> int | None:
    caps = [m.capacity for n, m in self.monitors.items()
            if self.source_of.get(n) == k and getattr(m, "capacity", None)]
    return max(caps) if caps else None

  def collect(self, start: int, length: int, pending: tuple) -> dict:
    """Copies one chunk's records to the host: ``{name: {field: array}}``."""
    bufs, comps, traces, ys = pending
    events = []
    for k, (buf, comp) in enumerate(zip(bufs, comps)):
      events.append(self._decode(k, buf, comp, start, length))
    data: dict[str, dict[str, np.ndarray]] = {}
    for name, m in self.monitors.items():
      if isinstance(m, SpikeMonitor):
        steps, neurons = events[self.source_of[name]]
        data[name] = {"steps": steps, "neurons": neurons}
      elif isinstance(m, RateMonitor):
        steps, _ = events[self.source_of[name]]
        data[name] = {"counts": np.bincount(steps - start, minlength=length
                                            ).astype(np.int32)}
      elif m.every == 1:
        data[name] = {"steps": np.arange(start, start + length),
                      **_fields(m.to_host(ys[name]))}
      else:
        first, last = start // m.every, (start + length) // m.every
        rows = jax.tree.map(lambda a: a[:last - first].copy(),
                            m.to_host(traces[name]))
        data[name] = {"steps": (np.arange(first, last) + 1) * m.every - 1,
                      **_fields(rows)}
    return data

  def _decode(self, k: int, buf: Any, comp: Any, start: int, length: int):
    base = start // _spikes.BITS
    while True:
      try:
        return _spikes.decode(comp, start, length, base)
      except _spikes.Overflow as e:
        rows, n = buf.shape
        names = [n_ for n_, s in self.source_of.items() if s == k]
        if any(getattr(self.monitors[n_], "on_overflow", "grow") == "raise"
               for n_ in names):
          raise RuntimeError(
              f"spike monitor {names}: a shard recorded {e.needed} spike words "
              f"in the chunk of steps [{start}, {start + length}), more than "
              f"its capacity {e.capacity}. Give SpikeMonitor a bigger "
              "capacity= or on_overflow='grow'.") from None
        self.capacity[k] = _spikes.grown_capacity(e.needed,
                                                  rows * comp.n_local)
        comp = _spikes.compact(buf, self.capacity[k])


def _host(x: Any) -> np.ndarray:
  """A host copy (on CPU ``np.asarray`` may share the device buffer, which
  would then stay alive as long as the record)."""
  return np.array(x, copy=True)


def _fields(tree: Any) -> dict[str, Any]:
  """A recorded pytree as the ``values`` field (kept as a pytree)."""
  return {"values": tree}
