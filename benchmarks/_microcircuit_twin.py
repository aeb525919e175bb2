"""The pure-JAX twin of ``examples.microcircuit`` on one device: the same
network, the same kernels, threaded by hand (``python -m benchmarks nest``'s
``twin`` column, beside the example's ``bm.Network``).

What it mirrors, piece by piece:

- the network: the synapse index of the example's ``bm.Network`` (built by
  ``Microcircuit``, or given), its arrays taken out once; the neurons'
  constants and initial state from the library's ``iaf_psc_exp``
  (``bm.IafPscExp.constants`` / ``init_state``, the per-neuron ``I_e`` in
  float32 as ``ModelGroup`` keeps it) and ``model.initial_v``. Nothing else
  of brainshard's State machinery: the time-stepping has no ``bs.State``,
  ``bs.jit``, ``bs.shard_map``, ``bs.Runner``, monitor or ``bm.Network``.
- a step (``Network._update`` inside ``Delivery._block``): each
  population's ``poisson_generator`` drawn with the library device
  (``bm.PoissonGenerator.emit`` at step ``t - 15``, the connection's key
  ``fold_in(key(seed), 0x5EED + i)`` as a block key at the population's
  first id: its window of the draw over all neurons, as ``Stimulus.add``),
  times ``w_ext`` into receptor 0; the neuron update
  ``bm.IafPscExp.update``; the ring buffer of ``Delivery._block`` written
  out on arrays (clear / update / deliver / read, ``every = 1``, two
  receptors), clearing and delivering through the library kernels
  ``clear_slots`` and ``bm.deliver`` with the sizes, window width and
  kernel choice Delivery passes.
- a chunk: ``jax.jit`` of a ``lax.scan`` over the chunk's global step
  indices (the example's chunk: 500 steps), no donation (``bs.Runner``
  donates nothing), each population's spikes ORed into its own word buffer
  (``spikes.record_spikes``: a ``spike_recorder`` per population, each
  recording its population's slice); after each dispatch the library's
  compaction program per buffer (``spikes.compact``, async copy to the
  host), one chunk dispatched ahead (``ChunkedLoop.iterate``), then
  ``spikes.decode`` of the finished chunk with the Recorder's capacity
  growth. So the twin does the runner's recording work, minus its Python.

Same seed, same spikes as the example (tests/test_microcircuit_twin.py).

Example (building takes seconds, hence the skips):
  >>> import jax.numpy as jnp
  >>> plain({'v': jnp.zeros(3)})['v'].committed   # arrays put on one device
  True
  >>> build_s, run = twin_run(0.01, 0.1, seed=1, chunk=50)  # doctest: +SKIP
  >>> steps, neurons = run(20.0)  # 200 steps as events  # doctest: +SKIP
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

from benchmarks._harness import clock
from brainshard._simulation.monitors import spikes as spk
from brainshard._simulation.runner.chunked import chunk_lengths
from brainshard._simulation.random.blocks import block_key

__all__ = ["network", "plain", "make_step", "chunk_program", "twin_run"]


def plain(tree):
  """``tree``'s arrays on the first device with no mesh in their type. A
  mesh stays in a value's type through ``device_put`` to a device, even
  with a replicated spec, and spreads to every result computed with it (a
  chunk program of another length then refused its state); through a
  NumPy view, the array is the same memory without it. No copy on the
  host's device (``may_alias``); elsewhere a copy through the host."""
  dev = jax.devices()[0]
  alias = dev.platform == "cpu"

  def one(a):
    sharding = getattr(a, "sharding", None)
    if isinstance(sharding, NamedSharding) and alias:
      return jax.device_put(np.asarray(a), dev, may_alias=True)
    if isinstance(sharding, NamedSharding):
      a = jax.device_put(a, NamedSharding(sharding.mesh, P()))
    return jax.device_put(a, dev)

  return jax.tree.map(one, tree)


