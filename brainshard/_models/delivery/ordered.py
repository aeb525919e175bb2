"""Sums whose order does not depend on the mesh: the same bits on 1 and 8
devices.

A float sum's last bits depend on the order of its additions, and
``psum`` adds the shards' partial sums in an order of its own. Delivery
never ``psum``s floats (every target adds its inputs in global presynaptic
order); its gradient needs sums over *synapses that live on several
shards* (the cotangent of a neuron's spike sums its synapses onto every
target). :func:`sum_blocks` does those in a fixed order: the target axis is
cut into ``blocks`` equal blocks whatever the mesh (a shard holds
``blocks / n_shards`` of them), each block's partial sums are computed in
the index's (mesh-independent) order, exchanged with an ``all_to_all``
(which moves bits, adds nothing), and added in global block order.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.delivery.ordered import sum_in_order
  >>> sum_in_order(jnp.array([[1e8, 1.], [1., 1.], [-1e8, 1.]]), 0).tolist()
  [0.0, 3.0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["sum_in_order", "sum_blocks"]


def sum_in_order(x: jax.Array, axis: int = 0) -> jax.Array:
  """``x`` summed over ``axis`` as ``((x[0] + x[1]) + x[2]) + ...``: a loop,
  so XLA can neither reassociate it nor pick a reduction tree by shape."""
  x = jnp.moveaxis(x, axis, 0)
  if x.shape[0] <= 8:  # few terms: unrolled (one fusion, same order)
    acc = x[0]
    for i in range(1, x.shape[0]):
      acc = acc + x[i]
    return acc
  return jax.lax.fori_loop(1, x.shape[0], lambda i, acc: acc + x[i], x[0])


def sum_blocks(part: jax.Array, axis: str | None, n_shards: int
               ) -> jax.Array:
  """Partial sums per target block -> their total, per presynaptic neuron of
  this shard, in global block order.

  ``part [..., nbl, n_pre]``: this shard's ``nbl = blocks / n_shards`` blocks'
  partial sums for every global presynaptic id (``n_pre = n_shards *
  n_local``). Returns ``[..., n_local]``: for this shard's own neurons, the
  sum over all ``blocks`` blocks, block 0 first. ``axis``: the mesh axis
  (inside ``shard_map``), or None for one shard."""
  *lead, nbl, n_pre = part.shape
  n_local = n_pre // n_shards
  part = part.reshape(*lead, nbl, n_shards, n_local)
  if n_shards > 1:
    # Shard s receives, from every shard, the partials of s's own neurons;
    # the shard axis then says which shard (which blocks) they came from.
    part = jax.lax.all_to_all(part, axis, part.ndim - 2, part.ndim - 2)
  part = jnp.swapaxes(part, -3, -2)           # [..., src shard, nbl, n_local]
  part = part.reshape(*lead, n_shards * nbl, n_local)  # global block order
  return sum_in_order(part, part.ndim - 2)
