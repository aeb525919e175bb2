"""One measurement of ``python -m benchmarks nest``, in a process of its own.

A *spec* (a JSON-able dict) names the workload (``'cuba'``,
``'microcircuit'`` or ``'brunel'``), the implementation (``'brainshard'``,
``'twin'``: the hand-written pure-JAX program of the same kernels,
``_ei.pure_block_run``, ``_microcircuit_twin`` or ``_network_twin``;
``'nest'``, with ``threads``) and the size. :func:`measure` runs it in this
process: builds, simulates a warm-up (brainshard and the twin compile
there), then times a run and reports build seconds, seconds and CPU
seconds per simulated second, synaptic events per simulated second (the
rate times the recurrent synapses: every spike of a neuron reaches its
synapses), the process's own peak RSS (``VmHWM``, read before it exits),
the mean rate, and when the warm-up's spikes were on the host
(``first_spike_at``, the epoch). :func:`in_child` runs :func:`measure` in a
fresh process and adds the child's whole CPU time (user + sys, from the
parent's ``RUSAGE_CHILDREN``) and ``first_spike_s``, from the launch of the
child's command to the first spike on the host: each process then has its
own peak memory, and NEST's global kernel and JAX's thread pools never
share one. A NEST child never imports JAX (the CUBA network comes from an
``.npz`` that an ``'export'`` child wrote).

Example (the twin at a tiny size, in this process):
  >>> r = measure(dict(workload='cuba', impl='twin', n=400, duration_ms=20.0,
  ...                  warmup_ms=10.0))
  >>> r['impl'], r['s_per_sim_s'] > 0, r['jax_imported'], r['n_synapses']
  ('twin', True, True, 32000)
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import time

import numpy as np

from benchmarks._harness import clock, peak_rss_mib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# NEST 3.10 spends ~31 KB per neuron connected to a spike recorder (1.2 GB
# for 40,000, measured): above this many neurons it records an evenly
# spread sample of about this many, and the rate is the sample's.
NEST_RECORD_CAP = 40_000


def record_every(n: int) -> int:
  """Record every this many neurons in NEST (1 up to the cap).

  >>> record_every(40_000), record_every(400_000), record_every(77_169)
  (1, 10, 2)
  """
  return -(-n // NEST_RECORD_CAP)


def _cuba(spec: dict):
  """``(build_s, neurons recorded, synapses, run(ms) -> their spike
  count)`` of the CUBA network."""
  n, k, seed, delay = spec["n"], spec.get("k", 80), spec.get("seed", 0), \
      spec.get("delay", 2)
  impl = spec["impl"]
  if impl == "nest":
    from benchmarks import _nest_cuba
    net = dict(np.load(spec["network"])) if spec.get("network") else None
    every = record_every(n)
    build_s, run = _nest_cuba.nest_run("cuba", n, k, seed, delay,
                                       spec.get("threads"), network=net,
                                       record_every=every)
    return (build_s, len(range(0, n, every)), n * k,
            lambda ms: run(ms, raster=False))
  if impl == "twin":
    from benchmarks import _ei
    build_s, run = _ei.pure_block_run("cuba", n, k, delay=delay, seed=seed)
    return build_s, n, n * k, lambda ms: run(ms, raster=False)
  import jax
  from examples import cuba
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  with clock() as build:
    net = cuba.EINetwork(mesh, "cuba", seed=seed, n=n, k=k, delay=delay,
                         exchange="delay")
    jax.block_until_ready(net.v.value)

  def run(ms):  # EINetwork.run, counting instead of keeping the raster
    calls = int(round(ms / net.params.dt)) // net.steps_per_call
    return sum(int(np.asarray(c.out).sum())
               for c in net.loop(1000).iterate(calls))

  return build.s, n, n * k, run


def _microcircuit(spec: dict):
  """``(build_s, neurons recorded, synapses, run(ms) -> their spike
  count)`` of the microcircuit at ``scale`` / ``k_scale``."""
  scale, k_scale, seed = spec["scale"], spec["k_scale"], spec.get("seed", 1)
  if spec["impl"] == "nest":
    return _microcircuit_nest(scale, k_scale, seed, spec.get("threads"))
  if spec["impl"] == "twin":
    from benchmarks import _microcircuit_twin
    build_s, run = _microcircuit_twin.twin_run(scale, k_scale, seed)
    return (build_s, run.net["layout"].n, run.net["n_synapses"],
            lambda ms: int(run(ms)[1].size))
  import jax
  from examples.microcircuit import model
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  with clock() as build:  # the network, built (its arrays ready)
    mc = model.Microcircuit(mesh, n_scale=scale, k_scale=k_scale, seed=seed)
  net = mc.network

  def run(ms):  # chunks of 500 steps: the warm-up compiled the program
    net.runner.reset_records()
    net.simulate(ms)
    return sum(rec.n_events for rec in mc.recorders.values())

  return build.s, mc.layout.n, mc.n_synapses, run


def _microcircuit_nest(scale, k_scale, seed, threads):
  """The microcircuit as ``examples.microcircuit.nest_reference`` builds it
  (NEST's own connection rules), timed run by run."""
  from benchmarks import _nest_cuba
  from examples.microcircuit import nest_reference as ref, params
  nest = _nest_cuba.import_nest()
  nest.ResetKernel()
  dt = 0.1
  nest.set(resolution=dt, rng_seed=int(seed), print_time=False,
           local_num_threads=threads or len(os.sched_getaffinity(0)))
  net = params.scaled(scale, k_scale)
  with clock() as build:
    pops = ref._populations(nest, net)
    ref._connect(nest, net, pops, dt)
    recorders = nest.Create("spike_recorder", n=len(pops))
    every = record_every(int(net.neurons.sum()))
    for pop, rec in zip(pops, recorders):
      nest.Connect(pop[::every], rec)
    nest.Prepare()
  recorded = sum(len(pop[::every]) for pop in pops)
  # NEST's connections less the devices': a poisson_generator to every
  # neuron, and the recorded neurons to their recorders
  synapses = (int(nest.GetKernelStatus("num_connections"))
              - int(net.neurons.sum()) - recorded)
  seen = [0]

  def run(ms):
    nest.Run(ms)
    total = int(sum(recorders.get("n_events")))
    new, seen[0] = total - seen[0], total
    return new

  return build.s, recorded, synapses, run


def _brunel(spec: dict):
  """``(build_s, neurons recorded, synapses, run(ms) -> their spike
  count)`` of Brunel's model A (:mod:`benchmarks._nest_brunel`)."""
  from benchmarks import _nest_brunel
  return {"brainshard": _nest_brunel.brunel_brainshard,
          "twin": _nest_brunel.brunel_twin,
          "nest": _nest_brunel.brunel_nest}[spec["impl"]](spec)


BUILDERS = {"cuba": _cuba, "microcircuit": _microcircuit, "brunel": _brunel}


def measure(spec: dict) -> dict:
  """Builds, warms up (``warmup_ms``) and times ``duration_ms`` of the
  workload ``spec`` names, in this process."""
  build_s, n, synapses, run = BUILDERS[spec["workload"]](spec)
  with clock() as warm:
    first = run(spec.get("warmup_ms", 100.0))
  # the warm-up is the first simulate: its spikes are on the host now
  first_spike_at = time.time() if first else None
  ms = spec["duration_ms"]
  with clock() as timed:
    spikes = run(ms)
  if first_spike_at is None and spikes:
    first_spike_at = time.time()
  rate = spikes / n / ms * 1e3
  return dict(impl=spec["impl"], build_s=build_s, warmup_s=warm.s,
              s_per_sim_s=timed.s / ms * 1e3,
              cpu_s_per_sim_s=timed.cpu_s / ms * 1e3,
              peak_rss_mb=peak_rss_mib(), rate_hz=rate,
              n_synapses=synapses, syn_events_per_sim_s=rate * synapses,
              first_spike_at=first_spike_at, recorded=n,
              threads=spec.get("threads"),
              jax_imported="jax" in sys.modules)


def export(spec: dict) -> dict:
  """Writes the CUBA network (``_nest_cuba.export_network``) to
  ``spec['network']`` for the NEST children."""
  from benchmarks import _nest_cuba
  np.savez(spec["network"], **_nest_cuba.export_network(
      "cuba", spec["n"], spec.get("k", 80), spec.get("seed", 0)))
  return dict(impl="export", network=spec["network"])


def in_child(spec: dict) -> dict:
  """:func:`measure` (or :func:`export`) in a fresh process; adds
  ``child_cpu_s`` (user + sys of the whole child: import, build, compile,
  warm-up and run), ``child_wall_s`` and ``first_spike_s`` (from the
  command's launch; None without a spike). A failed child is a row with
  ``error`` (the last line of its stderr)."""
  env = dict(os.environ, OMP_WAIT_POLICY="passive")
  env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
  cmd = [sys.executable, "-m", "benchmarks", "nest", "--child",
         json.dumps(spec)]
  # The child's CPU from the kernel's account of waited-for children (CPU
  # seconds add up; its memory it reports itself, above).
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  launched = time.time()  # the child reports its first spike on this clock
  with clock() as child:
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True,
                          text=True, check=False)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if proc.returncode:
    lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
    # the exception's line, not JAX's note on filtered frames under it
    errors = [ln for ln in lines if "Error" in ln.split(":")[0]]
    return dict(impl=spec["impl"], error=(errors or lines)[-1][:300],
                stderr=proc.stderr[-3000:])
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  out["child_cpu_s"] = (after.ru_utime - before.ru_utime
                        + after.ru_stime - before.ru_stime)
  out["child_wall_s"] = child.s
  if out.get("first_spike_at") is not None:
    out["first_spike_s"] = out["first_spike_at"] - launched
  return out


def child_main(spec_json: str) -> dict:
  """The ``--child`` entry point: prints the result as one JSON line."""
  spec = json.loads(spec_json)
  out = export(spec) if spec["impl"] == "export" else measure(spec)
  print(json.dumps(out))
  return out
