"""``python -m benchmarks brunel-nest``: NEST 3's statistics of Brunel's
model A (``examples.brunel``) over several seeds, the reference
tests/test_brunel.py compares brainshard with; with ``--speed``, the speed
of the example against NEST on one thread.

The network is the example's own code: ``examples.brunel.model.add_brunel``
run on :class:`NestNetwork`, which passes each ``create`` and ``connect``
to NEST's, so both simulators get the same calls. Each seed is a fresh NEST
kernel (``rng_seed``), ``--threads`` threads (NEST's spikes depend on its
thread count); NEST runs in a child process of its own that never imports
JAX, and hands back its spikes as steps; this process computes each
population's mean rate and mean CV of ISI over the measured window with
``bs.firing_rates`` and ``bs.mean_cv_isi``, the functions the test applies
to brainshard's spikes. Writes ``examples/brunel/nest_reference.json``
(``--out``) with the NEST version, scale, window, seeds and date.

``--speed``: the example (``python -m examples.brunel``, build, compile
ahead, then a timed run) and the same network in NEST, each in a fresh
process, alternated for ``--repeats`` rounds; prints build and compile
seconds, wall and CPU seconds per simulated second, and the 1-minute load
average before each run; writes ``benchmarks/results/brunel_speed.json``.

Example (the statistics of two NEST runs' spikes, as the reference holds
them):
  >>> s = stats({'E': ([0, 10, 30, 5], [0, 0, 0, 1], 2)}, steps=1000, dt=0.1)
  >>> s['E']['rate'], round(s['E']['cv'], 3)
  (20.0, 0.333)
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile

from benchmarks._harness import clock, parser, peak_rss_mib

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "examples" / "brunel" / "nest_reference.json"
SPEED = ROOT / "benchmarks" / "results" / "brunel_speed.json"


class NestNetwork:
  """NEST's kernel behind ``bm.Network``'s ``create`` and ``connect``, so
  that ``add_brunel`` builds the same network in NEST."""

  def __init__(self, nest):
    self.nest = nest

  def create(self, model, n=1, params=None, *, label=None):
    if isinstance(n, dict):   # create(model, params), as bm.Network takes
      n, params = 1, n
    return self.nest.Create(model, n, params=params)

  def connect(self, pre, post, conn_spec=None, syn_spec=None):
    self.nest.Connect(pre, post, conn_spec, syn_spec)


def run_nest(regime: str, scale: float, seed: int, *, warmup: float,
             duration: float, threads: int = 1, dt: float = 0.1) -> dict:
  """One NEST run (in this process): each population's spikes in
  ``(warmup, warmup + duration]`` as steps from the window's start and
  indices in the population, and the timings."""
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # NEST's threads spin
  import nest
  import numpy as np
  from examples.brunel.model import add_brunel
  nest.verbosity = nest.VerbosityLevel.ERROR
  nest.ResetKernel()
  nest.set(resolution=dt, rng_seed=int(seed), local_num_threads=threads,
           print_time=False)
  with clock() as build:
    E, I = add_brunel(NestNetwork(nest), regime, scale)
    recorders = {}
    for name, pop in (("E", E), ("I", I)):
      recorders[name] = nest.Create("spike_recorder", params={"start": warmup})
      nest.Connect(pop, recorders[name])
    nest.Prepare()
    nest.Cleanup()
  with clock() as warm:
    nest.Simulate(warmup)
  with clock() as run:
    nest.Simulate(duration)
  out = {"build_s": build.s, "build_cpu_s": build.cpu_s,
         "warmup_s": warm.s, "run_s": run.s, "run_cpu_s": run.cpu_s,
         "peak_rss_mb": peak_rss_mib()}
  for name, pop in (("E", E), ("I", I)):
    ev = recorders[name].get("events")
    # a spike stamped t was emitted in the step ending at t (NEST's times)
    steps = np.rint(np.asarray(ev["times"]) / dt).astype(np.int64) - 1
    out[name] = (steps - round(warmup / dt)).tolist(), (
        np.asarray(ev["senders"]) - pop[0].global_id).tolist(), len(pop)
  return out


def stats(spikes: dict, steps: int, dt: float) -> dict:
  """``{population: {'rate', 'cv'}}`` of ``{population: (steps, neurons,
  n)}`` over a window of ``steps`` steps, with brainshard's functions."""
  import numpy as np
  import brainshard as bs
  out = {}
  for name, (when, who, n) in spikes.items():
    data = bs.SpikeData(np.asarray(when, np.int64), np.asarray(who, np.int32),
                        n, dt)
    out[name] = {"rate": float(bs.firing_rates(data, steps).mean()),
                 "cv": bs.mean_cv_isi(data)}
  return out


