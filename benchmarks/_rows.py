"""What a workload of the suite returns: result rows (dicts, see
:func:`row`), one per implementation and case, each a ratio against the
baseline timed beside it (benchmarks/_harness), and the context it runs in.
The workloads are in ``_workloads.WORKLOADS``; docs/benchmarks.md renders
their rows (``_report.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax

from benchmarks import _peers
from benchmarks._harness import Case, Timing

BS = "brainshard"
BST = "brainstate"


@dataclass
class Ctx:
  """What a workload runs with: the mode, the peers, the repeats, and
  where its progress lines go."""
  quick: bool
  peers: bool
  repeats: int
  log: Callable[[str], None] = print


def row(workload: str, case: str, impl: str, t: Timing | None, base: Timing | None,
        *, baseline: str, goal: float | None = None, x: float | None = None,
        unavailable: str | None = None, **extra) -> dict:
  r = dict(workload=workload, case=case, impl=impl, baseline=baseline,
           goal=goal, x=x, **extra)
  if unavailable is not None:
    r["unavailable"] = unavailable
  else:
    r.update(ratio=t.ratio, lo=t.ratio_lo, hi=t.ratio_hi, best=t.ratio_best,
             time_s=t.per_call_s, baseline_time_s=base.per_call_s,
             number=t.number)
  return r


def mesh_of(k: int):
  return jax.make_mesh((k,), ("x",), devices=jax.devices()[:k])


def add_peers(ctx: Ctx, cases: dict, missing: dict, builders: dict) -> None:
  """Adds each peer's case, or records why it is unavailable."""
  if not ctx.peers:
    return
  for name, (builder, args) in builders.items():
    try:
      run, sync = _peers.call(builder, *args)
      cases[name] = Case(run, sync)
    except _peers.Unavailable as e:
      missing[name] = str(e)


def rows_for(ctx, workload, case, timings, missing, baseline, *,
             goal_for=None, x=None, **extra) -> list[dict]:
  """One row per timed implementation (its progress line logged) and per
  unavailable one (``missing``: why)."""
  out = []
  base = timings[baseline]
  for impl, t in timings.items():
    goal = goal_for(impl) if goal_for else None
    r = row(workload, case, impl, t, base, baseline=baseline, goal=goal, x=x,
            **extra)
    out.append(r)
    if impl != baseline:
      ctx.log(f"  {workload:<10} {case:<22} {impl:<34} {t.ratio:6.3f}x "
              f"[{t.ratio_lo:.3f}-{t.ratio_hi:.3f}] best {t.ratio_best:.3f} "
              f"{t.per_call_s * 1e6:10.1f} us "
              f"(base {base.per_call_s * 1e6:.1f} us)")
  for impl, why in missing.items():
    out.append(row(workload, case, impl, None, None, baseline=baseline, x=x,
                   unavailable=why))
    ctx.log(f"  {workload:<10} {case:<22} {impl:<34} unavailable: {why[:70]}")
  return out


def fmt_time(s: float) -> str:
  """A time as a row's cell shows it.

  >>> fmt_time(2.5), fmt_time(0.0125), fmt_time(1.25e-5)
  ('2.50 s', '12.50 ms', '12.5 us')
  """
  if s >= 1:
    return f"{s:.2f} s"
  if s >= 1e-3:
    return f"{s * 1e3:.2f} ms"
  return f"{s * 1e6:.1f} us"
