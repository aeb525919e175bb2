"""The scaled microcircuit in NEST 3, for side-by-side checks and timings.

Builds the network ``params.scaled`` describes with NEST's own rules
(``fixed_total_number`` recurrent synapses, weights and delays from normals
redrawn into range, one Poisson generator per population), runs a warm-up
and a measured interval, and returns per-population rates, the CV of the
inter-spike intervals, build and simulation times.

Run it in its own process (``python -m examples.microcircuit.nest_reference
--seed 1``): NEST's kernel is global, and ``OMP_WAIT_POLICY=passive`` must be
set before NEST starts its threads (without it two NEST threads spin and run
4-12x slower on a shared machine).

Example (where NEST is installed):
  >>> from examples.microcircuit.nest_reference import run_nest
  >>> out = run_nest(n_scale=0.02, k_scale=0.02, seed=1, t_presim=50.0,
  ...                t_sim=100.0)  # doctest: +SKIP
  >>> sorted(out)  # doctest: +SKIP
  ['build_s', 'cv_isi', 'rates', 'sim_s', 'spikes_total']
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from examples.microcircuit import params as P


def _redraw(nest, mean, std, low=None, high=None):
  return nest.math.redraw(nest.random.normal(mean=mean, std=std),
                          min=-np.inf if low is None else low,
                          max=np.inf if high is None else high)


def _populations(nest, net):
  pops = []
  for i, n in enumerate(net.neurons):
    pop = nest.Create("iaf_psc_exp", int(n))
    p = P.NEURON
    pop.set(tau_syn_ex=p["tau_syn"], tau_syn_in=p["tau_syn"], E_L=p["E_L"],
            V_th=p["V_th"], V_reset=p["V_reset"], C_m=p["C_m"],
            tau_m=p["tau_m"], t_ref=p["t_ref"], I_e=float(net.dc[i]))
    pop.set(V_m=nest.random.normal(mean=float(P.V0_MEAN[i]), std=float(P.V0_STD[i])))
    pops.append(pop)
  return pops


def _connect(nest, net, pops, dt):
  for i, target in enumerate(pops):
    for j, source in enumerate(pops):
      if net.synapses[i, j] <= 0:
        continue
      w = float(net.weight_mean[i, j])
      d = float(net.delay_mean[i, j])
      nest.Connect(source, target,
                   conn_spec={"rule": "fixed_total_number",
                              "N": int(net.synapses[i, j])},
                   syn_spec={"synapse_model": "static_synapse",
                             "weight": _redraw(nest, w, abs(w) * P.WEIGHT_REL_STD,
                                               *((0.0, None) if w > 0 else (None, 0.0))),
                             "delay": _redraw(nest, d, d * P.DELAY_REL_STD, low=0.5 * dt)})
    poisson = nest.Create("poisson_generator",
                          params={"rate": P.BG_RATE * float(net.k_ext[i])})
    nest.Connect(poisson, target, syn_spec={"weight": net.weight_ext,
                                            "delay": P.DELAY_POISSON})


def _cv_isi(times, senders):
  """Mean over neurons with >= 3 spikes of std/mean of their intervals."""
  order = np.lexsort((times, senders))
  t, s = times[order], senders[order]
  cvs = []
  for ids in np.split(np.arange(len(s)), np.flatnonzero(np.diff(s)) + 1):
    if len(ids) >= 3:
      isi = np.diff(t[ids])
      cvs.append(isi.std() / isi.mean())
  return float(np.mean(cvs)) if cvs else float("nan")


def run_nest(n_scale: float = 0.1, k_scale: float = 0.1, seed: int = 1, *,
             t_presim: float = 500.0, t_sim: float = 1000.0, dt: float = 0.1,
             threads: int | None = None) -> dict:
  """Builds and runs the scaled microcircuit in NEST; rates and CVs are
  measured over ``[t_presim, t_presim + t_sim)`` ms."""
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")
  import nest  # pylint: disable=import-outside-toplevel
  nest.verbosity = nest.VerbosityLevel.ERROR
  nest.ResetKernel()
  nest.set(resolution=dt, rng_seed=int(seed), print_time=False,
           local_num_threads=threads or len(os.sched_getaffinity(0)))
  net = P.scaled(n_scale, k_scale)
  start = time.perf_counter()
  pops = _populations(nest, net)
  _connect(nest, net, pops, dt)
  recorders = nest.Create("spike_recorder", n=len(pops), params={"start": t_presim})
  for pop, rec in zip(pops, recorders):
    nest.Connect(pop, rec)
  nest.Prepare()
  nest.Cleanup()
  build_s = time.perf_counter() - start
  start = time.perf_counter()
  nest.Simulate(t_presim + t_sim)
  sim_s = time.perf_counter() - start
  rates, cvs, total = [], [], 0
  for pop, rec in zip(pops, recorders):
    ev = rec.get("events")
    times, senders = np.asarray(ev["times"]), np.asarray(ev["senders"])
    total += len(times)
    rates.append(len(times) / len(pop) / (t_sim / 1000.0))
    cvs.append(_cv_isi(times, senders))
  return {"rates": dict(zip(P.POPULATIONS, rates)),
          "cv_isi": dict(zip(P.POPULATIONS, cvs)),
          "build_s": build_s, "sim_s": sim_s, "spikes_total": total}


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(
      prog="python -m examples.microcircuit.nest_reference",
      description="Run the scaled Potjans-Diesmann microcircuit in NEST and "
                  "print per-population rates (JSON).")
  parser.add_argument("--scale", type=float, default=0.1, help="fraction of the neurons")
  parser.add_argument("--k-scale", type=float, default=0.1, help="fraction of the in-degrees")
  parser.add_argument("--seed", type=int, default=1, help="NEST's rng_seed")
  parser.add_argument("--warmup", type=float, default=500.0, help="ms before measuring")
  parser.add_argument("--duration", type=float, default=1000.0, help="measured ms")
  parser.add_argument("--threads", type=int, default=None, help="NEST threads (default: cores)")
  parser.add_argument("--write", type=int, default=0, metavar="SEEDS",
                      help="run seeds 1..SEEDS and write their rates to "
                           "nest_reference.json beside this module (the "
                           "reference tests/test_microcircuit.py compares "
                           "with)")
  args = parser.parse_args(argv)
  if args.write:
    return write_reference(args, range(1, args.write + 1))
  out = run_nest(args.scale, args.k_scale, args.seed, t_presim=args.warmup,
                 t_sim=args.duration, threads=args.threads)
  print(json.dumps(out, indent=1))
  return out


REFERENCE = os.path.join(os.path.dirname(__file__), "nest_reference.json")


def write_reference(args, seeds) -> dict:
  """NEST's per-seed rates of one configuration, written to
  :data:`REFERENCE` with the configuration and NEST's version."""
  import nest
  out = dict(nest=nest.__version__, scale=args.scale, k_scale=args.k_scale,
             warmup_ms=args.warmup, measured_ms=args.duration,
             seeds=list(seeds),
             rates=[run_nest(args.scale, args.k_scale, s,
                             t_presim=args.warmup, t_sim=args.duration,
                             threads=args.threads)["rates"] for s in seeds])
  with open(REFERENCE, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
  return out


if __name__ == "__main__":
  main()
