"""The E/I example network at scale: seconds per simulated second and peak
memory for N = 4k, 40k, 400k (and 4M on a GPU), brainshard beside a
hand-written pure-JAX program and a brainstate program with the same
connectivity representation and algorithm; the 8-device spike exchange
every step vs every ``D`` steps (min-delay rule); and, with ``--gpu``,
every GPU row of issues 14 and 16.

``python -m benchmarks scale [--quick]`` (or ``--gpu``) writes
``benchmarks/results/scale.md`` (a markdown table naming the machine, which
docs/scale.md includes) and ``benchmarks/results/scale.png``.
Each measurement runs in its own process, so peak memory is its own
(``VmHWM`` on CPU, the device's peak bytes in use on a GPU); without
``--quick`` each is the fastest of 3 processes run interleaved with the
others of its size.

Example (the child measurement, in-process, tiny):
  >>> r = measure('pure', 'cuba', 400, 5.0)
  >>> r['impl'], r['n'], r['s_per_sim_s'] > 0
  ('pure', 400, True)
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pathlib
import platform
import subprocess
import sys

from benchmarks._harness import device_env, parser, peak_rss_mib

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
IMPLS = ("brainshard", "pure", "brainstate")


def measure(impl: str, model: str, n: int, ms: float, devices: int = 1,
            delay: int = 1, exchange: str = "step",
            connectivity: str = "stored", warm_ms: float | None = None) -> dict:
  """One timed run after a warm-up run (default: of the same length, so
  the timed run compiles nothing) in this process."""
  import jax
  from benchmarks import _ei
  if impl == "pure":
    build_s, run = _ei.pure_run(model, n, connectivity=connectivity)
  elif impl == "brainstate":
    build_s, run = _ei.brainstate_run(model, n, connectivity=connectivity)
  else:
    build_s, run = _ei.brainshard_run(model, n, devices=devices, delay=delay,
                                      exchange=exchange,
                                      connectivity=connectivity)
  ms = max(delay, round(ms / 0.1 / delay) * delay) * 0.1
  warm = ms if warm_ms is None else warm_ms
  t = _ei.time_run(run, ms, warm_ms=warm)
  dev = jax.devices()[0]
  peak = (dev.memory_stats() or {}).get("peak_bytes_in_use") \
      if dev.platform == "gpu" else peak_rss_mib() * 2**20
  return dict(impl=impl, model=model, n=n, devices=devices, delay=delay,
              exchange=exchange, connectivity=connectivity, build_s=build_s,
              s_per_sim_s=t["s_per_sim_s"], peak_bytes=peak,
              platform=dev.platform, **_ei.stats(t["spikes"], 0.1))


def child(argv: list[str], devices: int = 1) -> dict:
  """Runs :func:`measure` in a fresh process (its own peak memory); a run
  that fails (out of memory, a peer not installed) is a row with
  ``error``: the last line of its traceback."""
  env = device_env(devices) if devices > 1 else dict(os.environ)
  root = pathlib.Path(__file__).resolve().parents[1]
  env["PYTHONPATH"] = f"{root}{os.pathsep}{env.get('PYTHONPATH', '')}"
  proc = subprocess.run([sys.executable, "-m", "benchmarks", "scale",
                         "--child", json.dumps(argv)], env=env,
                        capture_output=True, text=True)
  if proc.returncode:
    print(proc.stderr[-2000:], file=sys.stderr)
    last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    case = inspect.signature(measure).bind(*argv)
    case.apply_defaults()
    return dict(case.arguments, error=last[:200])
  return json.loads(proc.stdout.strip().splitlines()[-1])


def plan(gpu: bool, quick: bool) -> list[tuple[int, float]]:
  """(N, simulated ms) per size."""
  if gpu:
    sizes = [(4000, 1000.0), (40_000, 1000.0), (400_000, 200.0),
             (4_000_000, 50.0)]
    return sizes[:2] if quick else sizes
  sizes = [(4000, 1000.0), (40_000, 200.0), (400_000, 50.0)]
  return [(n, ms / 10) for n, ms in sizes[:2]] if quick else sizes


def fastest(cases: list[list], rounds: int, devices: int = 1) -> list[dict]:
  """``rounds`` rounds of one process per case, interleaved (A B C A B C
  ...), keeping each case's fastest run: on a shared machine a slow spell
  then hits every case alike rather than whichever ran during it. A case
  whose first run fails (out of memory, say) is its error row and is not
  run again."""
  best: list[dict | None] = [None] * len(cases)
  for _ in range(rounds):
    for i, argv in enumerate(cases):
      if best[i] is not None and "error" in best[i]:
        continue
      r = child(argv, devices=devices)
      print(_line(r), flush=True)
      if best[i] is None or (
          "error" not in r and r["s_per_sim_s"] < best[i]["s_per_sim_s"]):
        best[i] = r
  return best


def scale_rows(gpu: bool, quick: bool, model: str = "cuba",
               rounds: int = 3) -> list[dict]:
  rows = []
  for n, ms in plan(gpu, quick):
    rows += fastest([[impl, model, n, ms] for impl in IMPLS],
                    1 if quick else rounds)
  return rows


def exchange_rows(quick: bool, delay: int = 10, devices: int = 8,
                  rounds: int = 3) -> list[dict]:
  """8 faked CPU devices: all-gather every step vs every ``delay`` steps."""
  ms = 100.0 if quick else 500.0
  return fastest([["brainshard", "cuba", 4000, ms, devices, delay, exchange]
                  for exchange in ("step", "delay")],
                 1 if quick else rounds, devices=devices)


def _line(r: dict) -> str:
  head = (f"{r['impl']:>10} {r['model']} N={r['n']:>8} dev={r['devices']} "
          f"delay={r['delay']} exchange={r['exchange']}: ")
  if "error" in r:
    return head + "failed: " + r["error"]
  return head + (f"{r['s_per_sim_s']:.3f} s/sim-s, "
                 f"peak {r['peak_bytes'] / 2**20:.0f} MiB, "
                 f"{r['rate_hz']:.2f} Hz, build {r['build_s']:.2f} s")


def machine() -> str:
  import jax
  dev = jax.devices()[0]
  return (f"{platform.node()}: {os.cpu_count()} CPU cores, "
          f"{dev.platform} ({dev.device_kind}), jax {jax.__version__}")


def _labels() -> dict[str, str]:
  """Each implementation's name in the table and the plot."""
  from benchmarks import _peers
  version = _peers.versions().get("brainstate", "(not importable)")
  return {"brainshard": "brainshard", "pure": "pure JAX",
          "brainstate": f"brainstate {version}"}


