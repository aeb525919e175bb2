"""The pure-JAX twin of a ``bm.Network`` on one device (the ``twin`` column
of ``python -m benchmarks nest`` for Brunel's model A), and the same step
with its parts switched off (the profile of :mod:`benchmarks._nest_profile`).

What it mirrors of a built network, piece by piece:

- its arrays, taken out once: the synapse index, each model group's
  model, constants and initial state (``net.groups``), the devices'
  connections (``Stimulus``: device, targets, weight, delay, receptor,
  number), the spike recorders' id ranges, the exchange interval ``every``;
- a call (``Delivery._block`` around ``Network._update``): clear the
  consumed ring-buffer slots (``clear_slots``), ``every`` steps of the
  neuron update (``lax.scan`` over the queued input; each step adds each
  device's draw, ``device.emit`` at ``t - delay`` with the connection's
  block key, and runs each group's ``model.update``), then one
  ``bm.deliver`` per step of the fired neurons, and the read of the next
  ``every`` slots: the library kernels with the sizes, window width and
  kernel choice ``Delivery`` passes;
- a chunk: ``jax.jit`` of a ``lax.scan`` over calls, no donation (as
  ``bs.Runner``), each spike recorder's ``[every, width]`` block ORed
  into its word buffer as ``SpikeRecorder.monitor`` lays it out
  (neuron-major); after each dispatch the library's compaction per buffer,
  one chunk dispatched ahead, then ``spikes.decode``.

No ``bs.State``, ``bs.jit``, ``bs.shard_map``, ``bs.Runner`` or
``bm.Network`` in the time-stepping. Same seed, same spikes as the network
(tests/test_bench_nest.py).

``parts`` switches pieces off for the profile: ``drive`` (the devices),
``update`` (the neuron models), ``deliver`` (the synapses), ``record`` (the
recorders); with ``replay`` the spikes delivered and recorded are given
(the real run's), so that switching a part off leaves the others' work as
it was.

Example (the parts a profile switches off, cumulatively):
  >>> [sorted(p) for p in cumulative_parts()][:2]
  [[], ['update']]
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P, SingleDeviceSharding

from benchmarks import _twin
from benchmarks._microcircuit_twin import plain
from brainshard._simulation.monitors import spikes as spk
from brainshard._simulation.random.blocks import block_key

__all__ = ["PARTS", "cumulative_parts", "arrays", "make_call",
           "chunk_program", "Twin"]

# The parts of a call, in the order the profile switches them on.
PARTS = ("update", "drive", "deliver", "record")


def cumulative_parts() -> list[frozenset]:
  """The profile's variants: none of the parts, then one more at a time."""
  return [frozenset(PARTS[:k]) for k in range(len(PARTS) + 1)]


def arrays(net, stimuli, recorders) -> dict:
  """A built ``net``'s arrays on one device. ``stimuli``: its device
  connections (``Stimulus`` tuples, in connection order); ``recorders``:
  each spike recorder's ``(first, stop)`` id range."""
  from brainshard._models.delays import ring_length
  d, lay = net.delivery, net.layout
  if net.mesh.shape[net.axis] != 1:
    raise ValueError("the twin writes out the network on one shard")
  groups = []
  for g in net.groups:
    mask = None
    if not g.everything:
      mask = np.zeros(lay.n_padded, bool)
      for a, b in g.ranges:
        mask[a:b] = True
    groups.append(dict(model=g.model, fixed=g.fixed, mask=mask))
  stims = []
  for s in stimuli:
    key = None
    if s.device.random:  # the connection's own key (Stimulus.add)
      key = jax.random.fold_in(jax.random.key(net.seed), 0x5EED + s.number)
      key = block_key(key, 0, jnp.uint32(s.ids[0]))
    stims.append((s, s.device.constants(net.dt), key))
  host = lambda tree: jax.tree.map(np.asarray, tree)  # noqa: E731
  # fresh arrays on one device (out of the mesh), the network's values
  state = dict(groups=[host({k: s.value for k, s in g.states.items()})
                       for g in net.groups],
               buffer=np.zeros(d.buffer.value.shape, d.buffer.value.dtype),
               current=np.zeros(d.current.value.shape, d.current.value.dtype),
               t=np.zeros((), np.int32))
  index = d.index.value
  dev = jax.devices()[0]
  return dict(index=plain(index), state=jax.device_put(state, dev),
              consts=plain([g.constants.value for g in net.groups]),
              groups=groups, stims=stims, recorders=list(recorders),
              every=d.every, length=ring_length(index.max_delay, d.every),
              n=lay.n, n_padded=lay.n_padded, dt=net.dt, dtype=net.dtype,
              seed=net.seed,
              width=d.width, n_synapses=int(np.asarray(index.count).sum()))


