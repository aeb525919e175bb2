"""Which neurons fired: their global ids, in increasing order, found fast.

Delivery visits only the neurons that fired. On a CPU, ``jnp.nonzero`` (a
cumulative sum over all ``n`` neurons) costs 0.6-1.5 ms a step at 77 k
neurons, so :func:`fired_ids` takes a ``lax.top_k``-over-blocks path for
small counts (unsorted, it also serves the integer-count kernels of
:mod:`~brainshard._models.delivery.counts`) and :func:`first_fired` picks the
smallest of a few fixed sizes that holds this step's spikes
(:func:`by_size`, the one chain of ``lax.cond`` over sizes, which the
integer-count kernels use too).

The ids come back sorted (``top_k`` orders by value, not by id): every
target then sums its inputs in global presynaptic order whatever the size
branch and the number of devices.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.delivery.events import fired_ids
  >>> fired = jnp.zeros(100, bool).at[jnp.array([70, 3, 41])].set(True)
  >>> fired_ids(fired, 4).tolist()
  [3, 41, 70, 100]
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

__all__ = ["EVENT_SIZES", "fired_ids", "first_fired", "by_size"]

# Sizes of the fired-id search (the first that holds the spikes runs); more
# spikes than the largest are found in several passes (see delivery.py).
EVENT_SIZES = (4, 16, 64, 256, 1024)


def fired_ids(fired: jax.Array, size: int, block: int = 16, *,
              sort: bool = True) -> jax.Array:
  """int32 ``[size]``: the ids of the neurons that fired, increasing, then
  ``n`` (= ``fired.shape[0]``) as filler; correct when at most ``size``
  fired. ``sort=False`` skips the sort (for order-free integer counts).

  Two ``lax.top_k`` calls over blocks of ``block`` neurons (first the blocks
  with a spike, then the neurons in those): on a CPU 3-7x faster than one
  ``top_k`` over all n, itself about 2x faster than ``jnp.nonzero``.
  """
  n = fired.shape[0]
  if size >= n or size > 1024:
    return jnp.nonzero(fired, size=size, fill_value=n)[0].astype(jnp.int32)
  if size * block >= n:
    val, idx = jax.lax.top_k(fired.astype(jnp.float32), size)
    ids = jnp.where(val > 0, idx, n)
  else:
    n_blocks = -(-n // block)
    blocks = jnp.pad(fired, (0, n_blocks * block - n)).reshape(n_blocks, block)
    _, hit = jax.lax.top_k(blocks.any(1).astype(jnp.float32), size)
    val, j = jax.lax.top_k(blocks[hit].ravel().astype(jnp.float32), size)
    ids = jnp.where(val > 0, hit[j // block] * block + j % block, n)
  return (jnp.sort(ids) if sort else ids).astype(jnp.int32)


def first_fired(fired: jax.Array, count, cap: int,
                sizes: Sequence[int] = EVENT_SIZES) -> jax.Array:
  """int32 ``[cap]``: the first ``min(count, cap)`` fired ids, increasing,
  then ``n`` (``count`` = how many fired, a traced int). Picks the smallest
  of ``sizes`` that holds ``count`` (:func:`by_size`); only these small id
  vectors pass through the conds: a big operand (the ring buffer) would be
  copied by every ``lax.cond`` on XLA:CPU."""
  n = fired.shape[0]
  cap = min(int(cap), n)
  sizes = sorted({int(s) for s in sizes if 0 < s < cap}) + [cap]

  def run(size):
    ids = fired_ids(fired, size)
    return jnp.pad(ids, (0, cap - size), constant_values=n)

  return by_size(count, sizes, run)


def by_size(count, sizes: Sequence[int], run: Callable[[int], Any]) -> Any:
  """``run(size)`` for the first of ``sizes`` (increasing, static) that
  holds ``count`` (a traced int), the last one otherwise: every kernel that
  sizes its work by this step's spikes picks its size here.

  A chain of ``lax.cond``, not one ``lax.switch``: the first test (the
  usual few spikes) decides, and on XLA:CPU a many-way switch costs about
  as much as a small delivery.

  >>> import jax.numpy as jnp
  >>> int(by_size(jnp.int32(5), [4, 16, 64], lambda s: jnp.int32(s)))
  16
  """
  def branch(i):
    if i == len(sizes) - 1:
      return lambda: run(sizes[i])
    return lambda: jax.lax.cond(count <= sizes[i], lambda: run(sizes[i]),
                                branch(i + 1))
  return branch(0)()
