"""Brunel's pure-JAX twin (benchmarks/_brunel_twin.py) simulates what
examples.brunel simulates: the same spikes, step by step and neuron by
neuron, so the ratio brainshard / twin compares like with like (as
tests/test_microcircuit_twin.py for the microcircuit)."""

import jax
import numpy as np
import pytest

from benchmarks import _brunel_twin as twin
from examples.brunel import model


@pytest.mark.slow  # ~10 s: a build and two compiled chunk programs
def test_twin_gives_the_examples_spikes():
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  net, E, I, sr = model.brunel("AI", 0.02, seed=3, mesh=mesh,
                               exchange_every=15, chunk=20)
  net.build()
  _, run = twin.twin_run(0.02, seed=3, chunk=20,
                         index=net.delivery.index.value)
  net.simulate(75.0)   # 50 calls of 15 steps: chunks of 20, 20, 10
  steps, neurons = run(75.0)
  want = sr.spikes
  assert len(want.steps) > 100 and (want.neurons >= len(E)).any()
  np.testing.assert_array_equal(steps, np.asarray(want.steps))
  np.testing.assert_array_equal(neurons, np.asarray(want.neurons))
  assert run.net["n_synapses"] == int(
      np.asarray(net.delivery.index.value.count).sum())
