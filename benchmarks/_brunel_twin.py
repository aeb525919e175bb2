"""The pure-JAX twin of ``examples.brunel`` on one device: the same network,
the same kernels, threaded by hand (the twin the example's ``bm.Network``
is timed against, as ``_microcircuit_twin`` is the microcircuit's).

What it mirrors, piece by piece:

- the network: the synapse index of the example's ``bm.Network`` (built by
  ``brunel``, or given), its arrays taken out once; the neurons' constants
  and initial state from the library's ``iaf_psc_delta``
  (``bm.IafPscDelta.constants`` / ``init_state``, NEST's example's ``V_m``).
- a call (``Delivery._block`` around ``every`` steps of
  ``Network._update``): the ring buffer's ``every`` consumed slots cleared
  (``clear_slots``), then per step, in a ``lax.scan`` over the queued
  input: the ``poisson_generator`` drawn with the library device
  (``bm.PoissonGenerator.emit`` at step ``t - 15``, the connection's key
  as a block key at id 0: the draw over all neurons, as ``Stimulus.add``),
  times ``J`` into receptor 0; ``bm.IafPscDelta.update``; then each step's
  spikes delivered (``bm.deliver``, the sizes, window width and kernel
  choice Delivery passes) and the next ``every`` slots read.
- a chunk: as ``_twin.chunk_program``: the block's spikes recorded
  neuron-major (the network's one ``spike_recorder`` of every neuron,
  ``block_spikes``), compacted with the library's program and decoded.

Same seed, same spikes as the example (tests/test_microcircuit_twin.py).

Example (building takes seconds, hence the skip):
  >>> build_s, run = twin_run(0.02, seed=1, every=15)  # doctest: +SKIP
  >>> steps, neurons = run(45.0)                       # doctest: +SKIP
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from benchmarks import _twin
from benchmarks._harness import clock
from benchmarks._microcircuit_twin import plain
from brainshard._models.network.stimulus import connection_key
from brainshard._simulation.random.blocks import block_key

__all__ = ["network", "make_step", "twin_run"]


def network(scale: float, regime: str = "AI", seed: int = 1,
            dt: float = 0.1, every: int = 15, index=None) -> dict:
  """What ``examples.brunel.brunel(regime, scale, seed=seed)`` builds, as
  arrays on one device (``index``: the example's own, to save a build)."""
  from brainshard import models as bm
  from examples.brunel import model
  g, eta = model.REGIMES[regime]
  n_e, n_i = round(10_000 * scale), round(2_500 * scale)
  if index is None:
    net, *_ = model.brunel(regime, scale, seed=seed, dt=dt,
                           mesh=jax.make_mesh((1,), ("x",),
                                              devices=jax.devices()[:1]),
                           exchange_every=every)
    net.build()
    index = net.delivery.index.value
  if index.n_shards != 1 or index.n_receptors != 1:
    raise ValueError("the twin writes out Delivery on one shard with one "
                     "receptor.")
  index = plain(index)
  c_e, J = int(0.1 * n_e), 0.1 / scale
  nrn = {k: v for k, v in model.NEURON.items() if k != "V_m"}
  neuron = bm.IafPscDelta(**nrn)
  n = n_e + n_i
  state = neuron.init_state(n, jnp.float32, neuron.params)
  state["V_m"][:] = model.NEURON["V_m"]
  nu_th = nrn["V_th"] / (J * c_e * nrn["tau_m"])
  pg = bm.PoissonGenerator(rate=1000.0 * eta * nu_th * c_e)
  length = bm.ring_length(index.max_delay, every)
  state = dict(state, buffer=jnp.zeros((1, length, n), jnp.float32),
               current=jnp.zeros((every, 1, n), jnp.float32),
               t=jnp.zeros((), jnp.int32))
  return dict(index=index, model=neuron,
              consts=neuron.constants(neuron.params, dt),
              pg=pg, pg_consts=pg.constants(dt),
              key=block_key(connection_key(seed, 0), 0, 0), J=J,
              delay=int(bm.delay_steps(1.5, dt)), every=every,
              length=length, n=n, dt=dt, state=plain(state),
              n_synapses=int(np.asarray(index.count).sum()))


def make_step(net: dict):
  """``step(state, index) -> (state, spikes [every, n])``: one call of the
  example's network (``Delivery._block`` around ``Network._update``)."""
  from brainshard import models as bm
  from brainshard._models.delivery.events import EVENT_SIZES
  from brainshard._models.delivery.push import clear_slots
  neuron, consts, pg, c_pg = net["model"], net["consts"], net["pg"], \
      net["pg_consts"]
  key, J, delay, m = net["key"], net["J"], net["delay"], net["every"]
  length, n = net["length"], net["n"]
  width = 1024 if jax.devices()[0].platform == "cpu" else None  # as Delivery
  targets = jnp.arange(n, dtype=jnp.int32)

  def update(s, inputs):  # Network._update
    t = s["t"]
    counts = pg.emit(c_pg, t - delay, targets, key, spec=P())
    inputs = inputs.at[0].add(J * counts.astype(jnp.float32))
    old = {k: s[k] for k in neuron.initial}
    new, spikes = neuron.update(consts, old, inputs, jnp.zeros(n))
    return dict(s, **new, t=t + 1), spikes

  def step(s, index):  # Delivery._block
    t0 = s["t"]
    buf = clear_slots(s["buffer"], t0, m, index)
    s, fired = lax.scan(update, s, s["current"])         # [m, n]
    buf = lax.fori_loop(0, m, lambda k, b: bm.deliver(
        b, fired[k], t0 + k, index, EVENT_SIZES, width), buf)
    nxt = lax.dynamic_slice_in_dim(buf, (t0 + m) % length, m, 1)
    return dict(s, buffer=buf, current=nxt.swapaxes(0, 1)), fired

  return step


def twin_run(scale: float, regime: str = "AI", seed: int = 1,
             chunk: int = 200, dt: float = 0.1, every: int = 15, index=None):
  """Builds the network; returns ``(build_s, run(ms) -> (steps, neurons))``,
  each call continuing the simulation (``chunk``: calls per chunk)."""
  with clock() as build:
    net = network(scale, regime, seed, dt, every, index)
    jax.block_until_ready((net["state"], net["index"]))
  m = net["every"]
  src = _twin.Source(lambda s: s.T.reshape(-1),        # block_spikes
                     lambda c, f: (c * m + f % m, f // m))
  run = _twin.twin_run(make_step(net), net["state"], (net["index"],), [src],
                       chunk=chunk, calls_per_ms=1.0 / (dt * m))
  run.net = net
  return build.s, run

