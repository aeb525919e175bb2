"""Pure-JAX kernels of the E/I network (no States): fixed in-degree
connectivity from a hash of (seed, neuron, slot), event-driven and on-the-fly
spike delivery, and the neuron update.

:mod:`examples.cuba.network` wraps them in brainshard States; the scale
benchmark (``python -m benchmarks scale``, ``benchmarks/_ei.py``) calls the
same kernels from a hand-written ``jax.jit`` + ``lax.scan`` program, so
both run the same representation and algorithm.

Connectivity: neuron ``g`` has ``K`` presynaptic partners, the first
``k_exc = 0.8 K`` drawn from the excitatory population ``[0, n_exc)``, the
rest from the inhibitory one ``[n_exc, n)`` (with replacement):
``pre(g, k) = lo + hash(seed, g * K + k) % size``. Any shard computes any
row without seeing the others, so the table is mesh-independent and can be
regenerated every step instead of stored.

Example:
  >>> import jax.numpy as jnp
  >>> t = presynaptic(jnp.arange(4), 5, n=100, n_exc=80, k=5, seed=0)
  >>> t.shape, bool((t[:, :4] < 80).all()), bool((t[:, 4:] >= 80).all())
  ((4, 5), True, True)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Spikes delivered per step by the event-driven branches (the first that
# fits runs; the last visits all n neurons).
EVENT_SIZES = (4, 16, 64, 256, 1024, 4096, 16384, 65536)


def _hash(x):
  """lowbias32: a cheap, well-mixed uint32 -> uint32 hash."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def presynaptic(rows, k_cols, *, n, n_exc, k, seed):
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


def deliver_events(fired, indptr, indices, *, n_local, n_exc, max_degree,
                   sizes=EVENT_SIZES):
  """Input counts ``(exc, inh)`` int32 ``[n_local]`` from the global spikes
  ``fired [n]``, visiting only the neurons that fired (push over the CSR).
  Integer counts: the result does not depend on the order or the mesh."""
  n = fired.shape[0]
  lanes = jnp.arange(max_degree, dtype=jnp.int32)

  def deliver(idx):  # idx [S]: neurons that fired, n = none
    start = indptr[idx]  # idx = n reads indptr[n]: degree 0 below
    deg = indptr[jnp.minimum(idx + 1, n)] - start
    pos = jnp.minimum(start[:, None] + lanes, indices.shape[0] - 1)
    tgt = indices[pos]
    inh = (idx >= n_exc)[:, None]
    slot = jnp.where(lanes < deg[:, None], tgt + inh * n_local, 2 * n_local)
    counts = jnp.zeros(2 * n_local + 1, jnp.int32)
    return counts.at[slot.ravel()].add(1, mode="drop")

  total = fired.sum()
  sizes = [s for s in sizes if s < n] + [n]

  # A chain of conds, not one lax.switch over every size: the first test
  # (the usual few spikes) decides, and on XLA:CPU a many-way switch costs
  # about as much as the small delivery itself.
  def branch(i):
    if i == len(sizes) - 1:
      return lambda: deliver(_first_fired(fired, sizes[i]))
    return lambda: jax.lax.cond(total <= sizes[i],
                                lambda: deliver(_first_fired(fired, sizes[i])),
                                branch(i + 1))

  counts = branch(0)()
  return counts[:n_local], counts[n_local:2 * n_local]


def _first_fired(fired, size, block=16):
  """``size`` ids that include every neuron that fired (when at most
  ``size`` did), ``n`` for none. The order does not matter (the counts are
  integers). Two ``lax.top_k`` calls over blocks of ``block`` neurons, first
  the blocks with a spike, then the neurons in those: on a CPU 3-7x faster
  than one ``top_k`` over all n, which is itself about 2x faster than
  ``jnp.nonzero`` (a cumulative sum over all n) for small sizes."""
  n = fired.shape[0]
  if size > 1024 or size >= n:
    return jnp.nonzero(fired, size=size, fill_value=n)[0]
  if size * block >= n:
    val, idx = jax.lax.top_k(fired.astype(jnp.float32), size)
    return jnp.where(val > 0, idx, n)
  n_blocks = -(-n // block)
  blocks = jnp.pad(fired, (0, n_blocks * block - n)).reshape(n_blocks, block)
  _, hit = jax.lax.top_k(blocks.any(1).astype(jnp.float32), size)
  val, j = jax.lax.top_k(blocks[hit].ravel().astype(jnp.float32), size)
  return jnp.where(val > 0, hit[j // block] * block + j % block, n)


def deliver_pull(fired, rows, *, n, n_exc, k, seed):
  """Input counts from a table regenerated now (no connectivity in memory):
  for every local neuron, how many of its partners fired."""
  k_exc = int(round(0.8 * k))
  pre = presynaptic(rows, k, n=n, n_exc=n_exc, k=k, seed=seed)
  hit = fired[pre].astype(jnp.int32)
  return hit[:, :k_exc].sum(1), hit[:, k_exc:].sum(1)
