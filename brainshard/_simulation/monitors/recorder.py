"""The chunk body that runs a step and records its monitors, and the
host-side collection of what a chunk recorded.

Spike sources (``SpikeMonitor``/``RateMonitor``, one stream per distinct
source) are recorded as bit words and compacted on device (``spikes.py``);
``StateMonitor`` values come back per step (``every=1``) or every ``every``
steps. The Runner (``runner.py``) builds one :class:`Recorder` per run.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._simulation.monitors import spikes as _spikes
from brainshard._simulation.monitors.monitors import (
    RateMonitor, SpikeMonitor, StateMonitor, source_key,
    source_name)
from brainshard._core.state.state import State
from brainshard._core.discovery import DiscoveryCache, evaluate
from brainshard._core.threads import frame_stack

__all__ = ["Recorder"]


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
        key = source_key(m.source)
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
    self._probe: DiscoveryCache | None = None
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
        return [m.read(out) for m in self.sources], traces
      self._probe = DiscoveryCache(probe, name="probe")
      d = self._probe.discover(np.int32(0))
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
    what = (f"the return value of step {source_name(self.step)}" if src is None
            else f"source {source_name(src)}")
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

  def recorded(self, i: Any) -> tuple[list, dict]:
    """One step inside the chunk program: the spike vectors of the sources
    and the traces' values. The step's Python ran once, in
    :meth:`discover`; here its jaxpr is evaluated (the chunk's scan traces
    its body twice, and a network's step takes longer to trace than its
    jaxpr to evaluate), unless a State changed its signature since (then
    the step is traced again, here, and that trace is kept)."""
    if self._probe is None:
      self.discover()
    # cached unless a State was placed (another sharding in its aval) or
    # resized since
    found = self._probe.discover(np.int32(0))
    out, written = evaluate(found, [i], [s.value for s in found.read_states])
    for s, v in zip(found.write_states, written):
      s.value = v
    frames = frame_stack()
    if frames:  # where the step's shard_maps read and leave their States
      for s in found.states:
        hint = found.placements.get(id(s))
        if hint is not None:
          frames[-1].hint_placement(s, hint)
    return out

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
    spikes, values = self.recorded(i)
    base = i0 // _spikes.BITS
    bufs = [_spikes.record_spikes(b, s, i, base)
            for b, s in zip(bufs, spikes)]
    new_traces = {}
    for n, buf in traces.items():
      m = self.monitors[n]
      row = (i + 1) // m.every - 1 - i0 // m.every

      def write(b, v=values[n], row=row):
        return jax.tree.map(lambda b, v: b.at[row].set(v), b, v)
      new_traces[n] = jax.lax.cond((i + 1) % m.every == 0, write,
                                   lambda b: b, buf)
    ys = {n: values[n] for n in self.every1}
    return (i0, bufs, new_traces), ys

  # -- after the chunk ---------------------------------------------------------

  def dispatch(self, out: Any) -> tuple:
    """Starts the device-side compaction of a chunk's outputs (async)."""
    (_, bufs, traces), ys = out
    comps = [_spikes.dispatch(b, self.capacity.get(k)
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


def _fields(tree: Any) -> dict[str, Any]:
  """A recorded pytree as the ``values`` field (kept as a pytree)."""
  return {"values": tree}
