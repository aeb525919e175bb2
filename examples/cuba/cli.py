"""The command line: ``python -m examples.cuba [options]`` (``--help``
lists them). Durations are in seconds of simulated time."""

from __future__ import annotations

import argparse
import sys
import time

from examples import _cli
from examples.cuba.params import RATE_RANGE, valid_device_counts

PROG = "python -m examples.cuba"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog=PROG, description="The CUBA/COBA benchmark network (Brette et al. "
      "2007) on a brainshard mesh; prints its mean firing rate and speed.")
  p.add_argument("--model", choices=("cuba", "coba"), default="cuba",
                 help="current- (cuba) or conductance-based (coba) synapses")
  _cli.add_devices(p, None)
  p.add_argument("--duration", type=float, default=1.0, metavar="S",
                 help="simulated time in seconds (default: %(default)s)")
  p.add_argument("--seed", type=int, default=0,
                 help="seeds connectivity and initial conditions")
  p.add_argument("--neurons", type=int, default=4000, metavar="N",
                 help="network size (default: %(default)s)")
  p.add_argument("--in-degree", type=int, default=80, metavar="K",
                 help="presynaptic partners per neuron (weights scale with "
                      "80 / K)")
  p.add_argument("--delay", type=int, default=1, metavar="D",
                 help="synaptic delay in 0.1 ms steps")
  p.add_argument("--connectivity", choices=("stored", "onthefly"),
                 default="stored", help="a stored push index per shard, or "
                 "partners regenerated from the seed every step")
  p.add_argument("--exchange", choices=("step", "delay"), default=None,
                 help="all-gather spikes every step, or every --delay steps "
                      "(default: 'delay' when --delay > 1)")
  p.add_argument("--plot", default=None, metavar="PNG",
                 help="save the raster/rate/voltage figure (a bare file name "
                      "goes into results/)")
  p.add_argument("--progress", action="store_true",
                 help="show a progress bar while simulating")
  p.add_argument("--save", default=None, metavar="DIR",
                 help="save the network's state to DIR at the end")
  p.add_argument("--resume", default=None, metavar="DIR",
                 help="continue from the state saved in DIR (on any number "
                      "of devices)")
  args = p.parse_args(argv)
  args.exchange = args.exchange or ("delay" if args.delay > 1 else "step")
  if args.devices is not None and (
      args.devices < 1 or args.neurons % args.devices):
    sys.exit(f"{PROG}: --devices {args.devices}: the {args.neurons} neurons "
             "must split evenly over the devices; valid device counts: "
             f"{', '.join(map(str, valid_device_counts(args.neurons)))}, ...")
  return args


def _simulate(args, net) -> tuple:
  """Runs ``args.duration``: (runner result or None, spikes, chunk,
  interrupted, steps)."""
  import numpy as np
  if args.exchange == "step":
    runner = net.runner(
        progress=args.model.upper() if args.progress else False)
    res = runner.run(duration=args.duration * 1e3)  # compiles, then runs
    return res, len(res.spikes), runner.loop.chunk, res.interrupted, res.steps
  spikes = net.run(args.duration * 1e3)
  return (None, int(np.sum(spikes)), net.loop().chunk * net.steps_per_call,
          False, spikes.shape[0])


def _restore(args, net) -> float:
  """Restores ``--resume``'s States; the simulated time they are at (ms)."""
  import brainshard as bs
  meta = bs.restore_states(args.resume, net.dynamic_states())
  saved = (meta["model"], meta["seed"], meta["n"])
  if saved != (args.model, args.seed, net.params.n):
    sys.exit(f"{args.resume} holds (model, seed, n) = {saved}, not "
             f"{(args.model, args.seed, net.params.n)}")
  return meta["t_ms"]


def _report(args, net, r: dict) -> None:
  low, high = RATE_RANGE[args.model]
  rate, simulated = r["rate_hz"], r["duration_s"]
  print(f"{args.model.upper()} network, {net.params.n} neurons (in-degree "
        f"{args.in_degree}, {args.connectivity}, delay {args.delay} steps, "
        f"exchange every {net.steps_per_call} step(s)) on {r['devices']} "
        f"device(s), {simulated:g} s simulated"
        f"{' (interrupted)' if r['interrupted'] else ''}")
  print(f"  mean firing rate: {rate:.2f} Hz (reference range "
        f"{low:g}-{high:g} Hz){'' if low <= rate <= high else '  OUT OF RANGE'}")
  print(f"  {r['spikes']} spikes, chunks of {r['chunk']} steps")
  print(f"  build {r['build_s']:.2f} s, run (with compile) {r['run_s']:.2f} s "
        f"= {r['run_s'] / max(simulated, 1e-9):.2f} s per simulated second")


def main(argv: list[str] | None = None) -> dict:
  """Runs the example; returns its figures (rate, times, ...)."""
  args = parse_args(argv)
  devices = _cli.use_devices(args.devices, PROG)
  import jax
  import brainshard as bs
  from examples.cuba.network import EINetwork
  from examples.cuba.plots import save_figure

  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
  t0 = time.perf_counter()
  net = EINetwork(mesh, args.model, seed=args.seed, n=args.neurons,
                  k=args.in_degree, delay=args.delay,
                  connectivity=args.connectivity, exchange=args.exchange)
  jax.block_until_ready(net.v.value)
  build_s = time.perf_counter() - t0
  start_ms = _restore(args, net) if args.resume else 0.0
  t0 = time.perf_counter()
  res, n_spikes, chunk, interrupted, steps = _simulate(args, net)
  run_s = time.perf_counter() - t0
  simulated = steps * net.params.dt * 1e-3
  if args.save:
    end_ms = start_ms + simulated * 1e3
    bs.save_states(args.save, net.dynamic_states(), overwrite=True, metadata={
        "model": args.model, "seed": args.seed, "n": net.params.n,
        "t_ms": end_ms})
    print(f"  state at t = {end_ms:g} ms saved to {args.save}")
  rate = n_spikes / (net.params.n * simulated) if simulated else 0.0
  result = dict(model=args.model, devices=len(devices), duration_s=simulated,
                rate_hz=rate, build_s=build_s, run_s=run_s,
                spikes=n_spikes, chunk=chunk, interrupted=interrupted,
                neurons=args.neurons, in_degree=args.in_degree,
                delay=args.delay, exchange=args.exchange,
                s_per_simulated_s=run_s / simulated if simulated else None)
  _report(args, net, result)
  if args.plot and res is not None and save_figure(
      res, args.plot, f"{args.model.upper()}, {rate:.1f} Hz, "
      f"{len(devices)} device(s)"):
    print(f"  figure saved to {_cli.output_path(args.plot)}")
  return result
