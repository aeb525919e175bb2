"""The pure-JAX twin of ``examples.microcircuit`` on one device: the same
network, the same kernels, threaded by hand (``python -m benchmarks nest``'s
``twin`` column, beside ``Microcircuit.runner()``).

What it mirrors, piece by piece:

- the network: ``bm.connect(model.projections(...))`` exactly as
  ``Microcircuit`` builds it (the same synapses), its index arrays taken out
  once; the initial potentials drawn with a ``bs.RandomState`` as
  ``Microcircuit.reset`` draws them. Nothing else of brainshard's State
  machinery: the time-stepping has no ``bs.State``, ``bs.jit``,
  ``bs.shard_map``, ``bs.Runner`` or monitor.
- a step: the neuron update of ``Microcircuit._update`` (``model.propagators``,
  ``poisson_cdf``, ``counts_from_cdf``); the background uniforms are the
  bits ``bs.RandomState.uniform`` gives on one device: split the key, then
  ``jax.random.uniform`` of the split-off key as a block key at counter 0
  (``random_blocks.block_key``, whose threefry is written out unrolled,
  the library's own CPU sampler); the ring buffer of ``bm.Delivery._block``
  written out on arrays (its clear / update / deliver / read chain, with
  ``every = 1``), clearing and delivering through the library kernels
  ``clear_slots`` and ``bm.deliver`` (pure functions of arrays) with the
  sizes, window width and kernel choice Delivery passes.
- a chunk: ``jax.jit`` of a ``lax.scan`` over the chunk's global step
  indices (500 steps, the example's runner chunk), no donation (``bs.Runner``
  donates nothing, see runner.py), the spikes ORed into a word buffer
  (``spikes.record_spikes``), the index, background CDF and DC passed as
  arguments as the Runner passes ParamStates; after each dispatch the
  library's compaction program (``spikes.compact``, async copy to the host),
  one chunk dispatched ahead (``ChunkedLoop.iterate``), then
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
  """``tree``'s arrays on the first device with no mesh in their type (an
  Explicit mesh axis stays in a value's type through ``device_put`` to a
  device; a replicated spec first drops it). No copy on one device."""
  dev = jax.devices()[0]

  def one(a):
    sharding = getattr(a, "sharding", None)
    if isinstance(sharding, NamedSharding):
      a = jax.device_put(a, NamedSharding(sharding.mesh, P()))
    return jax.device_put(a, dev)

  return jax.tree.map(one, tree)


def network(scale: float, k_scale: float, seed: int = 1, dt: float = 0.1,
            index=None) -> dict:
  """What ``Microcircuit(mesh, scale, k_scale, seed)`` holds, as arrays on
  one device: ``index`` (the ``SynapseIndex``; built here as the example
  builds it unless given, e.g. the example's own, to save a build), ``cdf``,
  ``i_e``, the initial ``state`` and the update's constants (``p``,
  ``theta``, ``v_reset``, ``ref_steps``, ``w_ext``; ``length``: ring
  buffer slots)."""
  import brainshard as bs
  from brainshard import models as bm
  from examples.microcircuit import model, params
  names = params.POPULATIONS
  net = params.scaled(scale, k_scale)
  lay = bm.Layout({k: int(n) for k, n in zip(names, net.neurons)}, n_shards=1)
  if index is None:
    mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    index = bm.connect(model.projections(net), lay, dt=dt, seed=seed,
                       mesh=mesh, axis="x")
  if index.min_delay != 1 or index.n_shards != 1:
    raise ValueError(
        f"the twin writes out Delivery on one shard with every = 1; this "
        f"index has {index.n_shards} shards, min_delay {index.min_delay}.")
  index = plain(index)  # out of the mesh, once
  per = lambda v, dtype=np.float32: jnp.asarray(  # noqa: E731
      bm.population_values(lay, dict(zip(names, v)), dtype=dtype))
  nrn = params.NEURON
  lam = net.k_ext * params.BG_RATE * dt * 1e-3
  cdf = jnp.asarray(model.poisson_cdf(bm.population_values(
      lay, dict(zip(names, lam)), dtype=np.float64)))
  # Microcircuit.reset: one normal draw, then the background draws.
  rng = bs.RandomState(seed)
  mean, std = per(params.V0_MEAN - nrn["E_L"]), per(params.V0_STD)
  pad = bm.population_values(lay, dict(zip(names, np.ones(8))))
  v0 = ((mean + std * rng.normal(size=lay.n_padded)) * pad).astype(jnp.float32)
  n, length = lay.n_padded, bm.ring_length(index.max_delay, 1)
  state = dict(v=v0, i_syn=jnp.zeros(n, jnp.float32),
               ref=jnp.zeros(n, jnp.int32), key=rng.value,
               buffer=jnp.zeros((1, length, n), jnp.float32),
               current=jnp.zeros((1, 1, n), jnp.float32),
               t=jnp.zeros((), jnp.int32))
  return dict(index=index, cdf=cdf, i_e=per(net.dc), state=plain(state),
              p=model.propagators(dt, nrn["tau_m"], nrn["tau_syn"], nrn["C_m"]),
              theta=nrn["V_th"] - nrn["E_L"],
              v_reset=nrn["V_reset"] - nrn["E_L"],
              ref_steps=int(round(nrn["t_ref"] / dt)),
              w_ext=net.weight_ext, length=length, n=n, layout=lay, dt=dt,
              n_synapses=int(np.asarray(index.count).sum()))


def make_step(net: dict):
  """``step(state, index, cdf, i_e) -> (state, spikes)``: one step of
  ``Microcircuit.step`` (``Delivery._block`` around ``_update``)."""
  from brainshard import models as bm
  from brainshard._models.delivery.events import EVENT_SIZES
  from brainshard._models.delivery.push import clear_slots
  from examples.microcircuit.model import counts_from_cdf
  p, theta, v_reset = net["p"], net["theta"], net["v_reset"]
  ref_steps, w_ext, length = net["ref_steps"], net["w_ext"], net["length"]
  width = 1024 if jax.devices()[0].platform == "cpu" else None  # as Delivery

  def update(s, inputs, cdf, i_e):  # Microcircuit._update
    v, ref, i_syn = s["v"], s["ref"], s["i_syn"]
    free = ref == 0
    v_new = jnp.where(free, v * p["p22"] + i_syn * p["p21"] + i_e * p["p20"],
                      v)
    key, sub = jax.random.split(s["key"])  # RandomState._advance
    u = jax.random.uniform(block_key(sub, 0, 0), v.shape, jnp.float32,
                           0.0, 1.0)
    bg = counts_from_cdf(u, cdf)
    i_syn = i_syn * p["p11"] + inputs[0] + w_ext * bg.astype(jnp.float32)
    spikes = v_new >= theta
    v = jnp.where(spikes, v_reset, v_new)
    ref = jnp.where(spikes, ref_steps, jnp.where(free, 0, ref - 1))
    return dict(s, v=v, ref=ref, i_syn=i_syn, key=key), spikes

  def step(s, index, cdf, i_e):  # Delivery._block with every = 1
    t0 = s["t"]
    buf = clear_slots(s["buffer"], t0, 1, index)
    s, spikes = update(s, s["current"][0], cdf, i_e)
    fired = spikes[None]
    buf = lax.fori_loop(0, 1, lambda k, b: bm.deliver(
        b, fired[k], t0 + k, index, EVENT_SIZES, width), buf)
    nxt = lax.dynamic_slice_in_dim(buf, (t0 + 1) % length, 1, 1)
    return dict(s, t=t0 + 1, buffer=buf, current=nxt.swapaxes(0, 1)), spikes

  return step


def chunk_program(step, n: int, length: int):
  """``jax.jit`` of ``length`` steps from global step ``i0``: ``(state,
  index, cdf, i_e, i0) -> (state, words)``, the spikes as the Recorder's
  word buffer. No donation: bs.Runner donates no State."""

  def chunk(state, index, cdf, i_e, i0):
    base = i0 // spk.BITS

    def body(c, i):
      s, words = c
      s, spikes = step(s, index, cdf, i_e)
      return (s, spk.record_spikes(words, spikes, i, base)), None

    words = jnp.zeros((spk.word_rows(length), n), jnp.uint32)
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
  (global step, neuron) events, as ``Microcircuit.runner().run`` records
  them (``net`` and ``programs`` are on ``run``)."""
  with clock() as build:
    net = network(scale, k_scale, seed, dt, index)
    state = [net["state"]]
    args = (net["index"], net["cdf"], net["i_e"])
    jax.block_until_ready((state, args))
  build_s = build.s
  step, n = make_step(net), net["n"]
  programs: dict[int, object] = {}
  capacity: list[int | None] = [None]  # the Recorder's, kept between runs
  pos = [0]

  def dispatch(start: int, length: int):
    if length not in programs:
      programs[length] = chunk_program(step, n, length)
    state[0], words = programs[length](state[0], *args, np.int32(start))
    comp = spk.compact(words, capacity[0])  # async copy to the host
    capacity[0] = capacity[0] or comp.capacity
    return start, length, words, comp

  def collect(start, length, words, comp):  # Recorder._decode
    while True:
      try:
        return spk.decode(comp, start, length, start // spk.BITS)
      except spk.Overflow as e:
        capacity[0] = spk.grown_capacity(e.needed, words.shape[0] * n)
        comp = spk.compact(words, capacity[0])

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
    return np.concatenate(steps), np.concatenate(neurons)

  run.net, run.programs = net, programs
  return build_s, run