def _child(spec: dict) -> None:
  runs = [run_nest(spec["regime"], spec["scale"], seed,
                   warmup=spec["warmup"], duration=spec["duration"],
                   threads=spec["threads"]) for seed in spec["seeds"]]
  assert "jax" not in sys.modules, "a NEST child imported JAX"
  with open(spec["out"], "w") as f:
    json.dump(runs, f)


def in_child(spec: dict) -> list[dict]:
  """:func:`run_nest` for each of ``spec['seeds']`` in a fresh process."""
  with tempfile.TemporaryDirectory() as tmp:
    spec = dict(spec, out=os.path.join(tmp, "runs.json"))
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "brunel-nest", "--child",
         json.dumps(spec)], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
      raise RuntimeError(f"NEST child failed:\n{proc.stderr[-3000:]}")
    with open(spec["out"]) as f:
      return json.load(f)


def reference(args) -> dict:
  """NEST's per-seed statistics of each regime."""
  import importlib.util
  from importlib.metadata import version
  if importlib.util.find_spec("nest") is None:
    sys.exit("brunel-nest needs NEST: pip install nest-simulator")
  dt = 0.1
  steps = round(args.duration / dt)
  out = {"metadata": {
      "what": "Brunel (2000) model A, NEST's brunel_delta_nest example "
              "(examples.brunel.model.add_brunel run in NEST)",
      "nest_version": version("nest-simulator"), "scale": args.scale,
      "neurons": round(12_500 * args.scale), "dt_ms": dt,
      "warmup_ms": args.warmup, "measured_ms": args.duration,
      "window": f"spikes in ({args.warmup:g}, "
                f"{args.warmup + args.duration:g}] ms",
      "seeds": args.seeds, "threads": args.threads,
      "statistics": "per seed: the population's mean rate (Hz) and mean CV "
                    "of ISI over neurons with >= 3 spikes in the window "
                    "(bs.firing_rates, bs.mean_cv_isi)",
      "date": datetime.date.today().isoformat(),
      "machine": f"{platform.machine()}, {os.cpu_count()} cores",
      "command": " ".join(["python -m benchmarks brunel-nest", *args.argv])},
      "regimes": {}}
  for regime in args.regimes:
    runs = in_child(dict(regime=regime, scale=args.scale, seeds=args.seeds,
                         warmup=args.warmup, duration=args.duration,
                         threads=args.threads))
    per = [stats({p: r[p] for p in ("E", "I")}, steps, dt) for r in runs]
    out["regimes"][regime] = {
        p: {"rate": [s[p]["rate"] for s in per],
            "cv": [s[p]["cv"] for s in per]} for p in ("E", "I")}
    e = out["regimes"][regime]["E"]
    print(f"{regime}: E rate {sum(e['rate']) / len(per):.2f} Hz, CV "
          f"{sum(e['cv']) / len(per):.3f} over {len(per)} seeds", flush=True)
  return out


def _load() -> float:
  return os.getloadavg()[0]


