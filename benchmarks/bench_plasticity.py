"""An STDP network's step against the same network with static synapses.

A recurrent network of ``iaf_psc_exp`` neurons (80 % E, 20 % I) on
Poisson input, ``fixed_indegree`` connectivity, delays of 1-3 ms; in the
plastic variant every E -> E synapse is NEST's ``stdp_synapse`` (its own
index, weights, traces and the post neurons' spike history), everything
else identical (same synapses: a connection is keyed by its place). Both
are built and compiled first, then timed interleaved (static, STDP,
static, ...) ``--repeats`` times; the medians and their ratio print (the
issue's goal: at most 1.5x).

    python -m benchmarks plasticity --neurons 4000 --duration 0.2
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._harness import clock
from benchmarks._harness.devices import fake_devices
from benchmarks._harness.options import parser


def parse_args(argv=None) -> argparse.Namespace:
  p = parser(__doc__, prog="python -m benchmarks plasticity", repeats=5)
  p.add_argument("--neurons", type=int, default=4000,
                 help="neurons in all (default: %(default)s)")
  p.add_argument("--indegree", type=int, default=100,
                 help="synapses onto each neuron (default: %(default)s)")
  p.add_argument("--duration", type=float, default=0.2, metavar="S",
                 help="simulated seconds per timed run (default: %(default)s)")
  p.add_argument("--devices", type=int, default=1,
                 help="devices of the mesh (default: %(default)s)")
  return p.parse_args(argv)


def network(args, plastic: bool):
  import jax
  from brainshard import models as bm
  mesh = jax.make_mesh((args.devices,), ("x",),
                       devices=jax.devices()[:args.devices])
  net = bm.Network(dt=0.1, seed=1, mesh=mesh)
  n_e = int(0.8 * args.neurons)
  E = net.create("iaf_psc_exp", n_e, {"I_e": 200.0})
  I = net.create("iaf_psc_exp", args.neurons - n_e, {"I_e": 200.0})
  noise = net.create("poisson_generator", {"rate": 6000.0})
  net.connect(noise, E + I, None, {"weight": 25.0, "delay": 0.1})
  delay = bm.Uniform(1.0, 3.0)
  k_e, k_i = int(0.8 * args.indegree), args.indegree - int(
      0.8 * args.indegree)
  ee = {"weight": 20.0, "delay": delay}
  if plastic:
    ee.update(synapse_model="stdp_synapse", Wmax=60.0, alpha=1.1,
              mu_plus=0.0, mu_minus=0.0, **{"lambda": 0.01})
  net.connect(E, E, {"rule": "fixed_indegree", "indegree": k_e}, ee)
  net.connect(E, I, {"rule": "fixed_indegree", "indegree": k_e},
              {"weight": 20.0, "delay": delay})
  net.connect(I, E + I, {"rule": "fixed_indegree", "indegree": k_i},
              {"weight": -80.0, "delay": delay})
  sr = net.create("spike_recorder")
  net.connect(E + I, sr)
  return net, sr


def main(argv=None) -> None:
  args = parse_args(argv)
  if args.devices > 1:
    fake_devices(args.devices)  # before JAX starts (network() imports it)
  ms = args.duration * 1000.0
  nets = {}
  for name, plastic in (("static", False), ("stdp", True)):
    net, sr = network(args, plastic)
    with clock() as build:
      net.compile(ms)
      net.simulate(ms)  # warm: the first run places the States
    nets[name] = (net, sr)
    print(f"{name}: built and compiled in {build.s:.1f} s")
  times: dict[str, list[float]] = {"static": [], "stdp": []}
  for _ in range(args.repeats):
    for name, (net, _) in nets.items():
      with clock() as run:
        net.simulate(ms)
      times[name].append(run.s)
  steps = ms / 0.1
  med = {k: float(np.median(v)) for k, v in times.items()}
  for name, (net, sr) in nets.items():
    rate = len(sr.events["times"]) / args.neurons / (net.time / 1000.0)
    print(f"{name:>6}: {med[name] / steps * 1e6:8.1f} us a step (median of "
          f"{args.repeats}; runs {', '.join(f'{t:.2f}' for t in times[name])}"
          f" s), {rate:.1f} Hz")
  stdp_net = nets["stdp"][0]
  print(f"STDP / static: {med['stdp'] / med['static']:.2f}x "
        f"({args.neurons} neurons, {args.indegree} synapses each, "
        f"{args.devices} device(s); inexact updates: "
        f"{stdp_net.plasticity_overflow})")


if __name__ == "__main__":
  main()