def make_call(a: dict, parts=frozenset(PARTS), network_drive: bool = False):
  """``call(state, index, consts, replay) -> (state, spikes [every,
  n_padded])``: one exchange interval. ``replay`` (``[every, n_padded]``
  bool, or None) replaces the neurons' spikes as what is delivered and
  returned. ``network_drive``: the drive through the network's own
  ``Stimulus.add`` (the same values; the profile times the difference)."""
  from brainshard import models as bm
  from brainshard._models.delivery.events import EVENT_SIZES
  from brainshard._models.delivery.push import clear_slots
  m, length, n, dtype = a["every"], a["length"], a["n_padded"], a["dtype"]
  ids = jnp.arange(n, dtype=jnp.int32)
  spike_rows = max([s.receptor + 1 for s, _, _ in a["stims"]
                    if s.device.emits == "spikes"], default=0)

  def drive(inputs, currents, t):  # Stimulus.add, on one shard
    if spike_rows > inputs.shape[0]:
      inputs = jnp.concatenate([inputs, jnp.zeros(
          (spike_rows - inputs.shape[0], n), dtype)])
    for s, c, key in a["stims"]:
      if network_drive:
        inputs, currents = s.add(inputs, currents, t, ids, a["seed"],
                                 a["dt"], dtype, 1)
        continue
      start, stop = s.ids
      value = s.device.emit(c, t - s.delay, jnp.arange(stop - start), key,
                            dtype=dtype, spec=P())
      value = s.weight * value.astype(dtype)
      if s.device.emits == "current":
        currents = currents.at[start:stop].add(value)
      else:
        inputs = inputs.at[s.receptor, start:stop].add(value)
    return inputs, currents

  def neurons(groups, consts, inputs, t):  # Network._update
    inputs, currents = inputs.astype(dtype), jnp.zeros(n, dtype)
    if "drive" in parts:
      inputs, currents = drive(inputs, currents, t)
    spikes, out = jnp.zeros(n, bool), []
    for g, c, old in zip(a["groups"], consts, groups):
      r = g["model"].n_receptors
      x = inputs
      if x.shape[0] < r:
        x = jnp.concatenate([x, jnp.zeros((r - x.shape[0], n), dtype)])
      new, fired = g["model"].update({**g["fixed"], **c}, old, x[:r],
                                     currents)
      if g["mask"] is not None:
        inside = jnp.asarray(g["mask"])
        new = {k: jnp.where(inside, new[k], old[k]) for k in new}
        fired = fired & inside
      out.append(new)
      spikes = spikes | fired
    return out, spikes & (ids < a["n"])

  def call(s, index, consts, replay=None):  # Delivery._block
    t0 = s["t"]
    buf = clear_slots(s["buffer"], t0, m, index)

    def one(carry, inputs):
      groups, t = carry
      if "update" in parts:
        groups, spikes = neurons(groups, consts, inputs, t)
      else:
        spikes = jnp.zeros(n, bool)
      return (groups, t + 1), spikes

    if m == 1:  # as Delivery: no loop of one step
      (groups, _), spikes = one((s["groups"], t0), s["current"][0])
      spikes = spikes[None]
    else:
      (groups, _), spikes = lax.scan(one, (s["groups"], t0), s["current"])
    if replay is not None:
      spikes = replay
    if "deliver" in parts:
      buf = lax.fori_loop(0, m, lambda k, b: bm.deliver(
          b, spikes[k], t0 + k, index, EVENT_SIZES, a["width"]), buf)
    nxt = lax.dynamic_slice_in_dim(buf, (t0 + m) % length, m, 1)
    return dict(groups=groups, buffer=buf, current=nxt.swapaxes(0, 1),
                t=t0 + m), spikes

  return call


def _block(spikes, first: int, stop: int, n_padded: int):
  """A recorder's vector of one call (``SpikeRecorder.monitor``)."""
  if (first, stop) != (0, n_padded):
    spikes = spikes[:, first:stop]
  return spikes.T.reshape(-1)


def chunk_program(a: dict, call, length: int, replay: bool = False,
                  record: bool = True):
  """``jax.jit`` of ``length`` calls from call ``i0``: ``(state, index,
  consts, i0[, replay [length, every, n]]) -> (state, words)``."""
  recs, n_padded = a["recorders"], a["n_padded"]

  def chunk(state, index, consts, i0, xs=None):
    base = i0 // spk.BITS

    def body(c, x):
      s, words = c
      i, r = x
      s, spikes = call(s, index, consts, r)
      if record:
        words = [spk.record_spikes(w, _block(spikes, f, e, n_padded), i, base)
                 for w, (f, e) in zip(words, recs)]
      return (s, words), None

    words = [jnp.zeros((spk.word_rows(length), (e - f) * a["every"]),
                       jnp.uint32) for f, e in recs] if record else []
    steps = i0 + jnp.arange(length, dtype=jnp.int32)
    (state, words), _ = lax.scan(body, (state, words), (steps, xs))
    return state, words

  # outputs pinned to the device (see _microcircuit_twin.chunk_program)
  out = jax.jit(chunk, out_shardings=SingleDeviceSharding(jax.devices()[0]))
  return out if replay else (lambda s, idx, c, i0: out(s, idx, c, i0))


class Twin(_twin.TwinRun):
  """The twin of ``a`` (:func:`arrays`), run in chunks of ``chunk`` calls:
  ``run(ms)`` continues the simulation and returns its spikes as sorted
  ``(steps, neurons)`` events, as the network's recorders record them."""

  def __init__(self, a: dict, chunk: int):
    call, every = make_call(a), a["every"]
    sources = [_twin.Source(
        lambda spikes, f=f, e=e: _block(spikes, f, e, a["n_padded"]),
        lambda calls, flat, f=f: (calls * every + flat % every,
                                  flat // every + f))  # SpikeRecorder.spikes
               for f, e in a["recorders"]]
    super().__init__(lambda s, index, consts: call(s, index, consts, None),
                     a["state"], (a["index"], a["consts"]), sources,
                     chunk=chunk, calls_per_ms=1.0 / (every * a["dt"]))
    self.a = a

  def run(self, ms: float):
    if int(round(ms / self.a["dt"])) % self.a["every"]:
      raise ValueError(f"{ms} ms is not a whole number of exchange "
                       f"intervals ({self.a['every']} steps)")
    return self(ms)