def markdown(rows: list[dict], ex: list[dict], quick: bool,
             flag: str = "scale") -> str:
  """The table docs/scale.md includes: time and peak memory per size and
  implementation, each time also as a ratio to pure JAX; failed runs are
  listed under it with their error."""
  names = _labels()
  head = ["N"]
  for impl in IMPLS:
    head += [f"{names[impl]} s/sim-s"] + ([] if impl == "pure" else ["/ pure"])
  head += [f"{names[impl]} peak MiB" for impl in IMPLS]
  head += ["rate Hz", "ISI CV", "active"]
  out = [f"Measured by `python -m benchmarks {flag}{' --quick' if quick else ''}`"
         f" on {machine()}.", "", "| " + " | ".join(head) + " |",
         "|" + "---|" * len(head)]
  by = {(r["n"], r["impl"]): r for r in rows if "error" not in r}
  for n in sorted({r["n"] for r in rows}):
    pure = by.get((n, "pure"))
    cells, peaks = [f"{n:,}"], []
    for impl in IMPLS:
      r = by.get((n, impl))
      cells.append(f"{r['s_per_sim_s']:.3f}" if r else "failed")
      if impl != "pure":
        cells.append(f"{r['s_per_sim_s'] / pure['s_per_sim_s']:.2f}"
                     if r and pure else "")
      peaks.append(f"{r['peak_bytes'] / 2**20:.0f}" if r else "")
    ref = by.get((n, "brainshard")) or pure or {}
    stats = [f"{ref[k]:.2f}" if k in ref else "" for k in
             ("rate_hz", "isi_cv", "active")]
    out.append("| " + " | ".join(cells + peaks + stats) + " |")
  failed = [r for r in rows + ex if "error" in r]
  if failed:
    out += ["", "Failed runs:", ""]
    out += [f"- {r['impl']}, N = {r['n']:,}: `{r['error']}`" for r in failed]
  ok = [r for r in ex if "error" not in r]
  if len(ok) == 2:
    s, d = ok
    out += ["", f"Spike exchange, {s['n']:,} neurons on {s['devices']} faked CPU "
            f"devices, delay {d['delay']} steps: every step "
            f"{s['s_per_sim_s']:.3f} s/sim-s, every {d['delay']} steps "
            f"{d['s_per_sim_s']:.3f} s/sim-s "
            f"({s['s_per_sim_s'] / d['s_per_sim_s']:.1f}x faster)."]
  return "\n".join(out) + "\n"


