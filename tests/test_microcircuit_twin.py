"""The microcircuit's pure-JAX twin (benchmarks/_microcircuit_twin.py, the
``twin`` column of ``python -m benchmarks nest``) simulates what the example
simulates: the same spikes, step by step and neuron by neuron, as the
example's spike recorders record them. Identical spikes are the proof that
the twin does the example's work (same neuron kernel, the same Poisson
draws, delivery and ring buffer), so the ratio brainshard / twin compares
like with like.

The twin is given the example's synapse index (it would build it with the
example, and building twice would double the test's time).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from benchmarks import _microcircuit_twin as twin
from examples.microcircuit import model


@pytest.mark.slow  # ~15 s: a build and two compiled chunk programs
def test_twin_gives_the_examples_spikes():
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  mc = model.Microcircuit(mesh, n_scale=0.01, k_scale=0.1, seed=3, chunk=100)
  _, run = twin.twin_run(0.01, 0.1, seed=3, chunk=100,
                         index=mc.delivery.index.value)
  mc.network.simulate(100.0)  # 10 chunks
  steps, neurons = run(100.0)
  want = mc.spikes()
  assert len(want.steps) > 100      # a test of something: the network fires
  for name in mc.layout.names:      # every population fires
    a, b = mc.layout.range(name)
    assert ((want.neurons >= a) & (want.neurons < b)).any(), name
  np.testing.assert_array_equal(steps, np.asarray(want.steps))
  np.testing.assert_array_equal(neurons, np.asarray(want.neurons))
  assert run.net["n_synapses"] == mc.n_synapses


def test_the_nest_table_times_the_microcircuit_twin():
  from benchmarks import bench_nest
  args = bench_nest.parse(["--only", "microcircuit", "--impls",
                            "brainshard,twin", "--scales", "0.1"])
  (case,) = bench_nest.cases(args)
  assert [s["impl"] for s in case["specs"]] == ["brainshard", "twin"]
  assert all(s["workload"] == "microcircuit" for s in case["specs"])
