"""A network's input queue whose weights ``bs.grad`` trains: the ring
buffers and spike exchange of :class:`Delivery`, with the weights in a
``ParamState`` and a differentiable delivery
(:func:`~brainshard._models.delivery.grad.deliver_block`).

``bs.grad(loss, grad_states=net.weight)`` (or ``bs.ParamState``) goes
through the ring buffer and the per-synapse delays; spikes made with a
surrogate (``bm.spike``) carry gradient into the neurons that fired them.
The gradient is the same bits on every mesh whose size divides ``blocks``
(see ``grad.py``), as the forward is.

Differences from :class:`Delivery`: spikes are floats (0 or 1, from
``bm.spike``; any value with ``graded=True``); an optional batch of
``batch`` independent copies of the network's activity, all through the
same synapses; ``update`` may take per-step arguments (the step's
``in_specs``); the weights live in :attr:`weight` (``ParamState``,
``[S * capacity]`` sharded like the index) and the rest of the index in a
plain ``State``, so ``grad_states=bs.ParamState`` sees no integer array.

Example:
  >>> import jax, jax.numpy as jnp, brainshard as bs
  >>> from jax.sharding import PartitionSpec as P
  >>> from brainshard import models as bm
  >>> mesh = jax.make_mesh((1,), ('x',))
  >>> idx = bm.index_from_arrays([0, 0], [1, 1], [2., 3.], [1, 2], n=2)
  >>> net = bm.TrainableDelivery(idx, mesh, every=1, blocks=2)
  >>> v = bs.State(jnp.zeros(2), name='v', spec=P('x'))
  >>> def update(inputs, drive):    # per shard: inputs [1, n_local]
  ...   v.value = v.value + inputs[0]
  ...   return bm.spike(drive)      # neuron 0 is driven from outside
  >>> step = net.step(update, in_specs=P('x'))
  >>> def loss():
  ...   v.value = jnp.zeros(2)
  ...   net.reset()
  ...   bs.for_loop(step, jnp.array([[1., -1.], [-1., -1.], [-1., -1.]]))
  ...   return v.value.sum()        # 2 (step 1) + 3 (step 2), at neuron 1
  >>> bs.value_and_grad(loss, grad_states=net.weight)()
  (Array(5., dtype=float32), Array([1., 1.], dtype=float32))
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.state.state import ParamState, ShortTermState, State
from brainshard._transforms.loops import for_loop
from brainshard._transforms.shard_map.shard_map import shard_map
from brainshard._models.delays import ring_length
from brainshard._models.delivery.delivery import (
    Delivery, on_mesh, queue_states, steps_per_exchange)
from brainshard._models.delivery.events import EVENT_SIZES
from brainshard._models.delivery.grad import deliver_block, presynaptic
from brainshard._models.delivery.index import SynapseIndex

__all__ = ["TrainableDelivery"]


class TrainableDelivery:
  """Delivers a network's float spikes through ``index`` on ``mesh`` axis
  ``axis``, differentiably in the weights and the spikes.

  Args:
    index: the synapses (``n_shards`` = the size of ``axis``).
    mesh: a mesh with axis ``axis``.
    every: steps per spike exchange (``1 .. min_delay``; None: min_delay).
    batch: independent copies of the activity (a leading axis of the
      buffers, of ``update``'s inputs and spikes), or None for none.
    blocks: fixed target blocks of the spikes' cotangent sums: meshes whose
      size divides ``blocks`` give the same bits (``blocks`` must divide the
      neuron axis).
    graded: deliver ``weight * s`` for any spike value ``s`` (default: spikes
      are 0 or 1 and only the neurons with ``s != 0`` are visited).
    dtype: of the weights and buffers (float32; float64 under x64).
    sizes: fired-neuron search sizes (``events.py``).
    name: prefix of the States' names.

  States: :attr:`weight` (``ParamState``), ``index`` and ``pre`` (the rest
  of the index and each slot's presynaptic id), ``buffer`` ``[B, R, L,
  n]``, ``current`` ``[every, B, R, n]`` and ``t`` (replicated).
  """

  def __init__(self, index: SynapseIndex, mesh: Any, *, axis: str = "x",
               every: int | None = None, batch: int | None = None,
               blocks: int = 8, graded: bool = False, dtype: Any = jnp.float32,
               sizes: Sequence[int] = EVENT_SIZES, name: str = "delivery"):
    shards = on_mesh(index, mesh, axis, "TrainableDelivery")
    _check_blocks(index, shards, blocks)
    every = steps_per_exchange(every, index.min_delay, "TrainableDelivery")
    if batch is not None and (not isinstance(batch, int) or batch < 1):
      raise ValueError(f"TrainableDelivery: batch = {batch!r} must be a "
                       "positive int or None.")
    self.mesh, self.axis, self.every, self.batch = mesh, axis, every, batch
    self.blocks, self.graded, self.sizes = blocks, graded, tuple(sizes)
    self.width = 1024 if mesh.devices.flat[0].platform == "cpu" else None
    self.n, self.n_local, self.shards = index.n_pre, index.n_local, shards
    self.length = ring_length(index.max_delay, every)
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    self.weight = ParamState(put(index.weight.astype(dtype), P(axis)),
                             name=f"{name}.weight", spec=P(axis))
    rest = jax.tree.map(lambda a: put(a, P(axis)),
                        dataclasses.replace(index, weight=None))
    self.index = State(rest, name=f"{name}.index", spec=P(axis))
    self.pre = State(_presynaptic(rest, mesh, axis), name=f"{name}.pre",
                     spec=P(axis))
    b, r = batch or 1, index.n_receptors
    self.buffer, self.current, self.t = queue_states(
        mesh, axis, (b, r), self.length, every, self.n, dtype, name)

  reset = Delivery.reset

  def step(self, update: Callable, in_specs: Any = ()) -> Callable:
    """A ``bs.shard_map`` that advances ``every`` steps per call.

    ``update(inputs, *args)`` runs per shard once per step: ``inputs`` is
    ``[R, n_local]`` (``[B, R, n_local]`` with a batch), the input arriving
    in this step; it returns the shard's spikes ``[n_local]`` (``[B,
    n_local]``) as floats, e.g. ``bm.spike(v - v_th)``. ``args`` are the
    call's arguments, split by ``in_specs`` as ``bs.shard_map`` does; with
    ``every > 1`` each has a leading axis of ``every`` steps. The call
    returns the global spikes ``[(every,) (B,) n]``.
    """
    lead = (None,) * ((self.every > 1) + (self.batch is not None))
    return shard_map(lambda *a: self._block(update, *a), mesh=self.mesh,
                     in_specs=in_specs, out_specs=P(*lead, self.axis))

  def _block(self, update: Callable, *args) -> jax.Array:
    m, t0 = self.every, self.t.value
    buf = jax.lax.dynamic_update_slice_in_dim(
        self.buffer.value, jnp.zeros_like(self.current.value).transpose(
            1, 2, 0, 3), t0 % self.length, axis=2)

    def one(inputs, *a):
      x = inputs if self.batch is not None else inputs[0]
      spikes = update(x, *a)
      self.t.value = self.t.value + 1
      want = x.shape[:-2] + (self.n_local,)
      if spikes.shape != want or spikes.dtype != buf.dtype:
        raise ValueError(
            f"TrainableDelivery.step: update returned {spikes.dtype}"
            f"{list(spikes.shape)}; it must return this shard's spikes as "
            f"{buf.dtype}{list(want)} (e.g. bm.spike(v - v_th)).")
      return spikes if self.batch is not None else spikes[None]

    if m == 1:  # no loop of one step
      spikes = one(self.current.value[0], *args)[None]
    else:
      spikes = for_loop(one, self.current.value, *args)   # [m, B, n_local]
    buf = deliver_block(
        buf, jnp.swapaxes(spikes, 0, 1), t0, self.index.value,
        self.weight.value, self.pre.value,
        axis=self.axis, blocks=self.blocks, graded=self.graded,
        sizes=self.sizes, width=self.width)
    nxt = jax.lax.dynamic_slice_in_dim(buf, (t0 + m) % self.length, m, 2)
    self.buffer.value, self.current.value = buf, nxt.transpose(2, 0, 1, 3)
    if self.batch is None:
      spikes = spikes[:, 0]
    return spikes[0] if m == 1 else spikes


def _check_blocks(index: SynapseIndex, shards: int, blocks: int) -> None:
  if not isinstance(blocks, int) or blocks < 1 or blocks % shards or \
      index.n_pre % blocks:
    raise ValueError(
        f"TrainableDelivery: blocks = {blocks!r} must be a multiple of the "
        f"{shards} shard(s) and divide the {index.n_pre} neurons: the "
        "gradient's sums run over these fixed blocks of targets, so meshes "
        "whose size divides blocks give the same bits.")


def _presynaptic(index: SynapseIndex, mesh: Any, axis: str) -> jax.Array:
  """:func:`presynaptic` of every shard, computed where the shard lives."""
  return jax.jit(jax.shard_map(presynaptic, mesh=mesh, in_specs=P(axis),
                               out_specs=P(axis)))(index)
