"""README's demo, ``python -m examples.cuba``, on 1 device and on 8 faked CPU
devices: what a new user sees. The 8 devices are faked on the machine's own
cores (``jax_num_cpu_devices``), so they share them; the demo shows that the
sharding works, not a speed-up, and this measures by how much one device is
faster on such a machine.

Each run is a fresh process started as README starts it
(``python -m examples.cuba --devices K``, no ``XLA_FLAGS``); the figure is
the script's own "s per simulated second" line (its run includes the one
compile), the median over runs that alternate 1, 8, 8, 1, ... A workload of
``python -m benchmarks`` (``--only demo``); rendered into docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks._harness import device_env

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (1, 8)
_PER_SIM = re.compile(r"([0-9.]+) s per simulated second")


def _env() -> dict:
  """The environment without the benchmark process's faked-device flag:
  the example fakes its own (``--devices``)."""
  return device_env(None, dict(os.environ, PYTHONPATH=str(ROOT)))


def run_demo(devices: int, timeout: float = 300) -> tuple[float | None, list[str]]:
  """One ``python -m examples.cuba --devices K`` run: (s per simulated
  second, its report lines)."""
  cmd = [sys.executable, "-m", "examples.cuba", "--devices", str(devices)]
  try:
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)
    text = proc.stdout + proc.stderr
  except subprocess.TimeoutExpired:
    return None, [f"timed out after {timeout:g} s"]
  lines = [l.strip() for l in text.splitlines()
           if re.search(r"simulated|rate|Hz", l, re.I)]
  m = _PER_SIM.search(text)
  return (float(m.group(1)) if m else None), lines[-4:]


def cuba_example(ctx) -> list[dict]:
  """``python -m examples.cuba`` (from the simulation issue), run as its
  users would; its own report line is recorded as printed."""
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  try:
    proc = subprocess.run([sys.executable, "-m", "examples.cuba"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
  except subprocess.TimeoutExpired:
    text = "timed out after 300 s"
  lines = [l.strip() for l in text.splitlines()
           if re.search(r"simulated|rate|Hz", l, re.I)]
  ctx.log("  examples.cuba: " + " | ".join(lines[-3:]))
  return [dict(workload="cuba-example", case="python -m examples.cuba",
               impl="brainshard", baseline=None, output=lines[-6:])]


def w_demo(ctx) -> list[dict]:
  repeats = 1 if ctx.quick else 3
  runs: dict[int, list[float]] = {k: [] for k in COUNTS}
  output: dict[int, list[str]] = {}
  for r in range(repeats):
    for k in (COUNTS if r % 2 == 0 else COUNTS[::-1]):
      per_s, lines = run_demo(k)
      output[k] = lines
      if per_s is not None:
        runs[k].append(per_s)
      ctx.log(f"  demo, {k} device(s): " + " | ".join(lines[-1:]))
  return [dict(workload="demo", case=f"{k} device(s)", impl="brainshard",
               baseline=None, x=k, runs=runs[k], output=output.get(k, []),
               per_sim_second_s=statistics.median(runs[k]) if runs[k] else None)
          for k in COUNTS]


def render_demo(rows: list[dict], meta: dict) -> list[str]:
  """The docs section: a table of both device counts and the factor."""
  by = {r["x"]: r for r in rows}
  one = by.get(1, {}).get("per_sim_second_s")
  lines = ["## 4c. The README demo on 1 and 8 devices", "",
           "`python -m examples.cuba --devices K` as README runs it (a fresh "
           "process each time; the script's own figure, which includes the one "
           "compile), median of the runs listed. The 8 devices are faked on this "
           f"machine's {meta.get('cpu_count', '?')} CPU cores and share them: "
           "the demo shows that the sharding works, not a speed-up.", "",
           "| devices | s per simulated second | runs | time vs 1 device |",
           "| --- | --- | --- | --- |"]
  for k in sorted(by):
    r = by[k]
    t = r.get("per_sim_second_s")
    runs = ", ".join(f"{x:.2f}" for x in r.get("runs", []))
    rel = f"{t / one:.1f}x" if t and one else "n/a"
    lines.append(f"| {k} | {t:.2f} s | {runs} | {rel} |" if t else
                 f"| {k} | failed | | |")
  eight = by.get(8, {}).get("per_sim_second_s")
  if one and eight:
    lines += ["", f"On one device the demo runs **{eight / one:.1f} times "
              "faster** than on the 8 faked devices of the same machine."]
  last = by.get(8, {}).get("output")
  if last:
    lines += ["", "Its report on 8 devices:", "", "```", *last, "```"]
  return lines + [""]
