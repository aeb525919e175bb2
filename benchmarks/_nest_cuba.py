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
``python -m benchmarks nest`` (:mod:`benchmarks.bench_nest`) times NEST,
brainshard and its pure-JAX twin on this network (and the microcircuit) in
interleaved child processes.

Example (the NEST network, built and run 1 ms):
  >>> import pytest; nest = pytest.importorskip('nest')  # doctest: +SKIP
  >>> build_s, run = nest_run('cuba', 400)  # doctest: +SKIP
  >>> run(1.0).shape  # doctest: +SKIP
  (10, 400)
"""

from __future__ import annotations

import os

import numpy as np

from benchmarks._harness import clock


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


def import_nest():
  """``nest``, quiet, with passive OpenMP waiting (only effective if NEST
  was not imported before in this process)."""
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")
  import nest  # pylint: disable=import-outside-toplevel
  nest.verbosity = nest.VerbosityLevel.ERROR
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


def _build(nest, p, net: dict, delay_ms: float, overrides: dict | None,
           record_every: int = 1):
  """Creates and connects the network in NEST's (reset) kernel; returns
  the neurons and the spike recorder of every ``record_every``-th one."""
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
  # Each neuron connected to a recorder costs NEST 3.10 ~31 KB (1.2 GB for
  # 40,000 neurons, measured): large networks record a sample.
  nest.Connect(neurons[::record_every], rec)
  return neurons, rec


def nest_run(model: str = "cuba", n: int = 4000, k: int = 80, seed: int = 0,
             delay_steps: int = 2, threads: int | None = None, *,
             network: dict | None = None, delay_ms: float | None = None,
             overrides: dict | None = None, record_every: int = 1):
  """The example's network (``cuba.EINetwork(model, seed, n, k,
  delay=delay_steps)``) in NEST; returns ``(build_s, run(ms) -> spikes
  [steps, n])`` on the example's step grid (row t: spikes of the update
  from t*dt to (t+1)*dt; ``run(ms, raster=False)``: their number only).
  Resets NEST's kernel. ``network``: what
  :func:`export_network` gives (else it is exported here, with JAX);
  ``build_s`` counts NEST's Create, Connect and Prepare, not the export.
  ``delay_ms`` and ``overrides`` (neuron parameters) replace the mapped
  values: the tests use them to show that unmapped ones give other spikes.
  ``record_every``: record the spikes of every such neuron only (a spike
  recorder costs NEST ~31 KB per recorded neuron); only with
  ``raster=False``.

  >>> nest_run('cuba', 400, delay_steps=1)  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ValueError: the example's --delay 1 has no NEST equivalent: ...
  """
  from examples import cuba
  p = cuba.Params(model=model, n=n, k=k, delay=delay_steps)
  if delay_ms is None:
    delay_ms = nest_delay_ms(delay_steps, p.dt)
  net = network if network is not None else export_network(model, n, k, seed)
  nest = import_nest()
  nest.ResetKernel()
  nest.set(resolution=p.dt, print_time=False, rng_seed=seed + 1,
           local_num_threads=threads or len(os.sched_getaffinity(0)))
  with clock() as build:
    neurons, rec = _build(nest, p, net, delay_ms, overrides, record_every)
    nest.Prepare()  # NEST's own build work (its indices), counted in build_s
  build_s, first = build.s, neurons[0].global_id
  done, seen = [0], [0]  # steps run, events recorded

  def run(duration_ms: float, raster: bool = True):
    steps = int(round(duration_ms / p.dt))
    nest.Run(steps * p.dt)
    events = rec.n_events
    count, seen[0] = events - seen[0], events
    if not raster:  # the number of spikes, no raster (what the timing uses)
      done[0] += steps
      return count
    if record_every != 1:
      raise ValueError("a raster needs every neuron recorded (record_every=1)")
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
