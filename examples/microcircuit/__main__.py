"""``python -m examples.microcircuit [options]``: builds the scaled
Potjans-Diesmann microcircuit (``bm.Network``), simulates a warm-up,
compiles the measured run ahead, then simulates it; prints the time to the
first spike (from the process's start), the build and compile times, the
time per simulated second of the measured run (no compile in it), and each
population's rate and CV of ISI. ``--plot`` saves a raster and rates per
population (``bm.plot_populations``), ``--record-to`` writes the measured
run's spikes to a zarr record (``bs.load_records``). Durations are in
seconds of simulated time, as in every example (``nest_reference`` takes
NEST's ms).

  python -m examples.microcircuit --scale 0.1 --k-scale 0.1 --devices 1 \\
      --duration 1 --warmup 0.1 --seed 1 --plot --out results/
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
      "microcircuit on a brainshard mesh (bm.Network, NEST's models); prints "
      "per-population rates, CV of ISI and speed.")
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
  p.add_argument("--background", choices=("poisson", "dc"),
                 default="poisson",
                 help="a poisson_generator per population, or its mean as "
                      "a DC (NEST's poisson_input=False; default: "
                      "%(default)s)")
  p.add_argument("--record-to", default=None, metavar="PATH",
                 help="write the measured run's spikes to a zarr record at "
                      "PATH (read it with bs.load_records; default: memory)")
  p.add_argument("--plot", action="store_true",
                 help="save a raster and rates per population "
                      "(bm.plot_populations; needs matplotlib)")
  p.add_argument("--out", default=None, metavar="DIR",
                 help="folder for the --plot PNG (default: results/)")
  p.add_argument("--progress", action="store_true",
                 help="show a progress bar while simulating")
  return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
  """Runs the example; returns its figures."""
  args = parse_args(argv)
  devices = _cli.use_devices(args.devices, PROG)
  import jax
  from examples.microcircuit import params
  from examples.microcircuit.model import Microcircuit

  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
  started = _cli.seconds_since_start()
  with clock() as build:
    mc = Microcircuit(mesh, args.scale, args.k_scale, seed=args.seed,
                      background=args.background, record_to=args.record_to,
                      progress=args.progress)
  ran = _cli.seconds_since_start()
  out = mc.run(args.warmup * 1e3, args.duration * 1e3)
  per_s = out["run_s"] / max(out["simulated_s"], 1e-9)
  cpu_per_s = out["cpu_s"] / max(out["simulated_s"], 1e-9)
  print(f"microcircuit, scale {args.scale:g} (k-scale {args.k_scale:g}): "
        f"{mc.layout.n} neurons, {mc.n_synapses} synapses, {len(devices)} "
        f"device(s), exchange every {mc.every} step(s), {args.background} "
        "background")
  first = None
  if out["first_spike_s"] is not None:
    first = ran + out["first_spike_s"]
    print(f"  first spike {first:.1f} s after the process started (start-up "
          f"and imports {started:.1f} s, build {build.s:.1f} s, first chunk "
          f"with its compile {out['first_spike_s']:.1f} s)")
  print(f"  build {build.s:.1f} s ({build.cpu_s:.1f} CPU-s); warm-up "
        f"{args.warmup:g} s (with compile) {out['warmup_s']:.1f} s; measured "
        f"run compiled ahead in {out['compile_s']:.1f} s")
  print(f"  {args.duration:g} s measured in {out['run_s']:.1f} s = "
        f"{per_s:.2f} s per simulated second ({cpu_per_s:.2f} CPU-s)")
  print(f"  peak RSS {peak_rss_mib():.0f} MiB")
  full = args.scale == 1 and args.k_scale == 1
  print(f"  {'population':>10} {'rate (Hz)':>10} {'CV ISI':>7}"
        + (f" {'NEST full':>10}" if full else ""))
  for k, name in enumerate(params.POPULATIONS):
    print(f"  {name:>10} {out['rates'][name]:10.3f} {out['cv_isi'][name]:7.3f}"
          + (f" {params.FULL_RATES[k]:10.3f}" if full else ""))
  if args.record_to:
    print(f"  spikes recorded to {args.record_to} (bs.load_records; one "
          "spike_recorder per population)")
  if args.plot:
    _plot(mc, out, args)
  return dict(rates=out["rates"], cv_isi=out["cv_isi"], build_s=build.s,
              build_cpu_s=build.cpu_s, cpu_s_per_simulated_s=cpu_per_s,
              warmup_s=out["warmup_s"], compile_s=out["compile_s"],
              first_spike_s=first, run_s=out["run_s"],
              s_per_simulated_s=per_s, peak_rss_mb=peak_rss_mib(),
              neurons=mc.layout.n, synapses=mc.n_synapses,
              devices=len(devices))


def _plot(mc, out, args) -> None:
  """The first 200 ms of the measured run, one colour per population."""
  plt = _cli.pyplot(PROG)
  if plt is None:
    return
  from brainshard import models as bm
  steps = int(round(out["simulated_s"] * 1e3 / mc.network.dt))
  fig = bm.plot_populations(
      out["spikes"], mc.layout, steps, window=(0.0, 200.0),
      title=f"microcircuit, scale {args.scale:g}, seed {args.seed}")
  name = f"microcircuit_s{args.scale:g}_k{args.k_scale:g}.png"
  path = _cli.output_path(Path(args.out) / name if args.out else name)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  print(f"  plot saved to {path}")


if __name__ == "__main__":
  main()
