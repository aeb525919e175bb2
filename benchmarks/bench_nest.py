"""``python -m benchmarks nest``: brainshard, its pure-JAX twin and NEST 3
on the same networks, one table.

Rows: the CUBA network of ``examples.cuba`` (``--delay 2``, NEST's 0.1 ms)
at 4 k / 40 k / 400 k neurons (80 inputs each; NEST gets the example's own
connectivity table and initial potentials, exported) and the Potjans &
Diesmann microcircuit (``examples.microcircuit``; NEST builds it with its
own rules from ``nest_reference``, so the synapses are drawn alike, not the
same) at ``--scales``. How the example maps onto NEST is
:mod:`benchmarks._nest_cuba`. The twins: ``_ei.pure_block_run`` (CUBA) and
``_microcircuit_twin`` (the example's synapses and spikes, no State, jit,
shard_map or Runner). Each measurement is a fresh process
(:mod:`benchmarks._nest_children`); the implementations alternate (A B C,
B C A, ...), ``--repeats`` rounds (``--repeats-large`` at 400 k neurons and
at scale >= 0.5), and the table gives each figure's median over the rounds
and the ratios brainshard / twin and brainshard / NEST of the medians.
NEST runs with as many threads as this process has cores and
``OMP_WAIT_POLICY=passive``; brainshard and the twin on one JAX device (a
GPU where JAX has one: the one-command GPU run of the full microcircuit is
``python -m benchmarks nest --only microcircuit --impls brainshard
--scales 1.0``).

Writes ``benchmarks/results/nest.{md,json}`` (``--out``); ``--docs`` also replaces the
generated table in docs/nest.md. The 1-minute load average is recorded
before every run and stated with the table.

Example (the figures of two runs, as the table cell gives them):
  >>> _median([dict(s_per_sim_s=1.0), dict(s_per_sim_s=3.0)], 's_per_sim_s')
  2.0
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile

from benchmarks import _nest_children
from benchmarks._harness import parser

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "nest.md"
BEGIN, END = "<!-- nest-table:begin -->", "<!-- nest-table:end -->"
FIGURES = (("build_s", "build (s)", "{:.2f}"),
           ("s_per_sim_s", "s / simulated s", "{:.3f}"),
           ("cpu_s_per_sim_s", "CPU s / simulated s", "{:.3f}"),
           ("child_cpu_s", "process CPU (s)", "{:.1f}"),
           ("peak_rss_mb", "peak RSS (MB)", "{:.0f}"),
           ("rate_hz", "rate (Hz)", "{:.2f}"))
NAMES = {"brainshard": "brainshard", "twin": "pure-JAX twin", "nest": "NEST"}


def _median(runs: list[dict], key: str) -> float:
  return statistics.median(r[key] for r in runs)


def _nest_installed() -> bool:
  return importlib.util.find_spec("nest") is not None


def _microcircuit_missing() -> str | None:
  """Why the microcircuit rows cannot run here, or None."""
  if importlib.util.find_spec("examples.microcircuit.model") is None:
    return "examples.microcircuit.model is not in this checkout"
  return None


def cases(args) -> list[dict]:
  """One entry per table section: a label, the specs of its
  implementations, its rounds and (for CUBA and NEST) the export to make."""
  out = []
  impls = [i for i in args.impls.split(",") if i != "nest" or
           _nest_installed()]
  if "cuba" in args.only:
    for n in args.sizes:
      large = n >= 400_000
      ms = 1e3 * (args.duration if args.duration else (0.2 if large else 1.0))
      specs = [dict(workload="cuba", impl=i, n=n, duration_ms=ms,
                    warmup_ms=args.warmup, threads=args.threads)
               for i in impls]
      out.append(dict(label=f"CUBA {n:,} neurons, {n * 80 / 1e6:.2g} M "
                            f"synapses, {ms / 1e3:g} s",
                      specs=specs, export=n if "nest" in impls else None,
                      rounds=args.repeats_large if large else args.repeats))
  if "microcircuit" in args.only:
    for scale in args.scales:
      large = scale >= 0.5
      ms = 1e3 * (args.mc_duration if args.mc_duration
                  else (0.1 if large else 0.5))
      specs = [dict(workload="microcircuit", impl=i, scale=scale,
                    k_scale=args.k_scale, duration_ms=ms,
                    warmup_ms=args.warmup, threads=args.threads)
               for i in impls]
      out.append(dict(label=f"microcircuit scale {scale:g}, k-scale "
                            f"{args.k_scale:g}, {ms / 1e3:g} s",
                      specs=specs, export=None, skip=_microcircuit_missing(),
                      rounds=args.repeats_large if large else args.repeats))
  return out


def run_case(case: dict, tmp: str) -> dict[str, list[dict]]:
  """The case's runs, interleaved; per implementation its list of runs."""
  runs: dict[str, list[dict]] = {s["impl"]: [] for s in case["specs"]}
  if case.get("skip"):
    print(f"{case['label']}: skipped ({case['skip']})", flush=True)
    return runs
  specs = case["specs"]
  if case["export"]:
    network = os.path.join(tmp, f"cuba{case['export']}.npz")
    done = _nest_children.in_child(dict(impl="export", n=case["export"],
                                        network=network))
    if "error" in done:
      raise RuntimeError(f"export failed: {done['stderr']}")
    specs = [dict(s, network=network) if s["impl"] == "nest" else s
             for s in specs]
  for r in range(case["rounds"]):
    order = specs[r % len(specs):] + specs[:r % len(specs)]
    for spec in order:
      load = os.getloadavg()[0]
      out = _nest_children.in_child(spec)
      out["load_before"] = load
      runs[spec["impl"]].append(out)
      print(_line(case["label"], out), flush=True)
      if "error" in out:
        print(out.get("stderr", ""), file=sys.stderr)
  return runs


