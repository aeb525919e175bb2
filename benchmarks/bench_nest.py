"""NEST 3.10 as a peer for the CUBA / COBA example (examples.cuba) on the
SAME network: the example's connectivity table, initial conditions and
parameters, exported to NEST (``iaf_psc_exp`` / ``iaf_cond_exp``).

How the example's conventions map onto NEST's (see docs/nest.md):

- delay: the example's ``--delay D`` (steps) is NEST's ``(D - 1) * dt`` ms.
  NEST stamps a threshold crossing in the update from t to t+h with t+h and
  adds the weight to the target's current at stamp + delay, *after* that
  update's membrane step; the example adds arrivals *before* the membrane
  step. So NEST's smallest delay, one step, is the example's ``--delay 2``,
  and the example's ``--delay 1`` has no NEST equivalent.
- refractoriness: NEST holds V for ``round(t_ref / h)`` steps after a spike,
  the example (like Brian2) for ``ref_steps - 1``; NEST gets
  ``t_ref - dt`` (4.9 ms for the example's 5 ms).
- units (CUBA): with ``C_m = tau_m`` (pF, ms) a current of x pA moves v as
  an input of x mV does in the example, so the weights are the example's mV.
  COBA: ``g_L = 1 nS``, ``C_m = tau_m`` pF, conductances in nS = the
  example's units of the leak conductance, ``I_e = drive`` pA.

Run NEST in its own process where timings matter: its kernel is global,
and ``OMP_WAIT_POLICY=passive`` must be set before ``import nest`` (without
it NEST's threads spin and run 4-12x slower on a shared machine).
``python -m benchmarks.bench_nest --neurons 4000 --duration 1 --threads 2``
times NEST and brainshard in interleaved child processes.

Example (the NEST network, built and run 1 ms):
  >>> import pytest; nest = pytest.importorskip('nest')  # doctest: +SKIP
  >>> build_s, run = nest_run('cuba', 400)  # doctest: +SKIP
  >>> run(1.0).shape  # doctest: +SKIP
  (10, 400)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import _ei


def nest_delay_ms(delay_steps: int, dt: float = 0.1) -> float:
  """NEST's delay (ms) for the example's ``--delay`` (steps): one step less.

  >>> nest_delay_ms(2)
  0.1
  """
  if delay_steps < 2:
    raise ValueError(f"the example's --delay {delay_steps} has no NEST "
                     "equivalent: NEST's smallest delay (one step) is the "
                     "example's --delay 2")
  return round((delay_steps - 1) * dt, 10)


def nest_params(p) -> dict:
  """The NEST neuron parameters of the example's ``cuba.Params``.

  >>> from examples import cuba
  >>> nest_params(cuba.Params())['t_ref']
  4.9
  """
  # NEST holds V for round(t_ref / h) steps, the example for ref_steps - 1.
  t_ref = round((p.ref_steps - 1) * p.dt, 10)
  common = dict(E_L=p.el, V_th=p.v_th, V_reset=p.v_reset, t_ref=t_ref,
                tau_syn_ex=p.taue, tau_syn_in=p.taui)
  if p.model == "cuba":  # C_m = tau_m: pA / pF * ms = mV
    return dict(common, C_m=p.taum, tau_m=p.taum, I_e=0.0)
  # g_L = 1 nS and C_m = tau_m pF give tau_m ms; conductances in nS.
  return dict(common, C_m=p.taum, g_L=1.0, E_ex=p.e_exc, E_in=p.e_inh,
              I_e=p.drive)


def _import_nest():
  """``nest``, quiet, with passive OpenMP waiting (only effective if NEST
  was not imported before in this process)."""
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")
  import nest  # pylint: disable=import-outside-toplevel
  if hasattr(nest, "VerbosityLevel"):  # NEST >= 3.9
    nest.verbosity = nest.VerbosityLevel.ERROR
  else:
    nest.set_verbosity("M_ERROR")
  return nest


def _table(p, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """The example's fixed in-degree table as (pre, post) arrays, row-major:
  post neuron by post neuron, slot by slot (global ids from 0)."""
  import jax.numpy as jnp
  from brainshard import models as bm
  pre = np.asarray(bm.hashed_presynaptic(jnp.arange(p.n), p.k, n=p.n, n_exc=p.n_exc,
                                  k=p.k, seed=seed))
  post = np.repeat(np.arange(p.n), p.k).reshape(p.n, p.k)
  return pre, post


def _initial(p, seed: int) -> dict:
  """The example's initial conditions (``EINetwork.reset``), as float64 of
  its float32 draws."""
  import brainshard as bs
  rng = bs.RandomState(seed)
  f = lambda x: np.asarray(x, np.float32).astype(np.float64)  # noqa: E731
  if p.model == "cuba":
    return dict(V_m=f(rng.uniform(p.v_reset, p.v_th, size=p.n)))
  return dict(V_m=f(rng.normal(-55.0, 5.0, size=p.n)),
              g_ex=f(rng.normal(4.0, 1.5, size=p.n)),
              g_in=f(rng.normal(20.0, 12.0, size=p.n)))


def export_network(model: str = "cuba", n: int = 4000, k: int = 80,
                   seed: int = 0) -> dict:
  """The example's connectivity table (``pre``, ``post``: ``[n, k]`` global
  ids from 0) and initial conditions (NEST's state names), as NumPy
  arrays; ``np.savez`` them to build in a process without JAX."""
  from examples import cuba
  p = cuba.Params(model=model, n=n, k=k)
  pre, post = _table(p, seed)
  return dict(pre=pre, post=post, **_initial(p, seed))


def _build(nest, p, net: dict, delay_ms: float, overrides: dict | None):
  """Creates and connects the network in NEST's (reset) kernel; returns
  the neurons and their spike recorder."""
  cell = "iaf_psc_exp" if p.model == "cuba" else "iaf_cond_exp"
  neurons = nest.Create(cell, p.n, params=dict(nest_params(p),
                                               **(overrides or {})))
  neurons.set({key: list(net[key]) for key in ("V_m", "g_ex", "g_in")
               if key in net})
  # Weights carry the sign: NEST routes negative ones to the inhibitory
  # synapse (gi = -wi for COBA, whose example weight wi is positive).
  pre, post = np.asarray(net["pre"]), np.asarray(net["post"])
  wi = p.wi if p.model == "cuba" else -p.wi
  weight = np.where(pre < p.n_exc, p.we, wi).astype(np.float64).ravel()
  first = neurons[0].global_id  # NEST's ids start at 1
  nest.Connect(pre.ravel() + first, post.ravel() + first, "one_to_one",
               syn_spec={"weight": weight,
                         "delay": np.full(weight.size, delay_ms)})
  rec = nest.Create("spike_recorder")
  nest.Connect(neurons, rec)
  return neurons, rec


def nest_run(model: str = "cuba", n: int = 4000, k: int = 80, seed: int = 0,
             delay_steps: int = 2, threads: int | None = None, *,
             network: dict | None = None, delay_ms: float | None = None,
             overrides: dict | None = None):
  """The example's network (``cuba.EINetwork(model, seed, n, k,
  delay=delay_steps)``) in NEST; returns ``(build_s, run(ms) -> spikes
  [steps, n])`` on the example's step grid (row t: spikes of the update
  from t*dt to (t+1)*dt). Resets NEST's kernel. ``network``: what
  :func:`export_network` gives (else it is exported here, with JAX);
  ``build_s`` counts NEST's Create, Connect and Prepare, not the export.
  ``delay_ms`` and ``overrides`` (neuron parameters) replace the mapped
  values: the tests use them to show that unmapped ones give other spikes.

  >>> nest_run('cuba', 400, delay_steps=1)  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ValueError: the example's --delay 1 has no NEST equivalent: ...
  """
  from examples import cuba
  p = cuba.Params(model=model, n=n, k=k, delay=delay_steps)
  if delay_ms is None:
    delay_ms = nest_delay_ms(delay_steps, p.dt)
  net = network if network is not None else export_network(model, n, k, seed)
  nest = _import_nest()
  nest.ResetKernel()
  nest.set(resolution=p.dt, print_time=False, rng_seed=seed + 1,
           local_num_threads=threads or len(os.sched_getaffinity(0)))
  t0 = time.perf_counter()
  neurons, rec = _build(nest, p, net, delay_ms, overrides)
  first = neurons[0].global_id
  nest.Prepare()  # NEST's own build work (its indices), counted in build_s
  build_s = time.perf_counter() - t0
  done = [0]  # steps run

  def run(duration_ms: float) -> np.ndarray:
    steps = int(round(duration_ms / p.dt))
    nest.Run(steps * p.dt)
    # The recorder keeps every event (it cannot be cleared inside
    # Prepare/Cleanup), in no promised order: select this run's by time.
    ev = rec.get("events")
    times, senders = np.asarray(ev["times"]), np.asarray(ev["senders"])
    # NEST stamps a spike of the update from t to t+h with t+h.
    t = np.round(times / p.dt).astype(int) - 1 - done[0]
    keep = (t >= 0) & (t < steps)
    out = np.zeros((steps, n), bool)
    out[t[keep], senders[keep] - first] = True
    done[0] += steps
    return out

  return build_s, run


def _usage() -> tuple[float, float]:
  """(CPU seconds, peak RSS in MB) of this process so far. The peak is
  /proc's VmHWM where there is one: ``getrusage``'s ``ru_maxrss`` survives
  ``execve``, so a child would report its parent's peak if that is higher."""
  r = resource.getrusage(resource.RUSAGE_SELF)
  peak = r.ru_maxrss / 1024
  try:
    with open("/proc/self/status") as f:
      peak = next(int(line.split()[1]) / 1024 for line in f
                  if line.startswith("VmHWM:"))
  except (OSError, StopIteration):
    pass
  return r.ru_utime + r.ru_stime, peak


