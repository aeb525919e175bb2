"""Delivery that ``jax.grad`` goes through: the forward is :func:`deliver`,
unchanged; the backward is written out (``jax.custom_vjp``), since the
forward's ``while`` loop over fired neurons cannot be reversed.

One call delivers ``m`` steps of spikes (a shard's own ``[B, m, n_local]``,
all-gathered inside) into the ring buffer ``[B, R, L, n_local]`` through
the weights ``weight [capacity]`` (the index's own are ignored). Delivery
is linear in the buffer, the weights and the spikes, so with ``g`` the
buffer's cotangent and synapse ``k`` = (pre ``j``, target, receptor,
delay ``d``):

* the buffer's cotangent is ``g``;
* weight ``k``'s is ``sum over b, steps t of g[b, r, (t + d) % L, target]
  * s[b, t, j]``: a gather per synapse, no sum across synapses;
* spike ``s[b, t, j]``'s is ``sum over j's synapses k of weight[k] * g[b,
  r, (t + d) % L, target]``: j's synapses sit on every shard, so the sum
  runs per fixed block of targets in index order, then over the blocks in
  global order (:func:`~brainshard._models.delivery.ordered.sum_blocks`):
  the same bits on any mesh whose size divides ``blocks``.

Spikes are floats. By default they must be 0 or 1 (a surrogate ``spike``'s
output): the forward delivers the neurons with ``s != 0`` event by event.
``graded=True`` delivers ``weight * s`` for every ``s != 0`` (smooth spikes,
e.g. for finite-difference checks; it visits every such neuron).

Example:
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> from brainshard._models.delivery.grad import deliver_block, presynaptic
  >>> idx = index_from_arrays([0, 0, 1], [1, 1, 0], [0.5, 0.25, -1.0],
  ...                         [1, 2, 1], n=2)
  >>> pre = presynaptic(idx)
  >>> def loss(w, s):  # spikes of 1 step, batch 1: [1, 1, 2]
  ...   buf = deliver_block(jnp.zeros((1, 1, 2, 2)), s, 0, idx, w, pre,
  ...                       blocks=2)
  ...   return (buf[0, 0, 1] * jnp.array([1., 2.])).sum()  # slot of step 1
  >>> gw, gs = jax.grad(loss, (0, 1))(idx.weight, jnp.ones((1, 1, 2)))
  >>> gw.tolist(), gs[0, 0].tolist()
  ([2.0, 0.0, 1.0], [1.0, -1.0])
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from brainshard._transforms.control import cast_varying, vma_tree
from brainshard._models.delivery.events import EVENT_SIZES
from brainshard._models.delivery.index import SynapseIndex, narrowest
from brainshard._models.delivery.ordered import sum_blocks
from brainshard._models.delivery.push import deliver

__all__ = ["deliver_block", "presynaptic"]


def presynaptic(index: SynapseIndex) -> jax.Array:
  """This shard's slots' global presynaptic ids ``[capacity]`` (``n_pre`` in
  unused slots), from its ``indptr``; as narrow as ``n_pre`` allows."""
  cap = index.post.shape[0]
  slots = jnp.arange(cap, dtype=jnp.int32)
  pre = jnp.searchsorted(index.indptr, slots, side="right") - 1
  return pre.astype(narrowest(index.indptr.shape[0] - 1))


class _Config(NamedTuple):
  axis: str | None
  blocks: int
  graded: bool
  sizes: tuple
  width: int | None


def deliver_block(buf: jax.Array, spikes: jax.Array, t0, index: SynapseIndex,
                  weight: jax.Array, pre: jax.Array, *, axis: str | None = None,
                  blocks: int = 8, graded: bool = False,
                  sizes: Sequence[int] = EVENT_SIZES,
                  width: int | None = 1024) -> jax.Array:
  """Delivers steps ``t0 .. t0 + m - 1`` of ``spikes [B, m, n_local]``
  (this shard's; float) into ``buf [B, R, L, n_local]`` with ``weight
  [capacity]``; differentiable in ``buf``, ``spikes`` and ``weight``.

  ``index`` and ``pre`` (:func:`presynaptic`) are this shard's block;
  ``axis`` is the mesh axis inside ``shard_map`` (None: one shard);
  ``blocks``: target blocks of the spikes' cotangent sums (a multiple of
  ``index.n_shards`` dividing ``n_pre``); ``graded``, ``sizes``, ``width``:
  see the module and :func:`deliver`."""
  n_shards = index.n_shards
  if blocks % n_shards or index.n_pre % blocks:
    raise ValueError(
        f"deliver_block: blocks = {blocks} must be a multiple of the "
        f"{n_shards} shard(s) and divide the {index.n_pre} neurons.")
  cfg = _Config(axis if n_shards > 1 else None, int(blocks), bool(graded),
                tuple(sizes), width)
  return _deliver(cfg, buf, spikes, t0, index, weight, pre)


def _gather(spikes: jax.Array, axis: str | None) -> jax.Array:
  if axis is None:
    return spikes
  return jax.lax.all_gather(spikes, axis, axis=spikes.ndim - 1, tiled=True)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _deliver(cfg, buf, spikes, t0, index, weight, pre):
  return _forward(cfg, buf, spikes, t0, index, weight, pre)


def _forward(cfg, buf, spikes, t0, index, weight, pre):
  fired = _gather(spikes, cfg.axis)                  # [B, m, n_pre]
  batch, m = spikes.shape[:2]
  t0 = jnp.asarray(t0, jnp.int32)

  def one(i, buf):
    b, k = i // m, i % m
    s = fired[b, k]
    w = weight
    if cfg.graded:  # each synapse carries its presynaptic neuron's value
      w = weight * jnp.take(s, pre.astype(jnp.int32), mode="fill",
                            fill_value=0)
    idx = dataclasses.replace(index, weight=w)
    out = deliver(buf[b], s != 0, t0 + k, idx, cfg.sizes, cfg.width)
    return jax.lax.dynamic_update_index_in_dim(buf, out, b, 0)

  return jax.lax.fori_loop(0, batch * m, one, buf)


def _fwd(cfg, buf, spikes, t0, index, weight, pre):
  # Residuals: the shard's own spikes (re-gathered backward: n_local, not
  # n_pre, floats kept per call), the step, and the loop-invariant index.
  out = _forward(cfg, buf, spikes, t0, index, weight, pre)
  return out, (spikes, jnp.asarray(t0, jnp.int32), index, weight, pre)


def _bwd(cfg, res, g):
  spikes, t0, index, weight, pre = res
  fired = _gather(spikes, cfg.axis)                  # [B, m, n_pre]
  batch, m, n_pre = fired.shape
  _, _, length, n_local = g.shape
  nbl = cfg.blocks // index.n_shards                 # this shard's blocks
  i32 = lambda x: x.astype(jnp.int32)  # noqa: E731  (narrow index fields)
  post, pre = i32(index.post), i32(pre)
  rec = 0 if index.receptor is None else i32(index.receptor)
  used = post < n_local
  # Where each synapse's spike cotangent goes: [nbl, n_pre + 1] flattened,
  # row = the target's block; unused slots land on the dropped column.
  dst = jnp.where(used, (post // (n_local // nbl)) * (n_pre + 1) + pre,
                  nbl * (n_pre + 1))
  gflat = g.reshape(batch, -1)
  w = weight.astype(g.dtype)

  # One sample and step at a time: [capacity] temporaries, not [B, cap].
  def one(i, carry):
    ct_w, part = carry
    b, k = i // m, i % m
    slot = (t0 + k + i32(index.delay)) % length
    at = jnp.where(used, (rec * length + slot) * n_local + post, gflat.shape[1])
    gk = jnp.take(gflat[b], at, mode="fill", fill_value=0)        # [cap]
    sk = jnp.take(fired[b, k], pre, mode="fill", fill_value=0)
    # Scatter in slot order: per (block, pre) the index's order on any mesh.
    pk = jnp.zeros(nbl * (n_pre + 1), g.dtype).at[dst].add(gk * w,
                                                           mode="drop")
    part = jax.lax.dynamic_update_slice(part, pk[None, None], (k, b, 0))
    return ct_w + gk * sk, part

  init = (jnp.zeros(weight.shape, g.dtype),
          jnp.zeros((m, batch, nbl * (n_pre + 1)), g.dtype))
  # Inside shard_map the sums vary over the mesh axis as g does: so must
  # the loop's initial carry.
  vary = vma_tree(jax.typeof(g))
  init = cast_varying(init, (vary, vary))
  ct_w, part = jax.lax.fori_loop(0, batch * m, one, init)
  part = part.reshape(m, batch, nbl, n_pre + 1)[..., :n_pre]
  ct_s = sum_blocks(part, cfg.axis, index.n_shards)  # [m, B, n_local]
  ct_s = jnp.swapaxes(ct_s, 0, 1).astype(spikes.dtype)
  return g, ct_s, None, None, ct_w.astype(weight.dtype), None


_deliver.defvjp(_fwd, _bwd)
