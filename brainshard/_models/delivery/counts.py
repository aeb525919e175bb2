"""Integer-count delivery: the fast path for one uniform weight per receptor.

When every synapse of a receptor has the same weight and the same delay (the
CUBA/COBA benchmark), a target needs only *how many* of its excitatory and
inhibitory partners fired; the weight multiplies the count in the neuron
update. Integer counts do not depend on summation order, so the ids need no
sorting and the result is the same on any mesh. This is 1.0-1.6x faster than
the float-weight :class:`~brainshard.models.Delivery` at 4 k neurons.

Connectivity is a fixed in-degree table from a hash of (seed, neuron, slot):
neuron ``g`` has ``k`` partners, the first ``round(0.8 k)`` drawn from
``[0, n_exc)``, the rest from ``[n_exc, n)`` (with replacement). Any shard
computes any row without seeing the others, so the table is mesh-independent
and may be stored (:func:`csr_from_table`, :func:`deliver_counts`) or
regenerated every step (:func:`pull_counts`).

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard import models as bm
  >>> t = bm.hashed_presynaptic(jnp.arange(4), 5, n=100, n_exc=80, k=5, seed=0)
  >>> t.shape, bool((t[:, :4] < 80).all()), bool((t[:, 4:] >= 80).all())
  ((4, 5), True, True)
  >>> indptr, post = bm.csr_from_table(t, 100)
  >>> fired = jnp.zeros(100, bool).at[t[0, 0]].set(True)
  >>> exc, inh = bm.deliver_counts(fired, indptr, post, n_local=4, n_exc=80,
  ...                              max_degree=5)
  >>> int(exc[0]) >= 1, int(inh.sum())
  (True, 0)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from brainshard._models.delivery.events import by_size, fired_ids
from brainshard._models.delivery.push import push_rows

__all__ = ["COUNT_SIZES", "hashed_presynaptic", "csr_from_table",
           "deliver_counts", "pull_counts"]

# Spikes delivered per step by the push branches (the first that fits runs;
# the last visits all n neurons). Larger than events.EVENT_SIZES: here one
# branch delivers all spikes, there big counts take several passes.
COUNT_SIZES = (4, 16, 64, 256, 1024, 4096, 16384, 65536)


def _hash(x):
  """lowbias32: a cheap, well-mixed uint32 -> uint32 hash."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def hashed_presynaptic(rows, k_cols, *, n, n_exc, k, seed):
  """int32 ``[len(rows), k_cols]``: the presynaptic partners of the neurons
  ``rows`` (global ids), slots ``0 .. k_cols-1`` of their ``k``."""
  k_exc = int(round(0.8 * k))
  slot = jnp.arange(k_cols, dtype=jnp.uint32)
  key = rows.astype(jnp.uint32)[:, None] * jnp.uint32(k) + slot
  h = _hash(key ^ _hash(jnp.uint32(seed) + jnp.uint32(0x9E3779B9)))
  exc = slot < k_exc
  size = jnp.where(exc, jnp.uint32(n_exc), jnp.uint32(n - n_exc))
  lo = jnp.where(exc, 0, n_exc)
  return (lo + (h % size).astype(jnp.int32)).astype(jnp.int32)


def csr_from_table(pre, n):
  """One shard's push index from its pull table ``pre [n_local, K]``: for
  every presynaptic neuron ``j``, its local targets are
  ``indices[indptr[j]:indptr[j+1]]``. A local sort: no communication."""
  n_local, k = pre.shape
  flat = pre.ravel()
  order = jnp.argsort(flat, stable=True)
  post = (order // k).astype(jnp.int32)
  indptr = jnp.searchsorted(flat[order], jnp.arange(n + 1, dtype=jnp.int32),
                            side="left").astype(jnp.int32)
  return indptr, post


def deliver_counts(fired, indptr, indices, *, n_local, n_exc, max_degree,
                   sizes=COUNT_SIZES):
  """Input counts ``(exc, inh)`` int32 ``[n_local]`` from the global spikes
  ``fired [n]``, visiting only the neurons that fired (push over the CSR of
  :func:`csr_from_table`); presynaptic ids below ``n_exc`` are excitatory."""
  n = fired.shape[0]

  def deliver(idx):  # idx [S]: neurons that fired, n = none
    counts = jnp.zeros(2 * n_local + 1, jnp.int32)
    return push_rows(
        counts, idx, indptr, max_degree, indices.shape[0],
        lambda pos, ids: indices[pos] + (ids >= n_exc)[:, None] * n_local,
        lambda pos: 1)

  # Counts are integers, so the ids need not be sorted.
  counts = by_size(fired.sum(), [s for s in sizes if s < n] + [n],
                   lambda size: deliver(fired_ids(fired, size, sort=False)))
  return counts[:n_local], counts[n_local:2 * n_local]


def pull_counts(fired, rows, *, n, n_exc, k, seed):
  """Input counts from the table regenerated now (no connectivity in
  memory): for every neuron in ``rows``, how many of its partners fired."""
  k_exc = int(round(0.8 * k))
  pre = hashed_presynaptic(rows, k, n=n, n_exc=n_exc, k=k, seed=seed)
  hit = fired[pre].astype(jnp.int32)
  return hit[:, :k_exc].sum(1), hit[:, k_exc:].sum(1)