def measure(impl: str, model: str, n: int, duration_ms: float, *, k: int = 80,
            seed: int = 0, delay_steps: int = 2, threads: int | None = None,
            warmup_ms: float = 100.0, network: str | None = None) -> dict:
  """Builds ``impl`` ('nest' or 'brainshard'), warms it up (brainshard
  compiles) and times one run of ``duration_ms``: build s, s per simulated
  s, CPU s of the timed run, peak RSS (MB) of the process at its start
  (Python and NumPy only) and at the end, rate (Hz). ``network``: an
  ``.npz`` of :func:`export_network` for NEST (then this process never
  imports JAX)."""
  _, rss0 = _usage()
  if impl == "nest":
    net = dict(np.load(network)) if network else None
    build_s, run = nest_run(model, n, k, seed, delay_steps, threads,
                            network=net)
  else:
    exchange = "delay" if delay_steps > 1 else "step"  # cuba.py's default
    build_s, run = _ei.brainshard_run(model, n, k, delay=delay_steps,
                                      exchange=exchange, seed=seed)
  run(warmup_ms)
  cpu0, _ = _usage()
  t0 = time.perf_counter()
  spikes = run(duration_ms)
  wall = time.perf_counter() - t0
  cpu1, rss = _usage()
  return dict(impl=impl, build_s=build_s, s_per_sim_s=wall / duration_ms * 1e3,
              cpu_s_per_sim_s=(cpu1 - cpu0) / duration_ms * 1e3,
              peak_rss_mb=rss, rss_start_mb=rss0,
              rate_hz=_ei.stats(spikes, 0.1)["rate_hz"],
              jax_imported="jax" in sys.modules)