def speed(args) -> dict:
  """The example and NEST, alternated in fresh processes."""
  rows = {"brainshard": [], "nest": []}
  code = ("import json, sys\nfrom examples.brunel.__main__ import main\n"
          "print(json.dumps(main(sys.argv[1:])))\n")
  for k in range(args.repeats):
    order = ["brainshard", "nest"] if k % 2 == 0 else ["nest", "brainshard"]
    for impl in order:
      load = _load()
      seed = args.seeds[0]
      if impl == "nest":
        r = in_child(dict(regime=args.regimes[0], scale=args.scale,
                          seeds=[seed], warmup=args.warmup,
                          duration=args.duration, threads=args.threads))[0]
        e = stats({"E": r["E"]}, round(args.duration / 0.1), 0.1)["E"]
        row = {"build_s": r["build_s"], "compile_s": 0.0,
               "s_per_sim_s": r["run_s"] / (args.duration / 1e3),
               "cpu_s_per_sim_s": r["run_cpu_s"] / (args.duration / 1e3),
               "peak_rss_mb": r["peak_rss_mb"], "rate_E": e["rate"],
               "cv_E": e["cv"]}
      else:
        argv = ["--regime", args.regimes[0], "--scale", str(args.scale),
                "--duration", str(args.duration / 1e3), "--warmup",
                str(args.warmup / 1e3), "--seed", str(seed), "--devices", "1"]
        proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT,
                              capture_output=True, text=True)
        if proc.returncode:
          raise RuntimeError(proc.stderr[-3000:])
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        row = {"build_s": r["build_s"], "compile_s": r["compile_s"],
               "s_per_sim_s": r["s_per_simulated_s"],
               "cpu_s_per_sim_s": r["cpu_s_per_simulated_s"],
               "first_spike_s": r["first_spike_s"],
               "peak_rss_mb": r["peak_rss_mb"], "rate_E": r["rates"]["E"],
               "cv_E": r["cv_isi"]["E"]}
      row["load"] = load
      rows[impl].append(row)
      print(impl, json.dumps({k: round(v, 3) for k, v in row.items()
                              if isinstance(v, float)}), flush=True)
  return {"regime": args.regimes[0], "scale": args.scale,
          "warmup_ms": args.warmup, "measured_ms": args.duration,
          "nest_threads": args.threads, "runs": rows}


def dumps(result: dict) -> str:
  """JSON, one line per list of numbers (a seed's values side by side).

  >>> print(dumps({'rate': [1.5, 2.0]}), end='')
  {
   "rate": [1.5, 2.0]
  }
  """
  text = json.dumps(result, indent=1)
  return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]",
                lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
  p = parser(__doc__, repeats=2, child=True)
  p.add_argument("--regimes", default="AI,SI-fast,SR,SI-slow",
                 help="comma-separated regimes (default: %(default)s)")
  p.add_argument("--scale", type=float, default=0.1,
                 help="fraction of the neurons and in-degrees (default: "
                      "%(default)s)")
  p.add_argument("--seeds", type=int, default=10,
                 help="NEST seeds 1..N per regime (default: %(default)s)")
  p.add_argument("--warmup", type=float, default=100.0, metavar="MS",
                 help="ms before measuring (default: %(default)s)")
  p.add_argument("--duration", type=float, default=500.0, metavar="MS",
                 help="measured ms (default: %(default)s)")
  p.add_argument("--threads", type=int, default=1,
                 help="NEST threads (default: %(default)s)")
  p.add_argument("--speed", action="store_true",
                 help="time the example against NEST instead (first regime "
                      "and seed, --repeats rounds)")
  p.add_argument("--out", default=None, metavar="FILE",
                 help=f"where the JSON goes (default: {REFERENCE.relative_to(ROOT)}"
                      f", or {SPEED.relative_to(ROOT)} with --speed)")
  args = p.parse_args(argv)
  args.argv = sys.argv[2:] if argv is None else list(argv)
  if args.child:
    _child(json.loads(args.child))
    return 0
  args.regimes = args.regimes.split(",")
  args.seeds = list(range(1, args.seeds + 1))
  result = speed(args) if args.speed else reference(args)
  path = pathlib.Path(args.out or (SPEED if args.speed else REFERENCE))
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(dumps(result))
  print(f"written to {path}")
  return 0
