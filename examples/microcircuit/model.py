"""The Potjans & Diesmann (2014) microcircuit on ``bm.Network``, call for
call as NEST 3's PyNEST example builds it.

Eight populations of NEST's ``iaf_psc_exp``: one synaptic time constant
(0.5 ms) for both receptors, each spike routed to ``I_syn_ex`` or
``I_syn_in`` by its weight's sign as in NEST; ``V_m`` starts from each
population's normal, drawn per neuron; ``I_e`` is the DC that makes up for
down-scaled in-degrees. Each connected pair is ``fixed_total_number`` with
normal weights redrawn to keep their sign and normal delays (NEST's
``nest.math.redraw``; delays below half a step are redrawn). Each
population gets a ``poisson_generator`` of ``k_ext * 8 Hz`` (every neuron
its own train) or, with ``background='dc'``, its mean as a DC (NEST's
``poisson_input = False``), and a ``spike_recorder``. The same seed gives
the same spikes on any number of devices.

Example (building takes a while, hence the skips):
  >>> from examples.microcircuit.model import initial_v
  >>> from examples.microcircuit.params import scaled
  >>> [len(v) for v in initial_v(scaled(0.01, 0.1), seed=1)][:3]
  [207, 58, 219]
  >>> import jax
  >>> from examples.microcircuit.model import Microcircuit
  >>> mesh = jax.make_mesh((1,), ('x',), devices=jax.devices()[:1])
  >>> mc = Microcircuit(mesh, n_scale=0.1, k_scale=0.1, seed=1)  # doctest: +SKIP
  >>> out = mc.run(warmup=100.0, duration=1000.0)   # doctest: +SKIP
  >>> out['rates']['L4E']      # doctest: +SKIP
  3.9...
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

import brainshard as bs
from brainshard import models as bm
from examples.microcircuit import params

NAMES = params.POPULATIONS


def initial_v(net: params.Scaled, seed: int) -> list[np.ndarray]:
  """Each population's initial ``V_m`` (mV), one per neuron from its
  normal (NEST's 'optimized' ``V0_mean``, ``V0_std``); a host draw, so the
  same on any mesh."""
  rng = np.random.default_rng([seed, 0x0F])
  return [rng.normal(m, s, int(n)) for m, s, n in
          zip(params.V0_MEAN, params.V0_STD, net.neurons)]


class Microcircuit:
  """The scaled microcircuit, built (connectivity included) on ``mesh``.

  Args:
    mesh: a ``jax.sharding.Mesh`` (None: all devices on one axis).
    n_scale, k_scale: fractions of the neurons and of the in-degrees
      (``params.scaled``: weights / sqrt(k_scale) plus NEST's DC).
    seed: seeds the connectivity, the initial potentials and the background.
    dt: the step (ms). axis: the mesh axis the neurons are split over.
    background: ``'poisson'`` (a ``poisson_generator`` per population) or
      ``'dc'`` (its mean input as ``I_e``, NEST's ``poisson_input=False``).
    chunk: steps per compiled chunk. record_to: a zarr path for the records
      (``bs.load_records``), or None (memory). progress: a progress bar.
  """

  def __init__(self, mesh: Any = None, n_scale: float = 0.1,
               k_scale: float = 0.1, seed: int = 1, *, dt: float = 0.1,
               axis: str | None = None, background: str = "poisson",
               chunk: int = 500, record_to: Any = None,
               progress: bool | str = False):
    if background not in ("poisson", "dc"):
      raise ValueError(f"background must be 'poisson' or 'dc', got "
                       f"{background!r}.")
    self.scaled = p = params.scaled(n_scale, k_scale)
    self.network = net = bm.Network(dt=dt, seed=seed, mesh=mesh, axis=axis,
                                    chunk=chunk, record_to=record_to,
                                    progress=progress)
    nrn = params.NEURON
    neuron = {k: nrn[k] for k in ("E_L", "V_th", "V_reset", "C_m", "tau_m",
                                  "t_ref")}
    neuron.update(tau_syn_ex=nrn["tau_syn"], tau_syn_in=nrn["tau_syn"])
    rates = params.BG_RATE * p.k_ext           # Hz of background per neuron
    dc = p.dc + (0.0 if background == "poisson" else
                 1e-3 * nrn["tau_syn"] * p.weight_ext * rates)
    pops = [net.create("iaf_psc_exp", int(n),
                       {**neuron, "I_e": float(i_e), "V_m": v0}, label=name)
            for name, n, i_e, v0 in zip(NAMES, p.neurons, dc,
                                        initial_v(p, seed))]
    for i, target in enumerate(pops):
      for j, source in enumerate(pops):
        n, w = int(p.synapses[i, j]), float(p.weight_mean[i, j])
        if n <= 0:
          continue
        d = float(p.delay_mean[i, j])
        sign = dict(lower=0.0) if w > 0 else dict(upper=0.0)
        net.connect(source, target, {"rule": "fixed_total_number", "N": n}, {
            "weight": bm.Normal(w, abs(w) * params.WEIGHT_REL_STD, **sign),
            "delay": bm.Normal(d, d * params.DELAY_REL_STD)})
      if background == "poisson":
        pg = net.create("poisson_generator", {"rate": float(rates[i])})
        net.connect(pg, target, syn_spec={"weight": p.weight_ext,
                                          "delay": params.DELAY_POISSON})
    self.populations, self.recorders = dict(zip(NAMES, pops)), {}
    for name, pop in zip(NAMES, pops):
      self.recorders[name] = net.create("spike_recorder",
                                        label=f"spikes_{name}")
      net.connect(pop, self.recorders[name])
    net.build()
    self.layout, self.delivery = net.layout, net.delivery
    self.every = net.exchange_every            # steps per spike exchange
    self.n_synapses = int(np.asarray(self.delivery.index.value.count).sum())
    jax.block_until_ready([s.value for g in net.groups
                           for s in g.states.values()])

  def spikes(self, start: int = 0) -> bs.SpikeData:
    """Every recorded spike (``bs.SpikeData`` over the network's neurons,
    steps counted from step ``start``)."""
    parts = [r.spikes for r in self.recorders.values()]
    steps = np.concatenate([s.steps for s in parts]) - start
    neurons = np.concatenate([s.neurons for s in parts])
    order = np.lexsort((neurons, steps))
    return bs.SpikeData(steps[order], neurons[order], self.layout.n,
                        self.network.dt)

  def run(self, warmup: float = 100.0, duration: float = 1000.0) -> dict:
    """Simulates ``warmup`` ms, compiles what ``duration`` needs, then
    simulates ``duration`` ms measured. Returns the measured interval's
    spikes (steps from its start), per-population ``split`` spikes, rates
    (Hz) and CVs of ISI; ``first_spike_s`` (seconds from this call to the
    first chunk with a spike back on the host), ``warmup_s``,
    ``compile_s``, ``run_s``, ``cpu_s`` (the measured run's CPU time, all
    threads) and ``simulated_s``."""
    net, t0 = self.network, time.perf_counter()
    first, first_s = net.runner.loop.chunk * self.every * net.dt, None
    while net.time < warmup - 1e-9:   # the first spikes back, then the rest
      left = warmup - net.time
      net.simulate(min(first, left) if first_s is None else left)
      if first_s is None and any(r.n_events for r in self.recorders.values()):
        first_s = time.perf_counter() - t0
    warm_s = time.perf_counter() - t0
    compile_s = net.compile(duration)   # the measured run compiles nothing
    net.runner.reset_records()
    start = int(round(net.time / net.dt))
    t0, c0 = time.perf_counter(), time.process_time()
    net.simulate(duration)
    run_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    spikes = self.spikes(start)
    steps = int(round(duration / net.dt))
    return dict(spikes=spikes, split=bm.split_spikes(spikes, self.layout),
                rates=bm.population_firing_rates(spikes, self.layout, steps),
                cv_isi=bm.population_cv_isi(spikes, self.layout),
                first_spike_s=first_s, warmup_s=warm_s, compile_s=compile_s,
                run_s=run_s, cpu_s=cpu_s, simulated_s=duration * 1e-3)
