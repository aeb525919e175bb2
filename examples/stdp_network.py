"""A recurrent network whose E -> E synapses learn by STDP, beside NEST.

100 excitatory and 25 inhibitory ``iaf_psc_exp`` neurons, driven by
constant currents around their threshold (each its own rate), connected at
random (``fixed_indegree``) with delays of 1-3 ms; the E -> E synapses are
NEST's ``stdp_synapse``. The network runs in ``bs.models.Network`` on
``--devices`` devices, a ``weight_recorder`` and a weight histogram
watching the plastic synapses. Where NEST is installed the same network
(brainshard's own connection table, given to NEST one synapse at a time)
runs in NEST too, and its weight distribution prints beside brainshard's.

    python -m examples.stdp_network --devices 4 --duration 1.0
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np

from examples import _cli

N_E, N_I, DT = 100, 25, 0.1
E_PARAMS = {"I_e": list(np.linspace(372.0, 420.0, N_E)), "tau_minus": 20.0}
I_PARAMS = {"I_e": 360.0}
STDP = {"synapse_model": "stdp_synapse", "weight": 30.0, "Wmax": 90.0,
        "lambda": 0.02, "alpha": 1.2, "mu_plus": 0.0, "mu_minus": 0.0,
        "tau_plus": 20.0}
BINS = np.linspace(0.0, 90.0, 10)


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m examples.stdp_network",
                              description=__doc__.splitlines()[0])
  _cli.add_devices(p, 2)
  p.add_argument("--duration", type=float, default=1.0, metavar="S",
                 help="simulated time in seconds (default: %(default)s)")
  p.add_argument("--float32", action="store_true",
                 help="float32 instead of float64 (NEST's numbers)")
  p.add_argument("--no-nest", action="store_true",
                 help="do not run NEST even where it is installed")
  return p.parse_args(argv)


def run_brainshard(args):
  import jax
  import jax.numpy as jnp
  from brainshard import models as bm
  devices = _cli.use_devices(args.devices, "stdp_network")
  dtype = jnp.float32 if args.float32 else jnp.float64
  if dtype == jnp.float64:
    jax.config.update("jax_enable_x64", True)
  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
  net = bm.Network(dt=DT, seed=7, mesh=mesh, dtype=dtype)
  E = net.create("iaf_psc_exp", N_E, E_PARAMS)
  I = net.create("iaf_psc_exp", N_I, I_PARAMS)
  wr = net.create("weight_recorder", {"senders": E[:10], "targets": E})
  delay = bm.Uniform(1.0, 3.0)
  syn = net.connect(E, E, {"rule": "fixed_indegree", "indegree": 10},
                    {**STDP, "delay": delay, "weight_recorder": wr})
  net.connect(E, I, {"rule": "fixed_indegree", "indegree": 20},
              {"weight": 40.0, "delay": delay})
  net.connect(I, E, {"rule": "fixed_indegree", "indegree": 5},
              {"weight": -60.0, "delay": delay})
  hist = syn.histogram(BINS, interval=100.0)
  sr = net.create("spike_recorder")
  net.connect(E + I, sr)
  net.build()
  before = syn.get()["weight"]
  t0 = time.perf_counter()
  net.simulate(args.duration * 1000.0)
  seconds = time.perf_counter() - t0
  after = syn.get()
  static = bm.synapses(net.delivery.index.value)
  return {"before": before, "after": after, "static": static,
          "hist": hist, "events": wr.events, "spikes": sr.events,
          "seconds": seconds, "overflow": net.plasticity_overflow,
          "devices": len(devices), "dtype": np.dtype(dtype).name}


def run_nest(args, ours):
  """NEST on brainshard's connection table: the same synapses, delays and
  initial weights. Returns the final STDP weights, in ``ours``' order."""
  import nest
  nest.verbosity = nest.VerbosityLevel.ERROR
  nest.ResetKernel()
  nest.resolution = DT
  E = nest.Create("iaf_psc_exp", N_E, params=[
      {"I_e": v, "tau_minus": E_PARAMS["tau_minus"]} for v in E_PARAMS["I_e"]])
  I = nest.Create("iaf_psc_exp", N_I, params=I_PARAMS)
  first = E[0].global_id
  a = ours["after"]
  params = {k: v for k, v in STDP.items() if k not in ("weight",)}
  nest.Connect(a["source"] + first, a["target"] + first, "one_to_one",
               {**params, "weight": ours["before"], "delay": a["delay"]})
  s = ours["static"]
  nest.Connect(s["pre"] + first, s["post"] + first, "one_to_one",
               {"weight": s["weight"].astype(np.float64),
                "delay": s["delay"] * DT})
  sr = nest.Create("spike_recorder")
  nest.Connect(E + I, sr)
  nest.Simulate(args.duration * 1000.0)
  conns = nest.GetConnections(E, E, synapse_model="stdp_synapse").get(
      ["source", "target", "weight", "delay"])
  src = np.asarray(conns["source"]) - first
  tgt = np.asarray(conns["target"]) - first
  # NEST's order is not brainshard's: match synapse by synapse (source,
  # target and delay; a pair connected twice with one delay learns alike)
  theirs = np.lexsort((np.round(np.asarray(conns["delay"]) / DT), tgt, src))
  mine = np.lexsort((np.round(a["delay"] / DT), a["target"], a["source"]))
  w = np.empty(len(src))
  w[mine] = np.asarray(conns["weight"])[theirs]
  return w, len(sr.events["times"])


def show(name, weights):
  counts, _ = np.histogram(weights, BINS)
  print(f"  {name:<18} mean {weights.mean():7.3f}  "
        + " ".join(f"{c:4d}" for c in counts))


def main(argv=None) -> None:
  args = parse_args(argv)
  ours = run_brainshard(args)
  n_spikes = len(ours["spikes"]["times"])
  print(f"stdp_network: {N_E} E + {N_I} I neurons, {len(ours['before'])} "
        f"STDP synapses, {args.duration:g} s on {ours['devices']} device(s) "
        f"({ours['dtype']}) in {ours['seconds']:.2f} s; {n_spikes} spikes "
        f"({n_spikes / (N_E + N_I) / args.duration:.1f} Hz), "
        f"{len(ours['events']['times'])} weight_recorder events, "
        f"inexact updates: {ours['overflow']}")
  print("E -> E weight distribution (bins "
        + ", ".join(f"{b:g}" for b in BINS) + " pA):")
  show("before", ours["before"])
  show("after (brainshard)", ours["after"]["weight"])
  print("  the histogram over time (every 100 ms):")
  for t, c in zip(ours["hist"].times, ours["hist"].counts):
    print(f"    t = {t:6.0f} ms  " + " ".join(f"{v:4d}" for v in c))
  if args.no_nest:
    return
  if importlib.util.find_spec("nest") is None:
    print("NEST is not installed (pip install nest-simulator): brainshard's "
          "numbers only.")
    return
  w, nest_spikes = run_nest(args, ours)
  show("after (NEST)", w)
  diff = np.abs(w - ours["after"]["weight"])
  rel = diff / np.maximum(np.abs(w), 1e-300)
  print(f"NEST: {nest_spikes} spikes (brainshard: {n_spikes}); largest weight "
        f"difference {diff.max():.3g} pA, {rel.max():.3g} relative")


if __name__ == "__main__":
  main()