def network(scale: float, k_scale: float, seed: int = 1, dt: float = 0.1,
            index=None) -> dict:
  """What ``Microcircuit(mesh, scale, k_scale, seed)`` holds, as arrays on
  one device: ``index`` (the ``SynapseIndex``; built by the example unless
  given, e.g. the example's own, to save a build), the neuron ``model``
  and its ``consts``, the background ``stims`` (``(start, stop, device,
  constants, key)`` per population), the initial ``state`` and ``w_ext``,
  ``delay`` (steps), ``length`` (ring buffer slots)."""
  from brainshard import models as bm
  from examples.microcircuit import model, params
  names = params.POPULATIONS
  net = params.scaled(scale, k_scale)
  lay = bm.Layout({k: int(n) for k, n in zip(names, net.neurons)}, n_shards=1)
  if index is None:
    mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    index = model.Microcircuit(mesh, scale, k_scale, seed,
                               dt=dt).delivery.index.value
  if index.min_delay != 1 or index.n_shards != 1 or index.n_receptors != 2:
    raise ValueError(
        f"the twin writes out Delivery on one shard with every = 1 and two "
        f"receptors; this index has {index.n_shards} shards, min_delay "
        f"{index.min_delay}, {index.n_receptors} receptors.")
  index = plain(index)  # out of the mesh, once
  nrn = params.NEURON
  i_e = bm.population_values(lay, dict(zip(names, net.dc)), dtype=np.float64)
  neuron = bm.IafPscExp(
      **{k: nrn[k] for k in ("E_L", "V_th", "V_reset", "C_m", "tau_m",
                             "t_ref")},
      tau_syn_ex=nrn["tau_syn"], tau_syn_in=nrn["tau_syn"], I_e=i_e)
  consts = neuron.constants(neuron.params, dt)  # as ModelGroup keeps them
  consts = {k: jnp.asarray(v, jnp.float32) if np.ndim(v) == 1 else v
            for k, v in consts.items()}
  state = neuron.init_state(lay.n_padded, jnp.float32, neuron.params)
  for name, v0 in zip(names, model.initial_v(net, seed)):
    start, stop = lay.range(name)
    state["V_m"][start:stop] = v0
  stims = []
  for i, name in enumerate(names):  # connection i: population i's generator
    pg = bm.PoissonGenerator(rate=float(params.BG_RATE * net.k_ext[i]))
    start, stop = lay.range(name)
    key = jax.random.fold_in(jax.random.key(seed), 0x5EED + i)
    stims.append((start, stop, pg, pg.constants(dt), block_key(key, 0, start)))
  n, length = lay.n_padded, bm.ring_length(index.max_delay, 1)
  state = dict(state, buffer=jnp.zeros((2, length, n), jnp.float32),
               current=jnp.zeros((1, 2, n), jnp.float32),
               t=jnp.zeros((), jnp.int32))
  return dict(index=index, model=neuron, consts=plain(consts), stims=stims,
              state=plain(state), w_ext=net.weight_ext,
              delay=int(bm.delay_steps(params.DELAY_POISSON, dt)),
              length=length, n=n, layout=lay, dt=dt,
              n_synapses=int(np.asarray(index.count).sum()))


def make_step(net: dict):
  """``step(state, index, consts) -> (state, spikes)``: one step of the
  example's network (``Delivery._block`` around ``Network._update``)."""
  from brainshard import models as bm
  from brainshard._models.delivery.events import EVENT_SIZES
  from brainshard._models.delivery.push import clear_slots
  neuron, stims, w_ext = net["model"], net["stims"], net["w_ext"]
  delay, length, n = net["delay"], net["length"], net["layout"].n
  width = 1024 if jax.devices()[0].platform == "cpu" else None  # as Delivery

  def update(s, inputs, consts, t):  # Network._update
    for start, stop, pg, c, key in stims:
      counts = pg.emit(c, t - delay, jnp.arange(stop - start), key, spec=P())
      inputs = inputs.at[0, start:stop].add(w_ext * counts.astype(jnp.float32))
    old = {k: s[k] for k in neuron.initial}
    new, spikes = neuron.update(consts, old, inputs, jnp.zeros(n))
    return dict(s, **new), spikes & (jnp.arange(spikes.shape[0]) < n)

  def step(s, index, consts):  # Delivery._block with every = 1
    t0 = s["t"]
    buf = clear_slots(s["buffer"], t0, 1, index)  # as Delivery, "auto"
    s, spikes = update(s, s["current"][0], consts, t0)
    fired = spikes[None]
    buf = lax.fori_loop(0, 1, lambda k, b: bm.deliver(
        b, fired[k], t0 + k, index, EVENT_SIZES, width), buf)
    nxt = lax.dynamic_slice_in_dim(buf, (t0 + 1) % length, 1, 1)
    return dict(s, t=t0 + 1, buffer=buf, current=nxt.swapaxes(0, 1)), spikes

  return step