def _line(label: str, r: dict) -> str:
  head = f"{label} | {NAMES.get(r['impl'], r['impl'])}: "
  if "error" in r:
    return head + "failed: " + r["error"]
  return head + ", ".join(f"{title} {fmt.format(r[key])}"
                          for key, title, fmt in FIGURES) + \
      f" (load {r['load_before']:.2f})"


def render(sections: list[tuple[dict, dict]], header: str) -> str:
  """The Markdown table: per section the median of each figure per
  implementation, then the ratios of the medians."""
  head = ("| network | implementation | " +
          " | ".join(t for _, t, _ in FIGURES) + " | runs |")
  rows = [header, "", head, "|" + "---|" * (len(FIGURES) + 3)]
  for case, runs in sections:
    label = case["label"]
    if case.get("skip"):
      rows.append(f"| {label} | skipped: {case['skip']} |" +
                  " |" * (len(FIGURES) + 1))
      continue
    medians = {}
    for impl, rs in runs.items():
      ok = [r for r in rs if "error" not in r]
      if not ok:
        err = rs[0]["error"] if rs else "not run"
        rows.append(f"| {label} | {NAMES[impl]}: failed: {err} |" +
                    " |" * (len(FIGURES) + 1))
        continue
      medians[impl] = {k: _median(ok, k) for k, _, _ in FIGURES}
      cells = [fmt.format(medians[impl][k]) for k, _, fmt in FIGURES]
      rows.append(f"| {label} | {NAMES[impl]} | " + " | ".join(cells) +
                  f" | {len(ok)} |")
      label = ""
    for other in ("twin", "nest"):
      if "brainshard" in medians and other in medians:
        cells = [f"{medians['brainshard'][k] / medians[other][k]:.2f}"
                 if medians[other][k] else "-" for k, _, _ in FIGURES[:-1]]
        rows.append(f"| | brainshard / {NAMES[other]} | " +
                    " | ".join(cells) + " | | |")
  return "\n".join(rows) + "\n"


