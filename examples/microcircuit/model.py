"""The Potjans & Diesmann (2014) microcircuit on brainshard's public API.

Eight populations of ``iaf_psc_exp`` neurons on one ``bm.Layout`` sharded
over a mesh axis; recurrent synapses by ``bm.FixedTotalNumber`` per
projection, weights and delays from normals redrawn into range (as NEST's
example does with ``nest.math.redraw``); event-driven delivery through a
``bm.Delivery`` ring buffer; Poisson background counts per neuron per step
from one ``bs.random.uniform`` each by inverting a precomputed CDF (a
shard's block of the unsharded draw, so the same seed gives the same spikes
on any number of devices).

The neuron is NEST's ``iaf_psc_exp`` with its exact propagators and update
order: propagate V with the old current (unless refractory), decay the
current, add the input arriving in this step, threshold, reset. The
published model has one synaptic time constant (0.5 ms) for both synapse
types, so one current carries both and the weights carry the sign.

Example (building takes a while, hence the skips):
  >>> import jax
  >>> from examples.microcircuit.model import Microcircuit, propagators
  >>> round(propagators(dt=0.1, tau_m=10.0, tau_syn=0.5, c_m=250.0)['p11'], 4)
  0.8187
  >>> mesh = jax.make_mesh((1,), ('x',), devices=jax.devices()[:1])
  >>> mc = Microcircuit(mesh, n_scale=0.1, k_scale=0.1, seed=1)  # doctest: +SKIP
  >>> out = mc.run(warmup=100.0, duration=1000.0)   # doctest: +SKIP
  >>> out['rates']['L4E']      # doctest: +SKIP
  3.9...
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard import models as bm
from examples.microcircuit import params

NAMES = params.POPULATIONS


def propagators(dt: float, tau_m: float, tau_syn: float, c_m: float) -> dict:
  """NEST's ``iaf_psc_exp`` propagators for one step ``dt`` (ms): current
  decay ``p11``, membrane decay ``p22``, current into V ``p21`` (mV per pA,
  the regular case tau_syn != tau_m) and DC into V ``p20``."""
  p21 = (-tau_m / (c_m * (1 - tau_m / tau_syn)) * math.exp(-dt / tau_syn)
         * math.expm1(dt * (1 / tau_syn - 1 / tau_m)))
  return dict(p11=math.exp(-dt / tau_syn), p22=math.exp(-dt / tau_m),
              p21=p21, p20=-tau_m / c_m * math.expm1(-dt / tau_m))


def projections(net: params.Scaled) -> list:
  """One ``bm.Projection`` per connected (source, target) pair: fixed total
  number, normal weights redrawn to keep their sign, normal delays (connect
  redraws them below half a step)."""
  out = []
  for i, target in enumerate(NAMES):
    for j, source in enumerate(NAMES):
      n = int(net.synapses[i, j])
      w, d = float(net.weight_mean[i, j]), float(net.delay_mean[i, j])
      if n <= 0:
        continue
      w_std, d_std = abs(w) * params.WEIGHT_REL_STD, d * params.DELAY_REL_STD
      sign = dict(lower=0.0) if w > 0 else dict(upper=0.0)
      out.append(bm.Projection(
          source, target, bm.FixedTotalNumber(n),
          weight=bm.Normal(w, w_std, **sign),
          delay=bm.Normal(d, d_std)))
  return out


def poisson_cdf(lam: np.ndarray) -> np.ndarray:
  """float32 ``[K, len(lam)]``: Poisson(``lam``) CDFs at ``0 .. K - 1``,
  summed in float64 and rounded once, up to the first ``K`` where every
  CDF rounds to 1 in float32 (so a uniform, < 1, never passes it). A
  float32 recurrence instead stalls a few ulps below 1 and sends the
  rare largest uniforms to the last term.

  Inverting the CDF needs one uniform per neuron, so a shard's counts are
  its block of the unsharded draw; at the small per-step rates here it is
  cheaper than ``bs.random.poisson`` (exact at any rate: a loop of ``lam +
  O(sqrt(lam))`` block draws)."""
  lam = np.asarray(lam, np.float64)
  term, cdf, rows = np.exp(-lam), np.zeros_like(lam), []
  while not rows or (rows[-1] < 1).any():
    cdf = cdf + term
    rows.append(np.minimum(cdf, 1.0).astype(np.float32))
    term = term * lam / len(rows)
  return np.stack(rows)


def counts_from_cdf(u: jax.Array, cdf: jax.Array) -> jax.Array:
  """Poisson counts ``#{k : cdf[k] <= u}`` from uniforms ``u [n]`` and a
  :func:`poisson_cdf` table ``[K, n]``: a compare and an add per term."""
  return jnp.sum(cdf <= u, axis=0, dtype=jnp.int32)


class Microcircuit:
  """The scaled microcircuit on ``mesh`` axis ``axis``.

  Args:
    mesh: a ``jax.sharding.Mesh`` with axis ``axis``.
    n_scale, k_scale: fractions of the neurons and of the in-degrees
      (``params.scaled``: weights / sqrt(k_scale) plus NEST's DC).
    seed: seeds the connectivity, the initial potentials and the background.
    dt: the step (ms).
  """

  def __init__(self, mesh: Any, n_scale: float = 0.1, k_scale: float = 0.1,
               seed: int = 1, *, dt: float = 0.1, axis: str = "x"):
    self.mesh, self.axis, self.dt, self.seed = mesh, axis, dt, seed
    self.net = net = params.scaled(n_scale, k_scale)
    self.layout = lay = bm.Layout(
        {name: int(n) for name, n in zip(NAMES, net.neurons)},
        n_shards=mesh.shape[axis])
    index = bm.connect(projections(net), lay, dt=dt, seed=seed, mesh=mesh,
                       axis=axis)
    self.n_synapses = int(np.asarray(index.count).sum())
    self.delivery = bm.Delivery(index, mesh, axis=axis)
    self.every = self.delivery.every            # steps per exchange
    nrn = params.NEURON
    self.p = propagators(dt, nrn["tau_m"], nrn["tau_syn"], nrn["C_m"])
    self.theta = nrn["V_th"] - nrn["E_L"]       # V is relative to E_L
    self.v_reset = nrn["V_reset"] - nrn["E_L"]
    self.ref_steps = int(round(nrn["t_ref"] / dt))
    self.w_ext = net.weight_ext

    def per_neuron(values, dtype=np.float32):
      x = bm.population_values(lay, dict(zip(NAMES, values)), dtype=dtype)
      return jax.device_put(x, NamedSharding(mesh, P(axis)))

    spec = P(axis)
    # Poisson background: k_ext inputs at 8 Hz, a count per neuron per step.
    lam = net.k_ext * params.BG_RATE * dt * 1e-3
    cdf = poisson_cdf(bm.population_values(lay, dict(zip(NAMES, lam)),
                                           dtype=np.float64))
    self.bg_cdf = bs.ParamState(jax.device_put(cdf, NamedSharding(
        mesh, P(None, axis))), name="bg_cdf", spec=P(None, axis))
    self.i_e = bs.ParamState(per_neuron(net.dc), name="I_e", spec=spec)
    self._v0 = (per_neuron(params.V0_MEAN - nrn["E_L"]), per_neuron(params.V0_STD))
    zeros = per_neuron(np.zeros(8))
    self.v = bs.ShortTermState(zeros, name="V_m", spec=spec)
    self.i_syn = bs.ShortTermState(zeros, name="I_syn", spec=spec)
    self.ref = bs.ShortTermState(per_neuron(np.zeros(8), np.int32),
                                 name="r_ref", spec=spec)
    self.rng = bs.RandomState(seed, name="background")
    self.step = self.delivery.step(self._update)
    self.reset()

  def reset(self, seed: int | None = None) -> None:
    """Initial potentials from each population's normal, currents and queue
    empty, refractory counters 0 (a global draw: the same on any mesh)."""
    seed = self.seed if seed is None else seed
    self.rng.seed(seed)
    mean, std = self._v0
    pad = bm.population_values(self.layout, dict(zip(NAMES, np.ones(8))))
    v0 = (mean + std * self.rng.normal(size=self.layout.n_padded)) * pad
    self.v.value = jax.device_put(v0.astype(jnp.float32), mean.sharding)
    self.i_syn.value = jnp.zeros_like(self.i_syn.value)
    self.ref.value = jnp.zeros_like(self.ref.value)
    self.delivery.reset()

  def _update(self, inputs: jax.Array) -> jax.Array:
    """One step of the shard's neurons (NEST's iaf_psc_exp::update);
    ``inputs [1, n_local]`` is the recurrent input (pA) arriving now."""
    p, v, ref = self.p, self.v.value, self.ref.value
    free = ref == 0
    v_new = jnp.where(free, v * p["p22"] + self.i_syn.value * p["p21"]
                      + self.i_e.value * p["p20"], v)
    bg = counts_from_cdf(self.rng.uniform(size=v.shape), self.bg_cdf.value)
    self.i_syn.value = (self.i_syn.value * p["p11"] + inputs[0]
                        + self.w_ext * bg.astype(jnp.float32))
    spikes = v_new >= self.theta
    self.v.value = jnp.where(spikes, self.v_reset, v_new)
    self.ref.value = jnp.where(spikes, self.ref_steps, jnp.where(free, 0, ref - 1))
    return spikes

  def runner(self, chunk: int = 500, progress: bool | str = False) -> bs.Runner:
    """A ``bs.Runner`` recording every spike as sparse events (with
    ``every > 1`` steps per call, a block per call: ``bm.unblock_spikes``)."""
    if self.every == 1:
      return bs.Runner(self.step, {"spikes": bs.SpikeMonitor()}, dt=self.dt,
                       chunk=chunk, progress=progress)
    return bs.Runner(self.step, {"spikes": bs.SpikeMonitor(bm.block_spikes)},
                     dt=self.dt * self.every, chunk=max(1, chunk // self.every),
                     progress=progress)

  def run(self, warmup: float = 100.0, duration: float = 1000.0,
          chunk: int = 500, progress: bool | str = False) -> dict:
    """Simulates ``warmup`` ms (compiling on the way, also the programs the
    measured run needs), then ``duration`` ms measured. Returns the measured
    interval's spikes (``bs.SpikeData``, steps from its start), per-population
    ``split`` spikes and rates (Hz), and the wall times (``cpu_s``: the
    measured run's CPU time, all threads)."""
    runner = self.runner(chunk, progress)
    t0 = time.perf_counter()
    runner.run(duration=warmup)
    runner.compile(duration=duration)   # a remainder chunk, compiled now
    warm_s = time.perf_counter() - t0
    runner.reset_records()
    t0, c0 = time.perf_counter(), time.process_time()
    res = runner.run(duration=duration)
    run_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    spikes = res["spikes"]
    if self.every > 1:
      spikes = bm.unblock_spikes(spikes, self.every)
    start = res.start * self.every
    spikes = bs.SpikeData(np.asarray(spikes.steps) - start, spikes.neurons,
                          spikes.n, spikes.dt)
    split = bm.split_spikes(spikes, self.layout)
    seconds = res.steps * self.every * self.dt * 1e-3
    rates = {k: len(s.steps) / s.n / seconds for k, s in split.items()}
    return dict(spikes=spikes, split=split, rates=rates, warmup_s=warm_s,
                run_s=run_s, cpu_s=cpu_s, simulated_s=seconds)