def chunk_program(step, ranges: list, length: int):
  """``jax.jit`` of ``length`` steps from global step ``i0``: ``(state,
  index, consts, i0) -> (state, words)``, one Recorder word buffer per
  population ``ranges`` (its slice of the spikes). No donation: bs.Runner
  donates no State."""

  def chunk(state, index, consts, i0):
    base = i0 // spk.BITS

    def body(c, i):
      s, words = c
      s, spikes = step(s, index, consts)
      words = [spk.record_spikes(w, spikes[a:b], i, base)
               for w, (a, b) in zip(words, ranges)]
      return (s, words), None

    words = [jnp.zeros((spk.word_rows(length), b - a), jnp.uint32)
             for a, b in ranges]
    steps = i0 + jnp.arange(length, dtype=jnp.int32)
    (state, words), _ = lax.scan(body, (state, words), steps)
    return state, words

  # Outputs pinned to the device: left to jit, the ring buffer came back
  # with the connectivity's one-device mesh in its sharding (JAX 0.12),
  # and the next chunk compiled again.
  return jax.jit(chunk, out_shardings=SingleDeviceSharding(jax.devices()[0]))


def twin_run(scale: float, k_scale: float, seed: int = 1, chunk: int = 500,
             dt: float = 0.1, index=None):
  """Builds the network; returns ``(build_s, run(ms) -> (steps, neurons))``:
  each call continues the simulation and returns its spikes as sorted
  (global step, neuron) events, as the example's spike recorders record
  them together (``net`` and ``programs`` are on ``run``)."""
  with clock() as build:
    net = network(scale, k_scale, seed, dt, index)
    state = [net["state"]]
    args = (net["index"], net["consts"])
    jax.block_until_ready((state, args))
  build_s = build.s
  step = make_step(net)
  lay = net["layout"]
  ranges = [lay.range(name) for name in lay.names]
  programs: dict[int, object] = {}
  capacity: list = [None] * len(ranges)  # the Recorder's, kept between runs
  pos = [0]

  def dispatch(start: int, length: int):
    if length not in programs:
      programs[length] = chunk_program(step, ranges, length)
    state[0], words = programs[length](state[0], *args, np.int32(start))
    comps = [spk.compact(w, capacity[k]) for k, w in enumerate(words)]
    for k, c in enumerate(comps):  # async copies to the host
      capacity[k] = capacity[k] or c.capacity
    return start, length, words, comps

  def collect(start, length, words, comps):  # Recorder._decode, per buffer
    steps, neurons = [], []
    for k, (w, comp) in enumerate(zip(words, comps)):
      while True:
        try:
          s, nn = spk.decode(comp, start, length, start // spk.BITS)
          break
        except spk.Overflow as e:
          capacity[k] = spk.grown_capacity(e.needed, w.shape[0] * w.shape[1])
          comp = spk.compact(w, capacity[k])
      steps.append(s)
      neurons.append(np.asarray(nn) + ranges[k][0])
    return np.concatenate(steps), np.concatenate(neurons)

  def run(ms: float):
    pending: collections.deque = collections.deque()
    steps, neurons = [], []
    lengths = chunk_lengths(int(round(ms / dt)), chunk)
    end = pos[0] + sum(lengths)
    for length in lengths:
      pending.append(dispatch(pos[0], length))
      pos[0] += length
      # One chunk ahead (ChunkedLoop.iterate): chunk k is decoded once
      # chunk k + 1 is dispatched.
      while len(pending) > 1 or (pending and pos[0] == end):
        s, nn = collect(*pending.popleft())
        steps.append(s)
        neurons.append(nn)
    if not steps:
      return np.zeros(0, np.int64), np.zeros(0, np.int32)
    steps, neurons = np.concatenate(steps), np.concatenate(neurons)
    order = np.lexsort((neurons, steps))
    return steps[order], neurons[order]

  run.net, run.programs = net, programs
  return build_s, run
