"""The networks ``python -m benchmarks delivery`` delivers through, and the
spikes it delivers: built once per process, on one device.

- ``brunel``: Brunel's model A (12,500 neurons, 10,000 E + 2,500 I, in-degree
  1,250 = 1,000 E + 250 I by ``FixedInDegree``, one delay of 1.5 ms = 15
  steps, one receptor), every neuron firing at 40 Hz: ~62,000 synaptic events
  a step of 0.1 ms, 6.2e8 a simulated second.
- ``microcircuit``: ``examples.microcircuit``'s synapses at scale 0.1 with
  the full in-degrees (7,717 neurons, 29.9 M synapses, normal delays of
  1-55 steps, rows of up to 6,723 synapses), each population firing at its
  published rate (0.9-8.4 Hz): ~9,500 events a step.

Spikes are Bernoulli draws per neuron and step (seeded), so both kernels see
the same steps; events are counted from the index (``events``).

  >>> sorted(SHAPES)
  ['brunel', 'microcircuit']
  >>> bernoulli_spikes([40.0, 0.0], steps=3, dt=0.1).shape
  (3, 2)
"""

from __future__ import annotations

import numpy as np

# The published rates of Potjans & Diesmann (2014), Hz, by population.
MICROCIRCUIT_HZ = dict(L23E=0.9, L23I=2.8, L4E=4.4, L4I=5.7, L5E=7.6,
                       L5I=8.4, L6E=1.1, L6I=7.8)


def brunel(seed: int = 1, dt: float = 0.1):
  """``(index, rates per neuron in Hz)`` of Brunel's model A."""
  import jax
  from brainshard import models as bm
  n_e, n_i, k = 10_000, 2_500, 1_250
  lay = bm.Layout({"E": n_e, "I": n_i}, n_shards=1)
  everyone = (0, n_e + n_i)
  proj = [bm.Projection("E", everyone, bm.FixedInDegree(k * 4 // 5),
                        weight=0.1, delay=1.5),
          bm.Projection("I", everyone, bm.FixedInDegree(k // 5),
                        weight=-0.5, delay=1.5)]
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  index = bm.connect(proj, lay, dt=dt, seed=seed, mesh=mesh, axis="x")
  return index, np.full(lay.n_padded, 40.0)


def microcircuit(seed: int = 1, dt: float = 0.1, scale: float = 0.1):
  """``(index, rates per neuron in Hz)`` of the microcircuit at ``scale``
  with the full in-degrees."""
  import jax
  from brainshard import models as bm
  from examples.microcircuit import model
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  mc = model.Microcircuit(mesh, n_scale=scale, k_scale=1.0, seed=seed,
                          dt=dt)
  index, lay = mc.delivery.index.value, mc.layout
  return index, bm.population_values(lay, MICROCIRCUIT_HZ)


SHAPES = {"brunel": brunel, "microcircuit": microcircuit}


def bernoulli_spikes(rates, steps: int, dt: float = 0.1, seed: int = 0):
  """bool ``[steps, n]``: neuron ``i`` fires in a step with probability
  ``rates[i] * dt`` (Hz, ms)."""
  p = np.asarray(rates, np.float64)[None] * dt * 1e-3
  return np.random.default_rng(seed).random((steps, p.shape[1])) < p


def events(index, fired) -> int:
  """Synaptic events the spikes ``fired [steps, n_pre]`` cause through a
  one-shard ``index``."""
  degree = np.diff(np.asarray(index.indptr))
  return int((np.asarray(fired, np.int64) * degree).sum())
