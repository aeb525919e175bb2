"""``python -m benchmarks nest``: brainshard, its pure-JAX twin and NEST 3
on the same networks, one table, and where a step's time goes.

Sections (``--only brunel,microcircuit,cuba``): Brunel's model A
(``examples.brunel``, AI regime, ``--brunel-scales``; the example's own
``add_brunel`` builds it in NEST), the Potjans & Diesmann microcircuit
(``examples.microcircuit`` at ``--scales``; NEST builds it with its own
rules from ``nest_reference``, so the synapses are drawn alike, not the
same) and the CUBA network of ``examples.cuba`` (``--delay 2``, NEST's
0.1 ms) at ``--sizes`` neurons (80 inputs each; NEST gets the example's own
connectivity table and initial potentials, exported). How CUBA maps onto
NEST is :mod:`benchmarks._nest_cuba`. The twins: ``_network_twin``
(Brunel), ``_microcircuit_twin``, ``_ei.pure_block_run`` (CUBA): the same
kernels and spikes with no State, jit, shard_map or Runner. NEST runs with
each of ``--nest-threads`` (default: 1 and this process's cores) and
``OMP_WAIT_POLICY=passive``; brainshard and the twin on one JAX device (a
GPU where JAX has one: ``nest --only microcircuit --impls brainshard
--scales 1.0`` is the one-command GPU run of the full microcircuit).

Each measurement is a fresh process (:mod:`benchmarks._nest_children`);
the implementations alternate (A B C D, B C D A, ...), ``--repeats`` rounds
(``--repeats-large`` for CUBA at >= 400 k neurons and the microcircuit at
scale >= 0.5), and the table gives each figure's median over the rounds
and the ratios of brainshard's medians to each other column's. ``--quick``:
the smallest size of each model, one short round.

``--profile``: per model, the twin's step with its parts switched on one at
a time (:mod:`benchmarks._nest_profile`), in a child process each.

Writes ``benchmarks/results/nest.{md,json}`` (``--out``; sections of
earlier runs are kept, this run's replace theirs) and
``nest_profile.{md,json}``; ``--docs`` also replaces the generated table
and profile in docs/nest.md (``--render --docs``: from the stored results,
running nothing). The 1-minute load average is recorded before
every run and stated with the table.

Example (the specs of one section):
  >>> args = parse(['--only', 'brunel', '--brunel-scales', '0.1',
  ...               '--nest-threads', '1,2'])
  >>> [s['column'] for s in cases(args)[0]['specs']]
  ['brainshard', 'twin', 'nest-1', 'nest-2']
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import pathlib
import sys
import tempfile

from benchmarks import _nest_children, _nest_report
from benchmarks._harness import parser

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
# NEST 3.10's limit of connections per virtual process and synapse model
NEST_MAX_PER_VP = 134_217_726
MICROCIRCUIT_SYNAPSES = 299e6  # at scale 1, k-scale 1


def _nest_installed() -> bool:
  return importlib.util.find_spec("nest") is not None


def _microcircuit_missing() -> str | None:
  """Why the microcircuit rows cannot run here, or None."""
  if importlib.util.find_spec("examples.microcircuit.model") is None:
    return "examples.microcircuit.model is not in this checkout"
  return None


def _specs(args, workload: str, size: dict, ms: float, too_many=None):
  """One spec per column: brainshard, the twin, NEST per thread count
  (``too_many(threads)``: why NEST cannot build it, or None)."""
  out = []
  for impl in args.impls:
    base = dict(size, workload=workload, impl=impl, duration_ms=ms,
                warmup_ms=args.warmup)
    if impl != "nest":
      out.append(dict(base, column=impl))
      continue
    for t in args.nest_threads:
      why = too_many(t) if too_many else None
      out.append(dict(base, column=f"nest-{t}", threads=t,
                      **({"skipped": why} if why else {})))
  return out


def cases(args) -> list[dict]:
  """One entry per table section: a label, the specs of its columns, its
  rounds and (for CUBA and NEST) the export to make."""
  out = []
  if "brunel" in args.only:
    for scale in args.brunel_scales:
      ms = 1e3 * (args.brunel_duration or (0.3 if scale >= 0.5 else 1.0))
      n = round(12_500 * scale)
      syn = n * (int(0.1 * round(10_000 * scale)) +
                 int(0.1 * round(2_500 * scale)))
      out.append(dict(
          workload="brunel", size=scale,
          label=f"Brunel A (AI), scale {scale:g}: {n:,} neurons, "
                f"{syn / 1e6:.3g} M synapses, {ms / 1e3:g} s",
          specs=_specs(args, "brunel", dict(scale=scale, regime="AI"), ms),
          export=None, rounds=args.repeats))
  if "microcircuit" in args.only:
    for scale in args.scales:
      large = scale >= 0.5
      ms = 1e3 * (args.mc_duration or (0.1 if large else 0.5))
      syn = MICROCIRCUIT_SYNAPSES * scale * args.k_scale

      def too_many(t, syn=syn):  # NEST refuses Connect beyond its limit
        need = math.ceil(syn / NEST_MAX_PER_VP)
        return (None if t >= need else
                f"NEST 3.10 builds at most {NEST_MAX_PER_VP:,} connections "
                f"per thread and synapse model: {syn / 1e6:.0f} M synapses "
                f"need >= {need} threads")
      out.append(dict(
          workload="microcircuit", size=scale,
          label=f"microcircuit, scale {scale:g}, k-scale {args.k_scale:g}: "
                f"{syn / 1e6:.3g} M synapses, {ms / 1e3:g} s",
          specs=_specs(args, "microcircuit", dict(
              scale=scale, k_scale=args.k_scale), ms, too_many),
          export=None, skip=_microcircuit_missing(),
          rounds=args.repeats_large if large else args.repeats))
  if "cuba" in args.only:
    for n in args.sizes:
      large = n >= 400_000
      ms = 1e3 * (args.duration or (0.2 if large else 1.0))
      out.append(dict(
          workload="cuba", size=n,
          label=f"CUBA, {n:,} neurons, {n * 80 / 1e6:.2g} M synapses, "
                f"{ms / 1e3:g} s",
          specs=_specs(args, "cuba", dict(n=n), ms),
          export=n if "nest" in args.impls else None,
          rounds=args.repeats_large if large else args.repeats))
  return out


def run_case(case: dict, tmp: str) -> dict:
  """The case's runs, interleaved: per column its list of runs; with the
  section's date and the loads before its runs."""
  runs: dict[str, list[dict]] = {s["column"]: [] for s in case["specs"]}
  loads: list[float] = []
  done = dict(label=case["label"], workload=case["workload"],
              size=case.get("size"), runs=runs,
              loads=loads, date=datetime.datetime.now(
                  datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
  if case.get("skip"):
    print(f"{case['label']}: skipped ({case['skip']})", flush=True)
    return dict(done, skip=case["skip"])
  specs = [s for s in case["specs"] if not s.get("skipped")]
  for s in case["specs"]:
    if s.get("skipped"):
      runs[s["column"]].append(dict(impl=s["impl"], skipped=s["skipped"]))
  if case["export"]:
    network = os.path.join(tmp, f"cuba{case['export']}.npz")
    out = _nest_children.in_child(dict(impl="export", n=case["export"],
                                       network=network))
    if "error" in out:
      raise RuntimeError(f"export failed: {out['stderr']}")
    specs = [dict(s, network=network) if s["impl"] == "nest" else s
             for s in specs]
  for r in range(case["rounds"]):
    order = specs[r % len(specs):] + specs[:r % len(specs)]
    for spec in order:
      load = os.getloadavg()[0]
      out = _nest_children.in_child(spec)
      out["load_before"] = load
      loads.append(load)
      runs[spec["column"]].append(out)
      print(_line(case["label"], spec["column"], out), flush=True)
      if "error" in out:
        print(out.get("stderr", ""), file=sys.stderr)
  return done


def _line(label: str, column: str, r: dict) -> str:
  head = f"{label} | {_nest_report.name(column)}: "
  if "error" in r:
    return head + "failed: " + r["error"]
  return head + ", ".join(
      f"{title} {_nest_report.cell(r.get(key), fmt)}"
      for key, title, fmt in _nest_report.FIGURES) + \
      f" (load {r['load_before']:.2f})"


def parse(argv: list[str] | None):
  floats = lambda s: [float(x) for x in s.split(",") if x]  # noqa: E731
  ints = lambda s: [int(float(x)) for x in s.split(",") if x]  # noqa: E731
  ap = parser(__doc__, child=True)
  ap.add_argument("--only", default="brunel,microcircuit,cuba",
                  help="sections: brunel, microcircuit, cuba")
  ap.add_argument("--impls", default="brainshard,twin,nest")
  ap.add_argument("--nest-threads", type=ints, default=None,
                  help="NEST's thread counts, a column each (default: 1 "
                       "and this process's cores)")
  ap.add_argument("--quick", action="store_true",
                  help="the smallest size of each model, one round of "
                       "0.1 s simulated")
  ap.add_argument("--brunel-scales", type=floats, default=[0.1, 1.0],
                  help="Brunel's scales (1: 12,500 neurons)")
  ap.add_argument("--brunel-duration", type=float, default=None,
                  help="Brunel's seconds timed (default 1, 0.3 at >= 0.5)")
  ap.add_argument("--sizes", type=ints, default=[4000, 40_000, 400_000],
                  help="CUBA neurons (80 inputs each)")
  ap.add_argument("--scales", type=floats, default=[0.1, 1.0],
                  help="microcircuit scales (fraction of the neurons; 1.0: "
                       "299 M synapses, which NEST 3.10 builds only with "
                       ">= 3 threads)")
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
                  help="rounds at >= 400 k CUBA neurons and microcircuit "
                       "scale >= 0.5")
  ap.add_argument("--profile", action="store_true",
                  help="also profile each model's step (the twin's parts)")
  ap.add_argument("--profile-only", action="store_true",
                  help="only the profile")
  ap.add_argument("--profile-at", default="",
                  type=lambda s: s.split(","),
                  help="MODEL=SIZE,... (default brunel=1.0,microcircuit=0.1)")
  ap.add_argument("--profile-window", type=float, default=100.0,
                  help="ms of activity per profiled chunk")
  ap.add_argument("--profile-repeats", type=int, default=7)
  ap.add_argument("--threads", type=int, default=None,
                  help=argparse.SUPPRESS)  # older scripts: one count
  ap.add_argument("--out", default="nest",
                  help="results/OUT.md and results/OUT.json")
  ap.add_argument("--render", action="store_true",
                  help="run nothing: the table of the stored results")
  ap.add_argument("--docs", action="store_true",
                  help="also write the table (and profile) into docs/nest.md")
  args = ap.parse_args(argv)
  args.only = set(args.only.split(","))
  args.impls = [i for i in args.impls.split(",")
                if i != "nest" or _nest_installed()]
  cores = len(os.sched_getaffinity(0))
  threads = args.nest_threads or ([args.threads] if args.threads else
                                  sorted({1, cores}))
  args.nest_threads = threads
  if args.quick:
    args.brunel_scales, args.scales = args.brunel_scales[:1], args.scales[:1]
    args.sizes = args.sizes[:1]
    args.repeats = args.repeats_large = 1
    args.brunel_duration = args.mc_duration = args.duration = 0.1
    args.profile_repeats, args.profile_window = 3, 20.0
  return args


def _load_json(path: pathlib.Path) -> list:
  try:
    old = json.loads(path.read_text())
  except (OSError, ValueError):
    return []
  # sections of the format before this one have no workload: dropped
  return [s for s in old if isinstance(s, dict) and "workload" in s]


def main(argv: list[str] | None = None):
  args = parse(argv)
  if args.child:
    spec = json.loads(args.child)
    if spec["impl"] == "profile":  # one model's profile, printed as JSON
      from benchmarks import _nest_profile
      out = _nest_profile.profile(spec["model"], spec["size"],
                                  spec["warmup_ms"], spec["window_ms"],
                                  spec["repeats"])
      print(json.dumps(out))
      return out
    return _nest_children.child_main(args.child)
  RESULTS.mkdir(exist_ok=True)
  out: dict = {}
  if not args.profile_only:
    new = []
    if not args.render:
      with tempfile.TemporaryDirectory() as tmp:
        new = [run_case(case, tmp) for case in cases(args)]
    path = RESULTS / f"{args.out}.json"
    sections = _nest_report.merge(_load_json(path), new)
    table = _nest_report.render(sections,
                                _nest_report.machine(args.nest_threads))
    print(table)
    (RESULTS / f"{args.out}.md").write_text(table)
    path.write_text(json.dumps(sections, indent=1))
    if args.docs:
      _nest_report.write_docs(table)
    out.update(table=table, sections=new)
  profiling = args.profile or args.profile_only
  if profiling or args.render:
    path = RESULTS / f"{args.out}_profile.json"
    new = run_profiles(args) if profiling and not args.render else []
    profiles = [p for p in _load_json_any(path) if p["label"] not in
                {q["label"] for q in new}] + new
    if profiles:
      text = _nest_report.render_profile(profiles)
      print(text)
      path.write_text(json.dumps(profiles, indent=1))
      (RESULTS / f"{args.out}_profile.md").write_text(text)
      if args.docs:
        _nest_report.write_docs(text, "profile")
      out.update(profile=text, profiles=new)
  return out


def run_profiles(args) -> list[dict]:
  """One child per model of ``--only`` that has a profile
  (:mod:`benchmarks._nest_profile`)."""
  from benchmarks import _nest_profile
  at = dict(_nest_profile.DEFAULT_AT, **dict(
      (k, float(v)) for k, v in (x.split("=") for x in args.profile_at if x)))
  out = []
  for model in (m for m in _nest_profile.PROFILED if m in args.only):
    spec = dict(impl="profile", model=model, size=at[model],
                warmup_ms=args.warmup, window_ms=args.profile_window,
                repeats=args.profile_repeats)
    r = _nest_children.in_child(spec)
    if "error" in r:
      r = dict(label=f"{model} {at[model]:g}", error=r["error"])
      print(r.get("error"), file=sys.stderr)
    out.append(r)
  return out


def _load_json_any(path: pathlib.Path) -> list:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError):
    return []
