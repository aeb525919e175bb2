"""The goal suite: ``python -m benchmarks [--quick]`` (the default command
of benchmarks/cli.py, also ``python -m benchmarks suite``).

Every figure is the ratio of brainshard's time to hand-threaded pure JAX
doing the same work, timed interleaved in this process (machines here are
shared and noisy); absolute times are printed beside, never asserted.
Each run writes ``benchmarks/results/<name>.json``, its report
``<name>.md`` and plot ``<name>_states.png`` there (``<name>`` is ``quick``
or ``full``); the committed ``docs/benchmarks.md`` and
``docs/benchmarks_states.png`` are regenerated only with ``--docs``.

The peers (brainstate, Flax NNX) run the same workloads when installed
(``pip install -e .[bench]``); pass ``--no-peers`` to skip them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import warnings

from benchmarks._harness import clock, fake_devices, parser

# 8 faked CPU devices, before JAX starts (its children inherit them).
fake_devices(8)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _meta(args) -> dict:
  import jax
  import brainshard as bs
  from benchmarks import _peers
  from benchmarks._dispatch import DISPATCH_REPEATS
  meta = dict(
      date=datetime.datetime.now().isoformat(timespec="seconds"),
      quick=args.quick, repeats=args.repeats,
      dispatch_repeats=DISPATCH_REPEATS * args.repeats,
      python=platform.python_version(), jax=jax.__version__,
      brainshard=bs.__version__, platform=platform.platform(),
      cpu_count=os.cpu_count(), devices=f"{jax.device_count()} x "
      f"{jax.devices()[0].device_kind}",
      peers=_peers.versions() if args.peers else {})
  try:
    meta["load_avg"] = os.getloadavg()
  except OSError:
    pass
  return meta


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  from benchmarks._workloads import WORKLOADS
  ap = parser(__doc__)
  ap.add_argument("--quick", action="store_true",
                  help="fewer sizes and repeats (under 2 minutes on 2 cores)")
  ap.add_argument("--only", default="",
                  help=f"comma-separated subset of {','.join(WORKLOADS)}")
  ap.add_argument("--repeats", type=int, default=None,
                  help="interleaved repeats per comparison")
  ap.add_argument("--no-peers", dest="peers", action="store_false",
                  help="skip brainstate / Flax NNX even if installed")
  ap.add_argument("--profile", action="store_true",
                  help="also profile brainshard's per-call path")
  ap.add_argument("--runs", type=int, default=1,
                  help="run the suite this many times, each in a fresh "
                  "process, and report per figure the median run "
                  "(issue 24's goals: the median of 3)")
  ap.add_argument("--name", default=None,
                  help="results file name (default: quick or full)")
  ap.add_argument("--out", default=None,
                  help="folder for the results, report and plot "
                  "(default: benchmarks/results)")
  ap.add_argument("--docs", action="store_true",
                  help="also regenerate the committed docs/benchmarks.md "
                  "and docs/benchmarks_states.png from this run")
  # The docs are no longer written by default; accepted for old scripts.
  ap.add_argument("--no-docs", dest="docs", action="store_false",
                  help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.runs < 1:
    ap.error(f"--runs must be at least 1, not {args.runs}")
  if args.repeats is None:
    args.repeats = 9 if args.quick else 25
  chosen = [w for w in (args.only.split(",") if args.only else WORKLOADS) if w]
  unknown = set(chosen) - set(WORKLOADS)
  if unknown:
    ap.error(f"unknown workloads {sorted(unknown)}; pick from {list(WORKLOADS)}")
  args.workloads = chosen
  return args


def output_paths(args: argparse.Namespace, root: str | None = None) -> dict:
  """Where a run writes: ``json``, ``report``, ``plot`` (all in the results
  folder) and ``docs``: None, or the docs folder when ``--docs`` asks."""
  root = root or _ROOT
  out = args.out or os.path.join(root, "benchmarks", "results")
  name = args.name or ("quick" if args.quick else "full")
  return dict(json=os.path.join(out, f"{name}.json"),
              report=os.path.join(out, f"{name}.md"),
              plot=os.path.join(out, f"{name}_states.png"),
              docs=os.path.join(root, "docs") if args.docs else None)


def main(argv: list[str] | None = None) -> int:
  from benchmarks._workloads import WORKLOADS, Ctx
  args = parse_args(argv)
  # The peers warn about deprecated calls on every call; silence that once,
  # process-wide, so no per-call warning machinery is timed.
  warnings.filterwarnings("ignore", category=DeprecationWarning)
  warnings.filterwarnings("ignore", module=r"(flax|brainstate|brainunit)")

  with clock() as whole:
    if args.runs > 1:
      from benchmarks._runs import combine, run_separately
      doc = combine(run_separately(_child_argv(args), args.runs))
    else:
      ctx = Ctx(quick=args.quick, peers=args.peers, repeats=args.repeats)
      results = []
      for name in args.workloads:
        print(f"[{name}]", flush=True)
        with clock() as t:
          results += WORKLOADS[name](ctx)
        print(f"  ({t.s:.1f} s)", flush=True)
      doc = dict(meta=_meta(args), results=results)
    if args.profile:
      from benchmarks._profile import profile_all
      doc["profile"] = profile_all()
  doc["meta"]["wall_s"] = whole.s
  _write(doc, args, output_paths(args))
  return 0


def _child_argv(args: argparse.Namespace) -> list[str]:
  """What each of ``--runs``' processes measures: the same workloads,
  mode, repeats and peers (it writes where it is told; no docs)."""
  argv = ["--only", ",".join(args.workloads), "--repeats", str(args.repeats)]
  return argv + (["--quick"] if args.quick else []) + (
      [] if args.peers else ["--no-peers"])


def _write(doc: dict, args: argparse.Namespace, paths: dict) -> None:
  from benchmarks._report import render
  path = paths["json"]
  wall_s = doc["meta"]["wall_s"]  # this run's (a merge keeps the full run's)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  if args.only and paths["docs"] and not os.path.exists(path):
    # results/ is not committed: a fresh checkout has no full run to merge
    # into, and the page would keep this run's sections only.
    print(f"note: no {_rel(path)} to merge into; the page gets only "
          f"{','.join(args.workloads)} (run the full suite first)")
  if args.only and os.path.exists(path):  # merge into the earlier run
    with open(path) as f:
      old = json.load(f)
    keep = [r for r in old.get("results", []) if r["workload"] not in
            {r2["workload"] for r2 in doc["results"]}]
    doc["results"] = keep + doc["results"]
    # A partial run updates some sections; the page keeps the full run's
    # header (date, mode, load) and says which sections were re-measured.
    if "meta" in old:
      # An earlier re-measure of only these sections no longer describes
      # any figure on the page.
      earlier = [u for u in old["meta"].get("updated", [])
                 if not set(u["workloads"]) <= set(args.workloads)]
      doc["meta"] = dict(old["meta"], updated=earlier + [
          dict(workloads=args.workloads, date=doc["meta"]["date"],
               repeats=args.repeats,
               dispatch_repeats=doc["meta"]["dispatch_repeats"],
               runs=doc["meta"].get("runs", 1),
               load_avg=doc["meta"].get("load_avg"),
               wall_s=doc["meta"]["wall_s"])])
    if "profile" not in doc and "profile" in old:
      doc["profile"] = old["profile"]
  with open(path, "w") as f:
    json.dump(doc, f, indent=1)
  print(f"wrote {_rel(path)} in {wall_s:.1f} s")
  report = render(doc, os.path.dirname(paths["report"]),
                  md_name=os.path.basename(paths["report"]),
                  png_name=os.path.basename(paths["plot"]))
  print(f"wrote {_rel(report)}")
  if paths["docs"] is not None:
    print(f"wrote {_rel(render(doc, paths['docs']))}")


def _rel(path: str) -> str:
  return os.path.relpath(path, _ROOT)
