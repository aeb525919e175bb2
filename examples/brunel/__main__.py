"""``python -m examples.brunel [options]``: Brunel's (2000) model A in one
of its four regimes, as NEST's ``brunel_delta_nest`` example builds it.
Builds, compiles ahead, simulates a warm-up and a measured interval, and
prints each population's rate and CV of ISI, the build and compile times,
the wall and CPU seconds per simulated second (never with a compile in
them) and, apart, how long after the command started the first spike was
on the host. Durations are in seconds of simulated time, as in every
example.

  python -m examples.brunel --regime SI-fast --scale 0.1 --duration 1 \\
      --seed 2 --devices 1 --plot brunel.png
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()   # the command's start, for the first spike

import argparse  # noqa: E402

from benchmarks._harness import clock, peak_rss_mib  # noqa: E402
from examples import _cli  # noqa: E402

PROG = "python -m examples.brunel"
REGIMES = ("SR", "SI-fast", "SI-slow", "AI")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog=PROG, description="Brunel (2000) model A, NEST's brunel_delta_nest"
      " example, on a brainshard mesh; prints per-population rates, CV of "
      "ISI and speed.")
  p.add_argument("--regime", choices=REGIMES, default="AI",
                 help="Brunel's Fig. 8: SR (g 3, eta 2), SI-fast (6, 4), "
                      "SI-slow (4.5, 0.9), AI (5, 2) (default: %(default)s)")
  p.add_argument("--scale", type=float, default=0.1,
                 help="fraction of the 12,500 neurons and of the in-degrees;"
                      " J = 0.1 mV / scale (default: %(default)s)")
  p.add_argument("--duration", type=float, default=1.0, metavar="S",
                 help="measured simulated seconds (default: %(default)s)")
  p.add_argument("--warmup", type=float, default=0.1, metavar="S",
                 help="simulated seconds before measuring (default: "
                      "%(default)s)")
  p.add_argument("--seed", type=int, default=1,
                 help="seeds connectivity and the Poisson drive")
  _cli.add_devices(p, 1)
  p.add_argument("--record-to", default=None, metavar="PATH",
                 help="record the spikes to this zarr store instead of "
                      "memory (a bare name goes into results/)")
  p.add_argument("--plot", default=None, metavar="FILE",
                 help="save a raster and rates per population (PNG; a bare "
                      "name goes into results/)")
  return p.parse_args(argv)


def measured(sr, layout, start: int, steps: int):
  """Each population's rate and mean CV of ISI over ``steps`` steps of
  ``sr``'s spikes from step ``start``."""
  import numpy as np
  import brainshard as bs
  from brainshard import models as bm
  s = sr.spikes
  keep = (s.steps >= start) & (s.steps < start + steps)
  window = bs.SpikeData(np.asarray(s.steps)[keep] - start,
                        np.asarray(s.neurons)[keep], s.n, s.dt)
  return (bm.population_firing_rates(window, layout, steps),
          bm.population_cv_isi(window, layout))


def main(argv: list[str] | None = None) -> dict:
  """Runs the example; returns its figures."""
  args = parse_args(argv)
  devices = _cli.use_devices(args.devices, PROG)
  import jax
  from brainshard import models as bm
  from examples.brunel.model import brunel

  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
  warm, ms = args.warmup * 1e3, args.duration * 1e3
  record_to = args.record_to and _cli.output_path(args.record_to)
  with clock() as build:
    net, E, I, sr = brunel(args.regime, args.scale, seed=args.seed,
                           mesh=mesh, record_to=record_to)
    net.build(warm or ms)
  # Both programs now, so that neither simulate below compiles.
  with clock() as compiled:
    if warm:
      net.compile(warm)
    net.compile(ms)
  first_spike = None
  if warm:
    net.simulate(warm)
    if sr.n_events:
      first_spike = time.perf_counter() - STARTED
  with clock() as run:
    net.simulate(ms)
  if first_spike is None and sr.n_events:
    first_spike = time.perf_counter() - STARTED
  start, steps = round(warm / net.dt), round(ms / net.dt)
  rates, cvs = measured(sr, net.layout, start, steps)
  per_s, cpu_per_s = run.s / args.duration, run.cpu_s / args.duration
  print(f"Brunel model A, {args.regime}, scale {args.scale:g}: {net.n_neurons}"
        f" neurons, {int(net.delivery.index.value.count.sum())} synapses, "
        f"{len(devices)} device(s), exchange every {net.exchange_every} "
        f"step(s)")
  print(f"  build {build.s:.1f} s ({build.cpu_s:.1f} CPU-s), compile "
        f"{compiled.s:.1f} s; {args.duration:g} s measured after "
        f"{args.warmup:g} s: {per_s:.2f} s ({cpu_per_s:.2f} CPU-s) per "
        f"simulated second; peak RSS {peak_rss_mib():.0f} MiB")
  if first_spike is None:
    print("  no spike")
  else:
    t0 = float(sr.events["times"][0])
    print(f"  first spike (at {t0:g} ms) on the host {first_spike:.1f} s "
          "after the command started")
  print(f"  {'population':>10} {'rate (Hz)':>10} {'CV ISI':>7}")
  for name in net.layout.names:
    print(f"  {name:>10} {rates[name]:10.3f} {cvs[name]:7.3f}")
  if args.plot and _cli.pyplot(PROG):
    path = _cli.output_path(args.plot)
    fig = bm.plot_populations(
        sr.spikes, net.layout, steps=start + steps, window=(warm, warm + ms),
        max_neurons=100, title=f"Brunel model A, {args.regime}, scale "
        f"{args.scale:g}, seed {args.seed}")
    fig.savefig(path, dpi=120)
    print(f"  plot saved to {path}")
  return dict(rates=rates, cv_isi=cvs, build_s=build.s, compile_s=compiled.s,
              s_per_simulated_s=per_s, cpu_s_per_simulated_s=cpu_per_s,
              first_spike_s=first_spike, peak_rss_mb=peak_rss_mib(),
              neurons=net.n_neurons,
              devices=len(devices), exchange_every=net.exchange_every)


if __name__ == "__main__":
  main()
