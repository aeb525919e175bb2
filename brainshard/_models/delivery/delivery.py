"""A network's input queue on a mesh: ring buffer States, the neurons' step,
and the spike exchange between shards once per ``every`` steps.

:class:`Delivery` owns three States, all sharded over the neuron axis: the
synapse index, the ring buffer of future input ``[R, L, n]`` and the input
of the next ``every`` steps ``[every, R, n]``. :meth:`Delivery.step` wraps a
per-shard neuron update ``update(inputs [R, n_local]) -> spikes [n_local]``
into a ``bs.shard_map`` that advances ``every`` steps per call: the neurons
run ``every`` steps on input already queued, then the spikes of those steps
are all-gathered *once* and delivered (the min-delay rule). With ``every <=
min_delay`` no spike is needed before the exchange, so any ``every`` gives
the spikes of exchanging every step, bit for bit: a slot receives the same
additions in the same order (by step, then by global presynaptic id).

Why the step reads its input at the end of the previous call rather than
at its start: on XLA:CPU, reading a slot of the buffer and then clearing it
in the same loop step copies the whole buffer every step (the read and the
write are not ordered by data). Here every step of a call is one chain:
clear the consumed slots -> scatter the new spikes -> read the next slots.

Example:
  >>> import jax, jax.numpy as jnp, brainshard as bs
  >>> from jax.sharding import PartitionSpec as P
  >>> from brainshard._models.delivery.delivery import Delivery
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> mesh = jax.make_mesh((1,), ('x',))
  >>> idx = index_from_arrays([0], [1], [2.5], [3], n=2)   # 0 -> 1, 3 steps
  >>> net = Delivery(idx, mesh, every=1)    # exchange every step
  >>> got = bs.State(jnp.zeros(2), name='got', spec=P('x'))
  >>> def update(inputs):                # per shard: inputs [1, n_local]
  ...   got.value = inputs[0]
  ...   first = jax.lax.axis_index('x') * 2 + jnp.arange(2) == 0
  ...   return first & (net.t.value == 0)  # neuron 0 fires in step 0
  >>> step = net.step(update)
  >>> arrived = []
  >>> for _ in range(5):
  ...   spikes = step()
  ...   arrived.append(float(got.value[1]))
  >>> arrived          # the spike of step 0 arrives in step 0 + 3
  [0.0, 0.0, 0.0, 2.5, 0.0]
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.state.state import ParamState, ShortTermState
from brainshard._simulation.monitors.records import SpikeData
from brainshard._transforms.loops import for_loop
from brainshard._transforms.shard_map.shard_map import shard_map
from brainshard._models.delays import ring_length
from brainshard._models.delivery.push import clear_slots, deliver
from brainshard._models.delivery.events import EVENT_SIZES
from brainshard._models.delivery.index import SynapseIndex

__all__ = ["Delivery", "delay_bounds", "block_spikes", "unblock_spikes",
           "on_mesh", "steps_per_exchange", "queue_states"]


class Delivery:
  """Delivers a network's spikes through ``index`` on ``mesh`` axis ``axis``.

  Args:
    index: the synapses (a ``SynapseIndex`` with ``n_shards`` = the size of
      ``axis``; delays in steps).
    mesh: a ``jax.sharding.Mesh`` with axis ``axis``.
    every: steps per spike exchange (``1 <= every <= index.min_delay``);
      ``None`` takes ``index.min_delay``.
    sizes: fired-neuron search sizes (see ``events.py``).
    kernel: ``deliver``'s kernel: ``"auto"`` (native on CPU for an index of
      4 M synapses a shard or more where numba is installed, else XLA),
      ``"native"`` or ``"xla"``; the same spikes whichever runs.
    name: prefix of the States' names.
    dtype: the ring buffer's float dtype (float64 needs ``jax_enable_x64``).
    receptors: how many receptors the neurons read (``inputs`` rows);
      default: the index's. An index with synapses on a receptor the
      neurons do not read is an error (JAX would clamp ``inputs[r]`` to the
      last row without a word).
    plastic: plastic projections with their own index and delivery
      (``plastic.py``'s ``PlasticSynapses``), pushed into the same buffer
      after the static synapses of each step; their delays and receptors
      count for ``every``, the buffer's length and its receptors.

  States: ``index`` (ParamState), ``buffer`` ``[R, L, n]``, ``current``
  ``[every, R, n]`` (the input of the next ``every`` steps) and ``t`` (the
  next step's index, replicated).
  """

  def __init__(self, index: SynapseIndex, mesh: Any, *, axis: str = "x",
               every: int | None = None, sizes: Sequence[int] = EVENT_SIZES,
               kernel: str = "auto", name: str = "delivery",
               dtype: Any = jnp.float32, receptors: int | None = None,
               plastic: Sequence[Any] = ()):
    on_mesh(index, mesh, axis, "Delivery")
    self.plastic = [p for p in plastic if not p.empty]
    min_delay, max_delay, n_receptors = delay_bounds(index, self.plastic)
    every = steps_per_exchange(every, min_delay, "Delivery")
    r = n_receptors if receptors is None else receptors
    if isinstance(r, (bool, np.bool_)) or not isinstance(
        r, (int, np.integer)) or r < n_receptors:
      raise ValueError(
          f"Delivery: receptors = {receptors!r}, but the index has synapses "
          f"on receptors 0 .. {n_receptors - 1}; the neurons must read "
          f"all {n_receptors}.")
    self.mesh, self.axis, self.every, self.sizes = mesh, axis, every, sizes
    # The time one call advances: a Runner of this step takes it as its dt.
    self.time_per_call = None if index.dt is None else index.dt * every
    if kernel not in ("auto", "native", "xla"):
      raise ValueError(f"Delivery: kernel must be 'auto', 'native' or 'xla', "
                       f"got {kernel!r}.")
    self.kernel = kernel
    # Long rows by windows on CPU; elsewhere a loop iteration costs kernel
    # launches, so 16 neurons an iteration as before (not measured on GPU).
    cpu = mesh.devices.flat[0].platform == "cpu"
    self.width = 1024 if cpu else None
    self.n, self.n_local = index.n_pre, index.n_local
    self.length = ring_length(max_delay, every)
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    self.index = ParamState(jax.tree.map(lambda a: put(a, P(axis)), index),
                            name=f"{name}.index", spec=P(axis))
    self.buffer, self.current, self.t = queue_states(
        mesh, axis, (r,), self.length, every, self.n, dtype, name)

  def reset(self) -> None:
    """Empties the queue and sets the step counter to 0."""
    for state in (self.buffer, self.current, self.t):
      state.value = jnp.zeros_like(state.value)

  def step(self, update: Callable[[jax.Array], jax.Array]) -> Callable:
    """A ``bs.shard_map`` that advances ``every`` steps per call.

    ``update(inputs)`` runs per shard once per step: ``inputs [R, n_local]``
    (float32) is the input arriving in this step per receptor; it returns
    the shard's spikes ``[n_local]`` (bool) and may read and write States.
    The call returns the global spikes ``[n]`` (``every == 1``) or ``[every,
    n]``; :attr:`t` is the index of the step being updated.
    """
    out = P(self.axis) if self.every == 1 else P(None, self.axis)
    step = shard_map(lambda: self._block(update), mesh=self.mesh,
                     in_specs=(), out_specs=out)
    # what bs.Runner checks its dt against (the recorded times follow it)
    step.time_per_call = self.time_per_call
    return step

  def _block(self, update: Callable) -> jax.Array:
    m, t0 = self.every, self.t.value
    # Clear the slots this call consumes (read into `current` last call).
    index = self.index.value
    buf = clear_slots(self.buffer.value, t0, m, index, self.kernel)

    def one(inputs):
      spikes = update(inputs)
      self.t.value = self.t.value + 1
      if spikes.shape != (self.n_local,) or spikes.dtype != jnp.bool_:
        raise ValueError(
            f"Delivery.step: update returned {spikes.dtype}{list(spikes.shape)}"
            f"; it must return this shard's spikes, bool[{self.n_local}].")
      return spikes

    if m == 1:  # no loop of one step: a scan costs ~10 us a step on CPU
      spikes = one(self.current.value[0])[None]
    else:
      spikes = for_loop(one, self.current.value)           # [m, n_local]
    fired = self._gather(spikes)                            # [m, n]
    if self.plastic:
      buf = self._with_plastic(buf, fired, t0, index)
    else:
      buf = jax.lax.fori_loop(
          0, m, lambda k, b: deliver(b, fired[k], t0 + k, index, self.sizes,
                                     self.width, kernel=self.kernel),
          buf)
    nxt = jax.lax.dynamic_slice_in_dim(buf, (t0 + m) % self.length, m, 1)
    self.buffer.value, self.current.value = buf, nxt.swapaxes(0, 1)
    return spikes[0] if m == 1 else spikes

  def _with_plastic(self, buf, fired, t0, index):
    """Each step of the block: the static synapses, then each plastic
    projection (their States read once, carried through the loop)."""
    plastic = self.plastic
    read = [p.read() for p in plastic]
    consts = [c for _, c in read]

    def one(k, carry):
      b, carried = carry
      b = deliver(b, fired[k], t0 + k, index, self.sizes, self.width,
                  kernel=self.kernel)
      new = []
      for p, c, v in zip(plastic, consts, carried):
        v, b = p.push(v, c, b, fired[k], t0 + k, k)
        new.append(v)
      return b, new

    buf, carried = jax.lax.fori_loop(
        0, self.every, one, (buf, [v for v, _ in read]))
    for p, v in zip(plastic, carried):
      p.write(v)
    return buf

  def _gather(self, spikes: jax.Array) -> jax.Array:
    """All shards' spikes. One device: no all-gather (XLA:CPU runs even a
    one-device all-gather as a real collective, ~10% of a small step)."""
    if self.mesh.shape[self.axis] == 1:
      return spikes
    return jax.lax.all_gather(spikes, self.axis, axis=1, tiled=True)


def queue_states(mesh: Any, axis: str, rows: tuple, length: int, every: int,
                 n: int, dtype: Any, name: str) -> tuple:
  """The queue's States, zero, split over the neurons: the ring buffer
  ``[*rows, L, n]``, the input of the next ``every`` steps ``[every, *rows,
  n]`` and the next step's index ``t`` (replicated)."""
  # Zeros from the host: jnp.zeros compiles a program per shape and dtype,
  # four of them before a small network's first spike.
  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
  spec = P(*(None,) * (len(rows) + 1), axis)
  buffer = ShortTermState(put(np.zeros((*rows, length, n), dtype), spec),
                          name=f"{name}.buffer", spec=spec)
  current = ShortTermState(put(np.zeros((every, *rows, n), dtype), spec),
                           name=f"{name}.current", spec=spec)
  t = ShortTermState(put(np.zeros((), np.int32), P()), name=f"{name}.t",
                     spec=P())
  return buffer, current, t


def on_mesh(index: SynapseIndex, mesh: Any, axis: str, owner: str) -> int:
  """The shards of ``axis``, after checking ``index`` was built for them
  (errors name ``owner``)."""
  if axis not in mesh.shape:
    raise ValueError(f"{owner}: the mesh has axes {tuple(mesh.shape)}, "
                     f"not {axis!r}.")
  shards = mesh.shape[axis]
  if index.n_shards != shards:
    raise ValueError(
        f"{owner}: the index was built for {index.n_shards} shard(s), the "
        f"mesh axis {axis!r} has {shards}; build it for this mesh.")
  if index.n_pre != index.n_local * shards:
    raise ValueError(
        f"{owner}: the index has n_pre = {index.n_pre} presynaptic ids but "
        f"{index.n_local} x {shards} = {index.n_local * shards} targets; a "
        "network's sources and targets are the same padded axis.")
  return shards


def steps_per_exchange(every: Any, min_delay: int, owner: str) -> int:
  """``every`` (None: the shortest delay) as an int in ``[1, min_delay]``:
  a spike must not be needed before the exchange that carries it."""
  every = min_delay if every is None else every
  if isinstance(every, (bool, np.bool_)) or not isinstance(
      every, (int, np.integer)) or not 1 <= every <= min_delay:
    raise ValueError(
        f"{owner}: every = {every!r} steps per exchange must be an int in "
        f"[1, min_delay = {min_delay}]: a spike must not be needed "
        "before the exchange that carries it.")
  return int(every)


def delay_bounds(index: SynapseIndex, plastic: Sequence[Any] = ()
                 ) -> tuple[int, int, int]:
  """``(min_delay, max_delay, n_receptors)`` over the static index and the
  plastic projections, an index without synapses not counting (none: 1,
  1 and the static index's receptors)."""
  parts = [p for p in [index, *plastic]
           if getattr(p, "max_degree", 1) and not getattr(p, "empty", False)]
  lo = min((p.min_delay for p in parts), default=1)
  hi = max((p.max_delay for p in parts), default=1)
  r = max([index.n_receptors] + [p.n_receptors for p in plastic])
  return lo, hi, r


def block_spikes(out: jax.Array) -> jax.Array:
  """A ``bs.SpikeMonitor`` source for a step of ``every > 1`` steps per call:
  its ``[every, n]`` spikes as one vector ``[n * every]`` (neuron-major, so
  the vector keeps the neuron axis' sharding: no communication). Decode the
  record with :func:`unblock_spikes`."""
  return out.T.reshape(-1)


def unblock_spikes(data: Any, every: int, dt: float | None = None) -> Any:
  """The ``SpikeData`` of a ``block_spikes`` record (one entry per call of
  ``every`` steps) as per-step events, sorted by step then neuron; ``dt``
  is the step (default: the record's ``dt / every``, the Runner having
  run with ``dt = every * step``)."""
  flat = np.asarray(data.neurons, np.int64)
  steps = np.asarray(data.steps, np.int64) * every + flat % every
  neurons = flat // every
  order = np.lexsort((neurons, steps))
  return SpikeData(steps[order], neurons[order].astype(np.int32),
                   data.n // every, data.dt / every if dt is None else dt)
