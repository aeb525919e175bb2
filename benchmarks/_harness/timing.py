"""Interleaved timing: every figure is a ratio measured in one process;
and :class:`clock`, the one wall and CPU clock of every other timing.

Machines here are shared and noisy, so the implementations being compared are
timed in alternation (A, B, C, then B, C, A, ...) and each repeat yields one
ratio per implementation against the baseline timed right next to it; the
reported ratio is the median of those, and the spread is its interquartile
range; the ratio of the best (minimum) times is kept too, as a second
estimate that load spikes cannot inflate. Absolute times (medians) are
reported beside, never asserted.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable


def _block(x: Any) -> Any:
  # JAX is imported on first use, not with the harness: NEST's child
  # processes measure with it and must never import JAX.
  import jax
  return jax.block_until_ready(x)


class clock:
  """Wall and CPU seconds (``.s``, ``.cpu_s``) of a ``with`` block: running
  inside it, fixed at its end. CPU seconds are the whole process's, every
  thread's (user + system), as NEST's and XLA's thread pools spend them.

  >>> with clock() as t:
  ...   _ = sum(range(1000))
  >>> t.s > 0 and t.cpu_s >= 0 and t.s == t.s  # fixed after the block
  True
  """

  def __enter__(self) -> "clock":
    self._end = None
    self._start = (time.perf_counter(), time.process_time())
    return self

  def __exit__(self, *exc) -> None:
    self._end = (time.perf_counter(), time.process_time())

  def _now(self) -> tuple[float, float]:
    return self._end or (time.perf_counter(), time.process_time())

  @property
  def s(self) -> float:
    return self._now()[0] - self._start[0]

  @property
  def cpu_s(self) -> float:
    return self._now()[1] - self._start[1]


@dataclass
class Case:
  """One implementation of a workload: ``run()`` does one call (one step);
  ``sync()`` returns something to block on after a batch of calls."""
  run: Callable[[], Any]
  sync: Callable[[], Any] = lambda: None


@dataclass
class Timing:
  per_call_s: float          # median seconds per call
  ratio: float               # median over repeats of (this / baseline)
  ratio_lo: float            # quartiles of the per-repeat ratios
  ratio_hi: float
  number: int                # calls per timed batch
  samples: list = field(default_factory=list)
  ratio_best: float = 0.0    # min(this) / min(baseline): robust to load spikes


def batch(case: Case, number: int) -> float:
  """Seconds of ``number`` calls of ``case`` and one wait for its results,
  with the garbage collector off (one of :func:`compare`'s batches)."""
  run = case.run
  gc_was = gc.isenabled()
  gc.disable()
  try:
    t0 = time.perf_counter()
    for _ in range(number):
      run()
    _block(case.sync())
    return time.perf_counter() - t0
  finally:
    if gc_was:
      gc.enable()


def _calibrate(case: Case, target_s: float, max_number: int) -> int:
  """Calls per batch so that one batch takes about ``target_s``."""
  number = 1
  while True:
    t = batch(case, number)
    if t >= target_s or number >= max_number:
      return number
    number = min(max_number, max(number * 2, int(number * target_s / max(t, 1e-9))))


def compare(cases: dict[str, Case], baseline: str, *, repeats: int,
            target_s: float = 0.02, warmup: int = 3,
            max_number: int = 100_000) -> dict[str, Timing]:
  """Times every case interleaved with the others; ratios against
  ``cases[baseline]``."""
  names = list(cases)
  for name in names:
    for _ in range(warmup):
      cases[name].run()
    _block(cases[name].sync())
  numbers = {n: _calibrate(cases[n], target_s, max_number) for n in names}
  samples: dict[str, list[float]] = {n: [] for n in names}
  for r in range(repeats):
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
      samples[name].append(batch(cases[name], numbers[name]) / numbers[name])
    gc.collect()
  return _summarise(samples, baseline, numbers)


def _summarise(samples: dict[str, list[float]], baseline: str,
               numbers: dict[str, int]) -> dict[str, Timing]:
  """Per implementation: median time, median and quartiles of the per-repeat
  ratios to the baseline timed beside it, and the ratio of best times."""
  base = samples[baseline]
  out = {}
  for name, times in samples.items():
    ratios = sorted(a / b for a, b in zip(times, base))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    out[name] = Timing(statistics.median(times), statistics.median(ratios),
                       q[0], q[-1], numbers[name], times,
                       min(times) / min(base))
  return out


def release(cases: dict[str, Case]) -> None:
  """Frees a comparison's programs and arrays before the next one is built.
  Built while the previous comparison's arrays were still alive, the same
  pure N=10 dispatch step measured 25% slower and its ratios three times
  noisier (12.5 -> 16 us per call; ANALYSIS.md, fifth pass)."""
  cases.clear()
  gc.collect()


def against(timings: dict[str, Timing], name: str, baseline: str) -> Timing:
  """``timings[name]`` as ratios to another case of the same :func:`compare`
  run (each repeat against the baseline timed beside it): for a row whose
  same-work baseline is not the run's."""
  t, b = timings[name], timings[baseline]
  return _summarise({name: t.samples, baseline: b.samples}, baseline,
                    {name: t.number, baseline: b.number})[name]


def once(fn: Callable[[], Any]) -> float:
  """Wall time of one call (blocked), for first-call latencies."""
  gc.collect()
  with clock() as t:
    _block(fn())
  return t.s


def compare_once(makers: dict[str, Callable[[], Callable[[], Any]]],
                 baseline: str, *, repeats: int) -> dict[str, Timing]:
  """Like :func:`compare` for things that can only be timed once per fresh
  object (a first call: trace + compile + run). ``makers[name]()`` builds a
  fresh, never-called function; the timed part is its first call."""
  names = list(makers)
  samples: dict[str, list[float]] = {n: [] for n in names}
  for r in range(repeats):
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
      fn = makers[name]()
      samples[name].append(once(fn))
  return _summarise(samples, baseline, dict.fromkeys(names, 1))