def plot(rows: list[dict], path: pathlib.Path) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(5, 3.5))
  labels = _labels()
  for impl in IMPLS:
    pts = sorted((r["n"], r["s_per_sim_s"]) for r in rows
                 if r["impl"] == impl and "error" not in r)
    if pts:
      ax.loglog(*zip(*pts), "o-", label=labels[impl])
  ax.set_xlabel("neurons")
  ax.set_ylabel("s per simulated second")
  ax.set_title("CUBA, fixed in-degree 80")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def gpu_dispatch() -> None:
  """The dispatch rows (1/10/100/1000 States, default donation, with a
  reference kept, and donate_states=False) of the existing benchmark, and
  which path the calls take (benchmarks/bench_dispatch_probe.py): on a new
  platform, a reference count that does not match shows there first."""
  from benchmarks import bench_dispatch_probe
  from benchmarks.run import main as run_main
  bench_dispatch_probe.main()
  run_main(["--quick", "--only", "dispatch", "--name", "gpu_dispatch"])


def gpu_tasks() -> None:
  """Issue 16's GPU rows: two sub-mesh tasks vs one SPMD program, and how
  much of their device work overlaps (benchmarks/bench_task.py); needs at
  least two GPUs, one per task."""
  import jax
  if len(jax.devices()) < 2:
    print(f"sub-mesh tasks: skipped, {len(jax.devices())} "
          f"{jax.default_backend()} device(s); two tasks need at least 2")
    return
  from benchmarks import bench_task
  bench_task.main([])


def main(argv: list[str] | None = None) -> int:
  ap = parser(__doc__, child=True)
  # `python -m benchmarks --scale` is the older spelling of this command.
  ap.add_argument("--scale", action="store_true", help=argparse.SUPPRESS)
  ap.add_argument("--gpu", action="store_true",
                  help="the GPU rows: dispatch, sizes up to 4M")
  ap.add_argument("--quick", action="store_true", help="small sizes only")
  args = ap.parse_args(argv)
  if args.child:
    print(json.dumps(measure(*json.loads(args.child))))
    return 0
  if args.gpu:
    gpu_dispatch()
    gpu_tasks()
  rows = scale_rows(args.gpu, args.quick)
  ex = [] if args.gpu else exchange_rows(args.quick)
  RESULTS.mkdir(exist_ok=True)
  name = "scale_gpu" if args.gpu else ("scale_quick" if args.quick else "scale")
  text = markdown(rows, ex, args.quick, "scale --gpu" if args.gpu else "scale")
  (RESULTS / f"{name}.md").write_text(text)
  (RESULTS / f"{name}.json").write_text(json.dumps(rows + ex, indent=1))
  try:
    plot(rows, RESULTS / f"{name}.png")
  except ImportError:
    pass
  print(text)
  return 0
