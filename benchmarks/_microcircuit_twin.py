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
- a step (``Network._update`` inside ``Delivery._block``): the eight
  populations' ``poisson_generator`` s drawn in one pass, as the network
  draws them (``PoissonPass.values`` at step ``t - 15``: each connection's
  key ``fold_in(key(seed), 0x5EED + i)`` folded with its step, every
  neuron's element of its population's draw), times ``w_ext`` into
  receptor 0; the neuron update
  ``bm.IafPscExp.update``; the ring buffer of ``Delivery._block`` written
  out on arrays (clear / update / deliver / read, ``every = 1``, two
  receptors), clearing and delivering through the library kernels
  ``clear_slots`` and ``bm.deliver`` with the sizes, window width and
  kernel choice Delivery passes.
- a chunk (``_twin.chunk_program``): ``jax.jit`` of a ``lax.scan`` over
  the chunk's global step indices (the example's chunk: 500 steps), no
  donation (``bs.Runner``
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

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from benchmarks import _twin
from benchmarks._harness import clock
from brainshard._models.network.poisson_pass import PoissonPass
from brainshard._models.network.stimulus import Stimulus

__all__ = ["network", "plain", "make_step", "twin_run"]


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
  delay = int(bm.delay_steps(params.DELAY_POISSON, dt))
  # connection i: population i's generator, all drawn in one pass
  background = PoissonPass(tuple(
      Stimulus(bm.PoissonGenerator(rate=float(params.BG_RATE * k)),
               lay.range(name), net.weight_ext, delay, 0, i)
      for i, (name, k) in enumerate(zip(names, net.k_ext))), 0)
  n, length = lay.n_padded, bm.ring_length(index.max_delay, 1)
  state = dict(state, buffer=jnp.zeros((2, length, n), jnp.float32),
               current=jnp.zeros((1, 2, n), jnp.float32),
               t=jnp.zeros((), jnp.int32))
  return dict(index=index, model=neuron, consts=plain(consts),
              background=background, seed=seed, state=plain(state),
              length=length, n=n, layout=lay, dt=dt,
              n_synapses=int(np.asarray(index.count).sum()))


def make_step(net: dict):
  """``step(state, index, consts) -> (state, spikes)``: one step of the
  example's network (``Delivery._block`` around ``Network._update``)."""
  from brainshard import models as bm
  from brainshard._models.delivery.events import EVENT_SIZES
  from brainshard._models.delivery.push import clear_slots
  neuron, background = net["model"], net["background"]
  seed, dt, length, n = net["seed"], net["dt"], net["length"], net["layout"].n
  width = 1024 if jax.devices()[0].platform == "cpu" else None  # as Delivery

  def update(s, inputs, consts, t):  # Network._update
    counts = background.values(t, 0, n, seed, dt, jnp.float32)
    inputs = inputs.at[0, :n].add(counts)
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


def twin_run(scale: float, k_scale: float, seed: int = 1, chunk: int = 500,
             dt: float = 0.1, index=None):
  """Builds the network; returns ``(build_s, run(ms) -> (steps, neurons))``:
  each call continues the simulation and returns its spikes as sorted
  (global step, neuron) events, as the example's spike recorders record
  them together (``net`` and ``programs`` are on ``run``)."""
  with clock() as build:
    net = network(scale, k_scale, seed, dt, index)
    args = (net["index"], net["consts"])
    jax.block_until_ready((net["state"], args))
  lay = net["layout"]
  sources = [_twin.Source(lambda s, a=a, b=b: s[a:b],
                          lambda c, f, a=a: (c, f + a))
             for a, b in (lay.range(name) for name in lay.names)]
  run = _twin.TwinRun(make_step(net), net["state"], args, sources,
                      chunk=chunk, calls_per_ms=1.0 / dt)
  run.net = net
  return build.s, run
