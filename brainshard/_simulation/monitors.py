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
from brainshard._simulation.neuron_take import (
    LocalTake as _LocalTake, take as _take)
from brainshard._simulation.chunked import takes_arguments
from brainshard._core.state import State
from brainshard._core.discovery import DiscoveryCache

__all__ = ["SpikeMonitor", "RateMonitor", "StateMonitor", "Recorder"]


class _Monitor:
  source: Any = None

  def _check_source(self) -> None:
    """A spike source is None, a State or a callable: checked now, not at
    run() (where an array would fail as 'not callable' deep inside)."""
    src = self.source
    if not (src is None or isinstance(src, State) or callable(src)):
      raise TypeError(
          f"{type(self).__name__}: source must be None (the step's return "
          "value), a State, or a callable (f() reading States, or f(out) of "
          f"the step's return value); got {type(src).__name__} {src!r:.60}. "
          "To record an array the step computes, return it from the step or "
          "keep it in a State.")

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
    source: the spike vector ``bool[n]`` of each step: ``None`` (the step's
      return value), a State, or a callable (see the module doc). Spikes
      must be bool (``v > th``): a float or int 0/1 vector is an error, not
      silently "every non-zero value".
    capacity: spikes per shard per chunk that the device buffer holds at
      least (it stores 32-step words, so often more); ``None`` picks one
      from the chunk size.
    on_overflow: ``'grow'`` (compact the chunk again with a bigger buffer;
      nothing is lost) or ``'raise'``: a RuntimeError when a shard has more
      than ``capacity`` spikes in a chunk.

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
    self._check_source()
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
    self._check_source()

  def __repr__(self) -> str:
    return f"RateMonitor(source={_name(self.source)})"


class StateMonitor(_Monitor):
  """Records a value every ``every`` steps (at the steps ``every - 1``,
  ``2 * every - 1``, ...).

  Args:
    source: a State, or a callable: ``f()`` reading States, or ``f(out)``
      given the step's return value; any pytree of arrays.
    index: optional integer indices along the first axis (e.g. neurons to
      keep); each must be within the value's size (negative ones count from
      the end), else run() raises an IndexError before running.
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
    if self.index is not None and (
        self.index.dtype == bool
        or not np.issubdtype(self.index.dtype, np.integer)):
      raise TypeError(
          f"StateMonitor({_name(source)}): index must be integers (neuron "
          f"numbers), got {self.index.dtype} {index!r:.60}; for a mask use "
          "np.flatnonzero(mask).")
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
    self._check_index(x)
    if self._local is not None:
      return self._local(x)
    return jax.tree.map(lambda a: _take(a, self.index), x)

  def _check_index(self, x: Any) -> None:
    """An index out of range would be clamped by JAX (neuron 99 of 64
    recorded as neuron 63): an error instead, naming source, index, size."""
    for leaf in jax.tree.leaves(x):
      shape = tuple(leaf.shape)
      n = shape[0] if shape else 0
      bad = self.index[(self.index < -n) | (self.index >= n)]
      if bad.size:
        raise IndexError(
            f"StateMonitor(source={_name(self.source)}): index "
            f"{bad.tolist()[:8]} is out of range for {_name(self.source)}, "
            f"which holds {leaf.dtype}{list(shape)}: {n} rows along its first "
            f"axis, so give indices in [0, {n}) (or [-{n}, 0) from the end).")

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
        traces = {}
        for n in self.sparse + self.every1:
          try:
            traces[n] = self.monitors[n].value(out)
          except IndexError as e:
            raise IndexError(f"monitor {n!r}: {e}") from None
        return [m._read(out) for m in self.sources], traces
      d = DiscoveryCache(probe).discover(np.int32(0))
      for k, aval in enumerate(d.out_shapes[0]):
        self._check_spikes(k, aval)
      self._avals = d.out_shapes
      self.writes = d.write_states
    return self._avals, self.writes

  def _check_spikes(self, k: int, aval: Any) -> None:
    """Spikes are one ``bool[n]`` per step; anything else is an error naming
    the monitors of source ``k`` and what they got (before any step runs)."""
    names = [n for n, s in self.source_of.items() if s == k]
    src = self.sources[k].source
    what = (f"the return value of step {_name(self.step)}" if src is None
            else f"source {_name(src)}")
    head = f"spike monitor {names} records {what}"
    if not isinstance(aval, jax.ShapeDtypeStruct):
      got = "None" if aval is None else f"a {type(aval).__name__}"
      fix = ("return the spikes from the step (`return v > th`), or give the "
             "monitor a source: a State, or a function of the step's output "
             "(`source=lambda out: out[0]`)") if src is None else (
             "make the source return one spike vector")
      raise TypeError(f"{head}, which is {got}; it needs one bool[n] spike "
                      f"vector per step: {fix}.")
    if len(aval.shape) != 1:
      raise ValueError(
          f"{head}, which gives {aval.dtype}{list(aval.shape)} per step; a "
          "spike monitor needs a 1-D vector (flatten it in a source "
          "function).")
    if aval.dtype != jnp.bool_:
      raise TypeError(
          f"{head}, which gives {aval.dtype}{list(aval.shape)} per step; "
          "spikes must be bool (a number would count every non-zero value as "
          "a spike): return `v > th`, or cast with `.astype(bool)`.")

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
    self._check_capacity(k, comp, start, length)
    base = start // _spikes.BITS
    while True:
      try:
        return _spikes.decode(comp, start, length, base)
      except _spikes.Overflow as e:  # more words than the buffer: grow it
        rows, _ = buf.shape
        self.capacity[k] = _spikes.grown_capacity(e.needed,
                                                  rows * comp.n_local)
        comp = _spikes.compact(buf, self.capacity[k])

  def _check_capacity(self, k: int, comp: Any, start: int, length: int):
    """``on_overflow='raise'``: more spikes on a shard than ``capacity``."""
    names = [n for n, s in self.source_of.items() if s == k
             and getattr(self.monitors[n], "on_overflow", "") == "raise"]
    if not names:
      return
    limit = min(self.monitors[n].capacity or comp.capacity for n in names)
    spikes = int(np.asarray(comp.spikes).max(initial=0))
    if spikes > limit:
      raise RuntimeError(
          f"spike monitor {names}: a shard recorded {spikes} spikes in the "
          f"chunk of steps [{start}, {start + length}), more than its "
          f"capacity {limit}. Give SpikeMonitor a bigger capacity= or "
          "on_overflow='grow'.")


def _host(x: Any) -> np.ndarray:
  """A host copy (on CPU ``np.asarray`` may share the device buffer, which
  would then stay alive as long as the record)."""
  return np.array(x, copy=True)


def _fields(tree: Any) -> dict[str, Any]:
  """A recorded pytree as the ``values`` field (kept as a pytree)."""
  return {"values": tree}
