"""The runner: long simulations in chunks, monitored, interruptible, resumable.

``Runner(step, monitors, dt=...).run(duration=...)`` advances ``step`` in
compiled chunks (:class:`~brainshard.ChunkedLoop`), records the monitors on
the device, copies each chunk's records to the host while the next chunk
runs, shows one progress bar, stops cleanly at a chunk boundary on Ctrl-C,
and can checkpoint every few chunks. With ``record_to`` the records go to a
zarr group on disk chunk by chunk (``zarr_store.py``), not into memory.

Why no State buffer is donated into a chunk: the runner keeps the values of
the States from before each chunk still in flight. If anything goes wrong
before a chunk's records reach the host (a second Ctrl-C, an error in a
monitor, a full disk), the States are set back to those values, so States
and records always describe the same number of steps. A donated buffer
would be deleted by then. The price is one extra copy of the written States
in device memory (the connectivity and other read-only States are not
copied).
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from typing import Any, Callable, Mapping

import jax
import numpy as np

from brainshard._scaleout.checkpoint import checkpoint
from brainshard._simulation.runner.chunked import ChunkedLoop, restore
from brainshard._transforms.jit import jit
from brainshard._simulation.monitors.monitors import (
    RateMonitor, SpikeMonitor, StateMonitor)
from brainshard._simulation.monitors.recorder import Recorder
from brainshard._simulation.runner.progress import ChunkBar, StopButton
from brainshard._simulation.monitors.records import Result
from brainshard._simulation.monitors.zarr_store import open_store
from brainshard._simulation.runner.programs import ProgramWatch
from brainshard._core.state.state import State
from brainshard._core.args import fun_name

__all__ = ["Runner", "whole_steps"]

_KINDS = {SpikeMonitor: "spikes", RateMonitor: "rate", StateMonitor: "trace"}


def whole_steps(duration: Any, dt: float, where: str) -> int:
  """``duration`` ms in steps of ``dt``, or an error naming ``where``: a
  duration between steps would run another time without a word."""
  if isinstance(duration, (bool, np.bool_)) or not isinstance(
      duration, (int, float, np.integer, np.floating)) or not (
          math.isfinite(duration) and duration >= 0):
    raise ValueError(f"{where}: duration must be a non-negative number of "
                     f"ms, got {duration!r}.")
  exact = duration / dt
  steps = round(exact)
  if abs(exact - steps) > 1e-9 * max(1.0, exact):
    raise ValueError(
        f"{where}(duration={duration}): not a whole number of steps of "
        f"dt = {dt} ms ({exact:.4f} steps); run {steps * dt:g} ms.")
  return int(steps)


class Runner:
  """Runs a stateful ``step`` for many steps: chunked, monitored, resumable.

  Args:
    step: one time step; may close over States (a ``bs.shard_map`` step
      too). Called as ``step()``, or ``step(i)`` with ``index=True``.
    monitors: ``{name: SpikeMonitor | RateMonitor | StateMonitor}``.
    dt: the time step in ms (for durations, times, rates and the bar).
    chunk: steps per compiled chunk; None picks it so that a chunk takes
      about ``chunk_seconds`` (timed on one step) and holds at most
      ``max_chunk_bytes`` of records on the device.
    progress: show a progress bar (True, False, or a description).
    record_to: where the records go: None (host memory), or a path: a
      zarr v3 group (e.g. ``'run.zarr'``) each chunk's records are appended
      to and committed, readable while the run goes on and after a kill
      (``bs.load_records``); host memory stays flat. A path that holds a
      record of the same monitors is continued: at the first ``run`` (or
      :meth:`restore`) its records from that step on are dropped, and the
      run appends after the rest.
      Needs zarr (``pip install 'brainshard[record]'``).
    store: a directory for records as raw files (numpy memmaps, read by
      this process only); prefer ``record_to``.
    checkpoint_every: save the States every that many chunks into
      ``checkpoint_dir/step_<step>`` with ``bs.save_states`` (metadata:
      step, time, dt); :meth:`restore` resumes from one.
    checkpoint_states: the States to save (a dict ``{name: State}``);
      default: every State the step writes.
    on_interrupt: after Ctrl-C stopped a run at a chunk boundary,
      ``'return'`` the result (``result.interrupted`` is True) or
      ``'raise'`` ``KeyboardInterrupt``.
    start_step: the global index of the first step (default 0): the step
      count, the records' steps and times, ``step(i)`` and checkpoint names
      continue from it, e.g. on States restored with ``bs.restore_states``
      from a checkpoint of step 640 (:meth:`restore` sets it itself).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(4), name='v')
    >>> def step():
    ...   v.value = v.value + jnp.arange(4.0)
    ...   return (v.value % 5 == 0) & (v.value > 0)   # "spikes"
    >>> runner = bs.Runner(step, {'spikes': bs.SpikeMonitor(),
    ...                           'v': bs.StateMonitor(v, index=[3], every=2)},
    ...                    dt=0.1, chunk=4, progress=False)
    >>> res = runner.run(10)
    >>> res.steps, res['spikes'].steps.tolist(), res['spikes'].neurons.tolist()
    (10, [4, 4, 4, 9, 9, 9], [1, 2, 3, 1, 2, 3])
    >>> res['v'].steps.tolist(), res['v'].values[:, 0].tolist()
    ([1, 3, 5, 7, 9], [6.0, 12.0, 18.0, 24.0, 30.0])
  """

  def __init__(self, step: Callable, monitors: Mapping[str, Any] | None = None,
               *, dt: float | None = None, chunk: int | None = None,
               chunk_seconds: float = 0.5, max_chunk_bytes: int = 256 << 20,
               index: bool = False, progress: bool | str = True,
               store: str | os.PathLike | None = None,
               record_to: str | os.PathLike | None = None,
               checkpoint_every: int | None = None,
               checkpoint_dir: str | os.PathLike | None = None,
               checkpoint_states: Mapping[str, State] | None = None,
               on_interrupt: str = "return", start_step: int = 0):
    if on_interrupt not in ("return", "raise"):
      raise ValueError(
          f"on_interrupt must be 'return' or 'raise', got {on_interrupt!r}")
    if checkpoint_every is not None:
      if checkpoint_dir is None:
        raise ValueError("checkpoint_every needs checkpoint_dir")
    self.step = step
    self.name = fun_name(step)
    self.recorder = Recorder(step, monitors or {}, index)
    if dt is not None and (isinstance(dt, (bool, np.bool_)) or not isinstance(
        dt, (int, float, np.integer, np.floating)) or not (
            math.isfinite(dt) and dt > 0)):
      raise ValueError(f"Runner: dt must be a positive number of ms (the "
                       f"time per call of step), got {dt!r}.")
    # A step that knows the time one call advances (a bm.Delivery step,
    # exchanging spikes every k steps of dt) sets the Runner's dt: another
    # would make every recorded time wrong.
    declared = getattr(step, "time_per_call", None)
    if declared is not None and dt is not None and not math.isclose(
        dt, declared, rel_tol=1e-9):
      raise ValueError(
          f"Runner: dt = {dt} ms, but one call of {fun_name(step)} advances "
          f"{declared:g} ms (its steps of the index's dt, times the steps "
          "per spike exchange); pass that dt, or leave dt out.")
    dt = declared if dt is None else dt
    self.dt = None if dt is None else float(dt)
    self.chunk = chunk
    self.chunk_seconds = chunk_seconds
    self.max_chunk_bytes = max_chunk_bytes
    self.progress = progress
    self.checkpoint_every = checkpoint_every
    self.checkpoint_dir = (None if checkpoint_dir is None
                           else os.fspath(checkpoint_dir))
    self.checkpoint_states = checkpoint_states
    self.on_interrupt = on_interrupt
    if (isinstance(start_step, bool) or not isinstance(start_step, (
        int, np.integer)) or start_step < 0):
      raise ValueError("Runner: start_step must be a non-negative int (the "
                       f"index of the first step), got {start_step!r}")
    self.step_count = int(start_step)  # the next step's global index
    self.target: int | None = None
    self._loop: ChunkedLoop | None = None
    self.chunks_done = 0
    kinds = {n: _KINDS[type(m)] for n, m in self.recorder.monitors.items()}
    dt_ = dt if dt is not None else 1.0
    records = open_store(store, record_to, kinds, dt_)
    self.result = Result(kinds, {}, dt_, records)
    # A record on disk may hold steps already: run() or restore() continue it.
    self.result.start, self.result.steps = records.extent(self.step_count)
    self._programs = ProgramWatch(self.name)  # what each chunk compiled for

  def __repr__(self) -> str:
    t = "" if self.dt is None else f", t = {self.time:g} ms"
    return f"<bs.Runner({self.name}), step {self.step_count}{t}>"

  @property
  def time(self) -> float | None:
    """The simulated time reached (ms): ``step_count * dt``."""
    return None if self.dt is None else self.step_count * self.dt

  # -- planning ----------------------------------------------------------------

  def _n_steps(self, steps: int | None, duration: float | None) -> int:
    if (steps is None) == (duration is None):
      raise TypeError("Runner.run: give steps or duration (not both)")
    if duration is not None:
      if self.dt is None:
        raise ValueError("Runner.run(duration=...) needs the Runner's dt")
      steps = whole_steps(duration, self.dt, "Runner.run")
    if int(steps) != steps or steps < 0:
      raise ValueError(
          f"Runner.run: steps must be a non-negative int, got {steps!r}")
    return int(steps)

  @property
  def loop(self) -> ChunkedLoop:
    """The chunked loop (built once the chunk size is known)."""
    return self._make_loop(None)

  def _make_loop(self, n: int | None) -> ChunkedLoop:
    if self._loop is None:
      (spikes, _), _ = self.recorder.discover()
      self.result.sizes.update({n: spikes[self.recorder.source_of[n]].shape[0]
                                 for n in self.recorder.source_of})
      chunk = self.chunk
      if chunk is None:
        chunk = self._auto_chunk()
        if n:  # as even as possible: often no remainder program at all
          chunk = -(-n // -(-n // chunk))
      self._loop = ChunkedLoop(self.recorder.body, chunk,
                               init=self.recorder.init, donate_states=False,
                               name=self.name)
    return self._loop

  def _auto_chunk(self) -> int:
    """Steps per chunk: ~chunk_seconds of wall time, within max_chunk_bytes."""
    by_bytes = int(self.max_chunk_bytes // self.recorder.bytes_per_step())
    seconds = self._seconds_per_step()
    by_time = int(self.chunk_seconds / max(seconds, 1e-9))
    return max(32, min(by_bytes, by_time) // 32 * 32)

  def _seconds_per_step(self) -> float:
    """Times single compiled steps; every State is set back afterwards."""
    _, writes = self.recorder.discover()
    saved = [s.value for s in writes]
    one = jit(self.recorder.run_step, donate_states=False)
    try:
      jax.block_until_ready(one(np.int32(0)))
      best = float("inf")
      for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(one(np.int32(0)))
        best = min(best, time.perf_counter() - t)
    finally:
      restore(writes, saved)
    return best

  # -- running -----------------------------------------------------------------

  def run(self, steps: int | None = None, *, duration: float | None = None
          ) -> Result:
    """Runs ``steps`` steps (or ``duration`` ms) from where the States are.

    With no argument, continues an interrupted run to its planned end.
    Returns :attr:`result` (the records of every run so far).
    """
    if steps is None and duration is None:
      if self.target is None or self.target <= self.step_count:
        raise ValueError(
            "Runner.run(): nothing to continue; give steps or duration")
      n = self.target - self.step_count
    else:
      n = self._n_steps(steps, duration)
      self.target = self.step_count + n
    result = self.result
    if result.steps == 0:
      result.start = self.step_count
    elif result.start + result.steps != self.step_count:
      # a record on disk that ends elsewhere: keep the steps before this one
      result.start, result.steps = result.store.rewind(self.step_count)
    result.interrupted = False
    loop = self._make_loop(n)
    result.store.begin(self._monitor_meta(), result.dt, result.start,
                       self.target)
    self._programs.prepare(loop, n, self.step_count)  # places; warns if stale
    stop = StopButton()
    bar = self._bar(n)
    try:
      with stop:
        self._chunks(loop, n, stop, bar)
    finally:
      if bar is not None:
        bar.close()
    if stop.pressed and self.step_count < self.target:
      result.interrupted = True
      msg = (f"bs.Runner: interrupted after step {self.step_count} of "
             f"{self.target}; States and records are those of "
             f"{self.step_count} steps. runner.run() continues.")
      if self.on_interrupt == "raise":
        raise KeyboardInterrupt(msg)
      print(msg, file=sys.stderr)
    return result

  def compile(self, steps: int | None = None, *,
              duration: float | None = None) -> float:
    """Compiles, ahead of time, the chunk programs a ``run`` of ``steps``
    steps (or ``duration`` ms; default: one chunk) would use, so compile
    time is measured apart from the run; the following ``run`` compiles
    nothing. Places the States the step reads on the way. Returns the
    seconds it took (0.0 if everything was compiled already).

    Example:
      >>> import brainshard as bs, jax.numpy as jnp
      >>> v = bs.State(jnp.zeros(4), name='v')
      >>> def step():
      ...   v.value = v.value + 1.0
      ...   return v.value > 2.0
      >>> runner = bs.Runner(step, {'s': bs.SpikeMonitor()}, chunk=4,
      ...                    progress=False)
      >>> seconds = runner.compile(8)
      >>> runner.compile(8), runner.run(8).steps
      (0.0, 8)
    """
    if steps is None and duration is None:
      n = self.chunk or 0
    else:
      n = self._n_steps(steps, duration)
    loop = self._make_loop(n or None)
    return self._programs.compile(loop, n or loop.chunk, self.step_count)

  def _bar(self, n: int) -> ChunkBar | None:
    if not self.progress:
      return None
    desc = self.progress if isinstance(self.progress, str) else self.name
    return ChunkBar(n, self.dt, desc)

  def _chunks(self, loop: ChunkedLoop, n: int, stop: StopButton,
              bar: ChunkBar | None) -> None:
    """Records each chunk as it finishes. However the run ends (done, a
    stop, a second Ctrl-C landing anywhere, an error), the States end as
    they were after the last chunk whose records were kept: ``kept`` moves
    on in the same critical section that keeps a chunk's records."""
    rec = self.recorder
    chunks = loop.iterate(n, start=self.step_count, stop=stop,
                          then=lambda out: (out, rec.dispatch(out)))
    writes = loop.written_states()
    kept = [s.value for s in writes]
    try:
      while True:
        with stop.critical():  # dispatches the next chunk (writes States)
          chunk = next(chunks, None)
        if chunk is None:
          break
        jax.block_until_ready(chunk.after)  # this chunk's steps are done
        data = rec.collect(chunk.start, chunk.length, chunk.out[1])
        with stop.critical():
          mark = self.result.store.mark()
          try:
            self._record(chunk, data, writes)
          except BaseException:  # e.g. a full disk: none of this chunk kept
            self.result.store.truncate(mark)
            raise
          kept = chunk.after
          if (self.checkpoint_every
              and self.chunks_done % self.checkpoint_every == 0):
            self._checkpoint(writes, chunk.after)
        if bar is not None:
          bar.update(chunk.length)
    finally:
      with stop.critical():
        chunks.close()  # drops the chunks dispatched ahead
        restore(writes, kept)

  def _record(self, chunk: Any, data: dict, writes: tuple[State, ...]) -> None:
    """Keeps one chunk's records (all appended, then committed at once) and
    counts its steps."""
    store = self.result.store
    for name, fields in data.items():
      for field, value in fields.items():
        store.append(name, field, value)
    store.commit(self.result.steps + chunk.length, self.result.start)
    self.step_count = chunk.start + chunk.length
    self.result.steps += chunk.length
    self.chunks_done += 1

  def _monitor_meta(self) -> dict:
    """What a record on disk says of each monitor (checked on continuing)."""
    sizes = self.result.sizes
    return {name: {"kind": self.result.kinds[name],
                   **({"n": int(sizes[name])} if name in sizes else {}),
                   **({"every": m.every} if isinstance(m, StateMonitor) else {})}
            for name, m in self.recorder.monitors.items()}

  def reset_records(self) -> None:
    """Forgets what was recorded; the next records start at this step."""
    self.result.store.clear(self.step_count)
    self.result.start = self.step_count
    self.result.steps = 0
    self.result.interrupted = False

  # -- checkpoints -------------------------------------------------------------

  def _named_states(self) -> dict[str, State]:
    if self.checkpoint_states is not None:
      return dict(self.checkpoint_states)
    _, writes = self.recorder.discover()
    named: dict[str, State] = {}
    for k, s in enumerate(writes):
      base = re.sub(r"\W", "_", s.name or f"state{k}")
      key, j = base, 1
      while key in named:
        key, j = f"{base}_{j}", j + 1
      named[key] = s
    return named

  def _checkpoint(self, writes: tuple[State, ...], values: list) -> None:
    """Saves the States as they were after the chunk just recorded (the next
    chunk may already be running: its values are swapped out meanwhile)."""
    path = os.path.join(self.checkpoint_dir, f"step_{self.step_count:012d}")
    meta = {"step": self.step_count, "dt": self.dt,
            "time": None if self.dt is None else self.step_count * self.dt}
    now = [s.value for s in writes]
    restore(writes, values)
    try:
      checkpoint.save_states(path, self._named_states(), overwrite=True,
                             metadata=meta)
    finally:
      restore(writes, now)

  def restore(self, path: str | os.PathLike | None = None) -> dict:
    """Restores the States from a checkpoint (default: the newest one in
    ``checkpoint_dir``) and continues counting steps from it; says on
    stderr where the run continues. Returns the checkpoint's metadata. The
    records start afresh from that step (their steps and times go on); a
    record on disk (``record_to``) keeps those of the steps before it."""
    if path is None:
      if self.checkpoint_dir is None or not os.path.isdir(self.checkpoint_dir):
        raise FileNotFoundError("Runner.restore: no checkpoint_dir to look in")
      found = sorted(p for p in os.listdir(self.checkpoint_dir)
                     if re.fullmatch(r"step_\d+", p))
      if not found:
        raise FileNotFoundError(
            f"no step_* checkpoint in {self.checkpoint_dir}")
      path = os.path.join(self.checkpoint_dir, found[-1])
    meta = checkpoint.restore_states(os.fspath(path), self._named_states())
    self.step_count = int(meta["step"])
    self.target = None
    res = self.result
    res.start, res.steps = res.store.rewind(self.step_count)
    res.interrupted = False
    t = "" if self.dt is None else f" (t = {self.time:g} ms)"
    print(f"bs.Runner: restored {os.fspath(path)}; the run continues at step "
          f"{self.step_count}{t}.", file=sys.stderr)
    return meta
