"""``python -m examples.microcircuit [options]``: builds the scaled
Potjans-Diesmann microcircuit, simulates a warm-up and a measured interval,
prints build time, time per simulated second, and each population's rate
and CV of ISI; saves a raster per population when matplotlib is installed.
Durations are in seconds of simulated time, as in every example
(``nest_reference`` takes NEST's ms).

  python -m examples.microcircuit --scale 0.1 --k-scale 0.1 --devices 1 \\
      --duration 1 --warmup 0.1 --seed 1 --out results/
"""

from __future__ import annotations

import argparse
from pathlib import Path

# The peak RSS as the benchmarks read it: the kernel's VmHWM, not
# getrusage's, which a process started from a larger one inherits.
from benchmarks._harness import clock, peak_rss_mib
from examples import _cli

PROG = "python -m examples.microcircuit"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog=PROG, description="The Potjans & Diesmann (2014) cortical "
      "microcircuit on a brainshard mesh; prints per-population rates, CV "
      "of ISI and speed.")
  p.add_argument("--scale", type=float, default=0.1,
                 help="fraction of the neurons (default: %(default)s)")
  p.add_argument("--k-scale", type=float, default=0.1,
                 help="fraction of the in-degrees, with NEST's DC "
                      "compensation (default: %(default)s)")
  _cli.add_devices(p, 1)
  p.add_argument("--duration", type=float, default=1.0, metavar="S",
                 help="measured simulated time in seconds (default: "
                      "%(default)s)")
  p.add_argument("--warmup", type=float, default=0.1, metavar="S",
                 help="simulated seconds before measuring (default: "
                      "%(default)s)")
  p.add_argument("--seed", type=int, default=1,
                 help="seeds connectivity, initial potentials, background")
  p.add_argument("--out", default=None, metavar="DIR",
                 help="folder for the raster PNG (default: results/)")
  p.add_argument("--progress", action="store_true",
                 help="show a progress bar while simulating")
  return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
  """Runs the example; returns its figures."""
  args = parse_args(argv)
  devices = _cli.use_devices(args.devices, PROG)
  import jax
  from examples.microcircuit import params
  from examples.microcircuit.analysis import population_cv, save_raster
  from examples.microcircuit.model import Microcircuit

  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
  with clock() as build:
    mc = Microcircuit(mesh, args.scale, args.k_scale, seed=args.seed)
    jax.block_until_ready(mc.v.value)
  build_s, build_cpu = build.s, build.cpu_s
  out = mc.run(args.warmup * 1e3, args.duration * 1e3, progress=args.progress)
  cvs = population_cv(out["split"])
  per_s = out["run_s"] / max(out["simulated_s"], 1e-9)
  cpu_per_s = out["cpu_s"] / max(out["simulated_s"], 1e-9)
  print(f"microcircuit, scale {args.scale:g} (k-scale {args.k_scale:g}): "
        f"{mc.layout.n} neurons, {mc.n_synapses} synapses, {len(devices)} "
        f"device(s), exchange every {mc.every} step(s)")
  print(f"  build {build_s:.1f} s ({build_cpu:.1f} CPU-s); warm-up "
        f"{args.warmup:g} s (with compile) {out['warmup_s']:.1f} s; "
        f"{args.duration:g} s measured in "
        f"{out['run_s']:.1f} s = {per_s:.1f} s per simulated second "
        f"({cpu_per_s:.1f} CPU-s)")
  print(f"  peak RSS {peak_rss_mib():.0f} MiB")
  full = args.scale == 1 and args.k_scale == 1
  print(f"  {'population':>10} {'rate (Hz)':>10} {'CV ISI':>7}"
        + (f" {'NEST full':>10}" if full else ""))
  for k, name in enumerate(params.POPULATIONS):
    print(f"  {name:>10} {out['rates'][name]:10.3f} {cvs[name]:7.3f}"
          + (f" {params.FULL_RATES[k]:10.3f}" if full else ""))
  name = f"microcircuit_raster_s{args.scale:g}_k{args.k_scale:g}.png"
  path = Path(args.out) / name if args.out else name
  if save_raster(out["split"], str(path),
                 f"microcircuit, scale {args.scale:g}, seed {args.seed}"):
    print(f"  raster saved to {_cli.output_path(path)}")
  return dict(rates=out["rates"], cv_isi=cvs, build_s=build_s,
              build_cpu_s=build_cpu, cpu_s_per_simulated_s=cpu_per_s,
              warmup_s=out["warmup_s"], run_s=out["run_s"],
              s_per_simulated_s=per_s, peak_rss_mb=peak_rss_mib(),
              neurons=mc.layout.n, synapses=mc.n_synapses,
              devices=len(devices))


if __name__ == "__main__":
  main()
