"""Brunel's model A (``examples.brunel``) for ``python -m benchmarks nest``:
the example on ``bm.Network``, its pure-JAX twin (:mod:`._network_twin`)
and the example's own ``add_brunel`` run in NEST (``NestNetwork`` of
``bench_brunel_nest``), each as ``(build_s, recorded neurons, synapses,
run(ms) -> spikes)`` for one child process of :mod:`._nest_children`.

Every implementation records every neuron and runs in chunks of
``CHUNK_MS`` simulated; the first simulate's duration (the warm-up)
sets the network's exchange interval, as in the example.

Example (the twin at a tiny scale, in this process; seconds, hence the
skips):
  >>> CHUNK_MS    # 200 calls of Brunel's 5-step exchange interval
  100.0
  >>> _, n, synapses, run = brunel_twin(dict(scale=0.02))  # doctest: +SKIP
  >>> run(100.0) > 0, n, synapses  # 250 neurons, 25 inputs  # doctest: +SKIP
  (True, 250, 6250)
"""

from __future__ import annotations

import os

from benchmarks._harness import clock

CHUNK_MS = 100.0  # simulated per compiled chunk, brainshard and the twin


def _mesh():
  import jax  # not in NEST's children, which never import JAX
  return jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])


def network(spec: dict):
  """The example's network, built for a first simulate of ``warmup_ms``
  (its exchange interval), its arrays ready; ``(net, recorder, build)``."""
  import jax
  from examples.brunel.model import brunel
  with clock() as build:
    net, _, _, sr = brunel(spec.get("regime", "AI"), spec["scale"],
                           seed=spec.get("seed", 1), mesh=_mesh())
    net.build(spec.get("warmup_ms", 100.0))
    jax.block_until_ready(net.delivery.index.value)
  return net, sr, build


def _chunk_calls(net) -> int:
  return max(1, round(CHUNK_MS / net.dt / net.exchange_every))


def brunel_brainshard(spec: dict):
  net, sr, build = network(spec)
  net.runner.chunk = _chunk_calls(net)  # before the first run makes its loop
  synapses = int(net.delivery.index.value.count.sum())

  def run(ms):
    net.runner.reset_records()
    net.simulate(ms)
    return sr.n_events

  return build.s, net.n_neurons, synapses, run


def twin_arrays(net, spikes_recorder):
  """The twin's arrays of the example's network (its one recorder)."""
  from benchmarks import _network_twin
  ids = spikes_recorder.ids()
  # the network's device connections (Stimulus tuples, in order)
  stimuli = net._stimuli  # pylint: disable=protected-access
  return _network_twin.arrays(net, stimuli, [(int(ids[0]), int(ids[-1]) + 1)])


def brunel_twin(spec: dict):
  import jax
  from benchmarks import _network_twin
  with clock() as build:
    net, sr, _ = network(spec)
    a = twin_arrays(net, sr)
    jax.block_until_ready((a["index"], a["state"]))
  twin = _network_twin.Twin(a, _chunk_calls(net))
  return build.s, a["n"], a["n_synapses"], lambda ms: len(twin.run(ms)[0])


def brunel_nest(spec: dict):
  """The example's ``add_brunel`` in NEST, ``threads`` threads, every
  neuron recorded; its synapses are NEST's connections less the devices'."""
  from benchmarks.bench_brunel_nest import NestNetwork
  from examples.brunel.model import add_brunel
  # as _nest_cuba.import_nest (not imported: the architecture test's
  # circle check pins which modules lead to it)
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # NEST's threads spin
  import nest  # pylint: disable=import-outside-toplevel
  nest.verbosity = nest.VerbosityLevel.ERROR
  nest.ResetKernel()
  nest.set(resolution=0.1, rng_seed=int(spec.get("seed", 1)),
           print_time=False, local_num_threads=spec.get("threads") or 1)
  with clock() as build:
    E, I = add_brunel(NestNetwork(nest), spec.get("regime", "AI"),
                      spec["scale"])
    rec = nest.Create("spike_recorder")
    nest.Connect(E + I, rec)
    nest.Prepare()
  n = len(E) + len(I)
  # one connection per neuron from the poisson_generator, one to the recorder
  synapses = int(nest.GetKernelStatus("num_connections")) - 2 * n
  seen = [0]

  def run(ms):
    nest.Run(ms)
    total = int(rec.n_events)
    new, seen[0] = total - seen[0], total
    return new

  return build.s, n, synapses, run