def _child(impl: str, args, network: str) -> dict:
  """``measure`` in a fresh process: its own peak RSS and CPU time, and
  NEST's global kernel and JAX's thread pools never share a process."""
  env = dict(os.environ, OMP_WAIT_POLICY="passive")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  cmd = [sys.executable, "-m", "benchmarks", "nest", "--child", impl,
         "--model", args.model, "--neurons", str(args.neurons),
         "--in-degree", str(args.in_degree), "--seed", str(args.seed),
         "--delay", str(args.delay), "--duration", str(args.duration),
         "--warmup", str(args.warmup)]
  if args.threads:
    cmd += ["--threads", str(args.threads)]
  if impl == "nest":
    cmd += ["--network", network]
  out = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True,
                       check=False)
  if out.returncode:
    raise RuntimeError(f"{impl} child failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def compare(args) -> dict:
  """Interleaved runs (NEST, brainshard, NEST, ...), ``args.repeats`` each,
  each in a fresh process; per implementation the best of each figure."""
  runs: dict[str, list[dict]] = {"nest": [], "brainshard": []}
  with tempfile.TemporaryDirectory() as tmp:
    network = os.path.join(tmp, "network.npz")
    np.savez(network, **export_network(args.model, args.neurons,
                                       args.in_degree, args.seed))
    for _ in range(args.repeats):
      for impl in runs:
        runs[impl].append(_child(impl, args, network))
  best = {}
  for impl, rows in runs.items():
    best[impl] = {key: min(r[key] for r in rows) for key in
                  ("build_s", "s_per_sim_s", "cpu_s_per_sim_s", "peak_rss_mb",
                   "rss_start_mb")}
    best[impl]["jax_imported"] = any(r["jax_imported"] for r in rows)
    best[impl]["rate_hz"] = [round(r["rate_hz"], 3) for r in rows]
  return dict(model=args.model, neurons=args.neurons, in_degree=args.in_degree,
              delay_steps=args.delay, nest_delay_ms=nest_delay_ms(args.delay),
              threads=args.threads or len(os.sched_getaffinity(0)),
              duration_s=args.duration, repeats=args.repeats,
              nest_version=_nest_version(), results=best)


def _nest_version() -> str:
  """NEST's version, from a child (this process need not load NEST); the
  last line of its output (NEST prints a banner first)."""
  out = subprocess.run([sys.executable, "-c",
                        "import nest; print(nest.__version__)"],
                       env=dict(os.environ, OMP_WAIT_POLICY="passive"),
                       capture_output=True, text=True, check=False)
  return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else "?"


def main(argv: list[str] | None = None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--model", choices=("cuba", "coba"), default="cuba")
  ap.add_argument("--neurons", type=int, default=4000)
  ap.add_argument("--in-degree", type=int, default=80)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--delay", type=int, default=2,
                  help="the example's delay in steps (NEST gets one less)")
  ap.add_argument("--duration", type=float, default=1.0, help="seconds")
  ap.add_argument("--warmup", type=float, default=100.0,
                  help="ms simulated (and compiled) before timing")
  ap.add_argument("--threads", type=int, default=None,
                  help="NEST threads (default: the cores this process has)")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--child", choices=("nest", "brainshard"), default=None,
                  help=argparse.SUPPRESS)
  ap.add_argument("--network", default=None, help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.child:
    out = measure(args.child, args.model, args.neurons, args.duration * 1e3,
                  k=args.in_degree, seed=args.seed, delay_steps=args.delay,
                  threads=args.threads, warmup_ms=args.warmup,
                  network=args.network)
  else:
    out = compare(args)
  print(json.dumps(out, indent=None if args.child else 1))
  return out