def machine(loads: list[float], threads: int) -> str:
  mem = ""
  try:
    with open("/proc/meminfo") as f:
      mem = f", {int(f.readline().split()[1]) / 2**20:.0f} GiB RAM"
  except OSError:
    pass
  nest = _nest_version()
  load = (f"1-min load average before the runs {min(loads):.2f} to "
          f"{max(loads):.2f} (median {statistics.median(loads):.2f})"
          if loads else "no runs")
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
  return (f"Measured {stamp} UTC on {platform.node()}: {os.cpu_count()} CPU cores"
          f"{mem}, {load}; jax {importlib.metadata.version('jax')}, "
          f"NEST {nest} with {threads} threads; brainshard and the twin on "
          f"one JAX device ({_jax_device()}). Medians over the runs; each run a fresh "
          f"process, the implementations interleaved.")


def _jax_device() -> str:
  """The device the children run on (a GPU where JAX has one)."""
  import jax  # pylint: disable=import-outside-toplevel
  return jax.devices()[0].device_kind


def _nest_version() -> str:
  if not _nest_installed():
    return "(not installed)"
  out = subprocess.run([sys.executable, "-c",
                        "import nest; print(nest.__version__)"],
                       env=dict(os.environ, OMP_WAIT_POLICY="passive"),
                       capture_output=True, text=True, check=False)
  return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else "?"


def write_docs(table: str, path: pathlib.Path = DOCS) -> None:
  """Replaces the text between the markers in docs/nest.md."""
  text = path.read_text()
  if BEGIN not in text or END not in text:
    raise ValueError(f"{path} has no {BEGIN} ... {END} markers")
  new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END),
               lambda _: f"{BEGIN}\n{table}{END}", text, flags=re.S)
  path.write_text(new)


def parse(argv: list[str] | None):
  floats = lambda s: [float(x) for x in s.split(",") if x]  # noqa: E731
  ints = lambda s: [int(float(x)) for x in s.split(",") if x]  # noqa: E731
  ap = parser(__doc__, child=True)
  ap.add_argument("--only", default="cuba,microcircuit",
                  help="sections: cuba, microcircuit")
  ap.add_argument("--impls", default="brainshard,twin,nest")
  ap.add_argument("--sizes", type=ints, default=[4000, 40_000, 400_000],
                  help="CUBA neurons (80 inputs each)")
  ap.add_argument("--scales", type=floats, default=[0.1],
                  help="microcircuit scales (fraction of the neurons); "
                       "add 1.0 for the full scale (299 M synapses: NEST "
                       "needs several GB more than brainshard, and minutes "
                       "to build on 2 cores)")
  ap.add_argument("--k-scale", type=float, default=1.0,
                  help="microcircuit in-degrees (1: as published)")
  ap.add_argument("--duration", type=float, default=None,
                  help="CUBA seconds timed (default 1, 0.2 at >= 400 k)")
  ap.add_argument("--mc-duration", type=float, default=None,
                  help="microcircuit seconds timed (default 0.5, 0.1 at "
                       "scale >= 0.5)")
  ap.add_argument("--warmup", type=float, default=100.0,
                  help="ms simulated (and compiled) before timing")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--repeats-large", type=int, default=1,
                  help="rounds at >= 400 k neurons and scale >= 0.5")
  ap.add_argument("--threads", type=int, default=None,
                  help="NEST threads (default: this process's cores)")
  ap.add_argument("--out", default="nest",
                  help="results/OUT.md and results/OUT.json")
  ap.add_argument("--docs", action="store_true",
                  help="also write the table into docs/nest.md")
  return ap.parse_args(argv)


def main(argv: list[str] | None = None):
  args = parse(argv)
  if args.child:
    return _nest_children.child_main(args.child)
  args.only = set(args.only.split(","))
  threads = args.threads or len(os.sched_getaffinity(0))
  sections = []
  with tempfile.TemporaryDirectory() as tmp:
    for case in cases(args):
      sections.append((case, run_case(case, tmp)))
  loads = [r["load_before"] for _, runs in sections for rs in runs.values()
           for r in rs]
  table = render(sections, machine(loads, threads))
  print(table)
  RESULTS.mkdir(exist_ok=True)
  (RESULTS / f"{args.out}.md").write_text(table)
  (RESULTS / f"{args.out}.json").write_text(json.dumps(
      [dict(label=c["label"], runs=runs) for c, runs in sections], indent=1))
  if args.docs:
    write_docs(table)
  return dict(table=table, sections=sections)
