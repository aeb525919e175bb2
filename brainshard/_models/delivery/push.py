"""Event-driven synaptic delivery: float weights, per-synapse delays, a ring
buffer of future input per receptor.

Each shard keeps, for its ``n_local`` neurons, a ring buffer ``[R, L,
n_local]`` (``R`` receptors, ``L`` >= the largest delay in steps): slot
``t % L`` holds the input that arrives in step ``t``; the spikes of step
``t`` are added into slots ``t + delay`` (NEST's semantics: a spike emitted in the
update from ``t`` to ``t + h`` changes the target's synaptic current at
``t + h + delay``; see docs/models_delivery.md).

Why the result does not depend on the number of devices: a shard holds the
synapses *onto* its neurons (``SynapseIndex``, CSR over global presynaptic
ids), visits the fired neurons in increasing global id and scatter-adds
their synapses in CSR order with ``mode='drop'``. So every target sums its
inputs in the same order on 1 or 8 devices, and no float partial sums are
ever ``psum``-ed across shards: spikes are bit-identical. (XLA:CPU runs a
scatter as an in-order loop. On GPU a float scatter-add uses atomics and its
order, hence its last bits, vary from run to run: see the docs' GPU note.)

Example:
  >>> import numpy as np, jax.numpy as jnp
  >>> from brainshard._models.delivery.push import deliver
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> idx = index_from_arrays(pre=[0, 0, 1], post=[1, 1, 0],
  ...                         weight=[0.5, 0.25, -1.0], delay=[1, 2, 1],
  ...                         receptor=[0, 0, 1], n=2, n_receptors=2)
  >>> buf = jnp.zeros((2, idx.max_delay, 2))   # [receptor, slot, neuron]
  >>> buf = deliver(buf, jnp.array([True, True]), 0, idx)
  >>> buf[:, 1].tolist(), buf[:, 0].tolist()   # arriving in steps 1 and 2
  ([[0.0, 0.5], [-1.0, 0.0]], [[0.0, 0.25], [0.0, 0.0]])
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from brainshard._models.delivery.events import EVENT_SIZES, first_fired
from brainshard._models.delivery import native
from brainshard._models.delivery.index import SynapseIndex

# Slots per window of a long row (deliver_windows): XLA:CPU's scatter costs
# less a slot over 256 slots than over 1,024 (2.0-2.2 vs 2.5-2.6 ns a
# Brunel event; 2,048 and more: 5-9 ns, another code path), and the
# microcircuit's rows cost the same either way (benchmarks delivery).
WINDOW = 256

# kernel='auto' takes the native kernel from this many synapse slots a
# shard: numba's start-up costs ~2-3 s a process (its own initialisation;
# the loops themselves are cached on disk), which delivery recovers only
# in large networks (Brunel's 15.6 M synapses at 40 Hz: ~1 s a simulated
# second; a network of 4 M synapses at 10 Hz: ~0.1 s).
NATIVE_MIN_SLOTS = 1 << 22

__all__ = ["deliver", "clear_slots", "deliver_xla", "deliver_ids",
           "deliver_windows", "push_rows", "row_lanes"]


def _targets(index: SynapseIndex, take, t, shape) -> jax.Array:
  """Flat positions in a ring buffer of ``shape`` ``(R, L, n_local)`` of
  the synapses ``take(field)`` selects, fired in step ``t``: receptor, slot
  ``(t + delay) % L``, target. Index fields are narrow (uint8/uint16, see
  ``index.field_dtypes``): widened before the arithmetic."""
  _, length, n_local = shape
  i32 = lambda x: x.astype(jnp.int32)  # noqa: E731
  slot = (jnp.asarray(t, jnp.int32) + i32(take(index.delay))) % length
  rec = 0 if index.receptor is None else i32(take(index.receptor))
  return (rec * length + slot) * n_local + i32(take(index.post))


def row_lanes(indptr: jax.Array, ids: jax.Array, max_degree: int,
              capacity: int):
  """The CSR rows of ``ids`` (presynaptic ids; ``n_pre`` = none) as lanes
  padded to ``max_degree``: slots ``pos [k, max_degree]`` (int32, clipped
  into ``capacity``) and ``ok [k, max_degree]``, the lanes that hold a
  synapse. Delivery, integer counts and plasticity read rows this way.

  >>> import jax.numpy as jnp
  >>> pos, ok = row_lanes(jnp.array([0, 2, 3]), jnp.array([0, 2]), 2, 3)
  >>> pos.tolist(), ok.tolist()
  ([[0, 1], [2, 2]], [[True, True], [False, False]])
  """
  n_pre = indptr.shape[0] - 1
  lanes = jnp.arange(max_degree, dtype=jnp.int32)
  ids = jnp.asarray(ids, jnp.int32)
  start = indptr[jnp.minimum(ids, n_pre)]  # n_pre reads indptr[n_pre]: no row
  deg = indptr[jnp.minimum(ids + 1, n_pre)] - start
  pos = jnp.minimum(start[:, None] + lanes, max(capacity - 1, 0))
  return pos, lanes < deg[:, None]


def push_rows(out: jax.Array, ids: jax.Array, indptr: jax.Array,
              max_degree: int, capacity: int, target: Callable,
              value: Callable) -> jax.Array:
  """The one CSR push in XLA: ``out`` (flat) plus, for each of ``ids`` in
  order and each synapse of its row in CSR order, ``value(pos)`` at
  ``target(pos, ids)`` (``pos``: :func:`row_lanes`' slots; ``value`` may
  return a scalar). Row-major ``[id, lane]``: XLA:CPU scatters in that
  order, so each target sums in presynaptic, then CSR order; masked lanes
  go out of range and are dropped."""
  pos, ok = row_lanes(indptr, ids, max_degree, capacity)
  dst = jnp.where(ok, target(pos, ids), out.shape[0]).reshape(-1)
  v = value(pos)
  return out.at[dst].add(v if jnp.ndim(v) == 0 else v.reshape(-1),
                         mode="drop")


def deliver_ids(buf: jax.Array, ids: jax.Array, t, index: SynapseIndex
                ) -> jax.Array:
  """Adds the synapses of the presynaptic neurons ``ids`` (global ids,
  increasing; ``n_pre`` = none), fired in step ``t``, into ``buf`` at slot
  ``(t + delay) % L``. ``index`` holds this shard's block (per-shard shapes:
  ``indptr [n_pre + 1]``, ``post``/``weight``/... ``[capacity]``)."""
  out = push_rows(
      buf.reshape(-1), ids, index.indptr, index.max_degree,
      index.post.shape[0],
      lambda pos, _: _targets(index, lambda a: a[pos], t, buf.shape),
      lambda pos: index.weight[pos].astype(buf.dtype))
  return out.reshape(buf.shape)


def deliver_windows(buf: jax.Array, ids: jax.Array, count, t,
                    index: SynapseIndex, width: int = 1024) -> jax.Array:
  """:func:`deliver_ids` for the first ``count`` of ``ids`` (a traced int),
  one presynaptic neuron at a time, its CSR row in windows of ``width``
  consecutive slots: contiguous slices of the index, no lanes padded to
  ``max_degree``. Same additions in the same order as ``deliver_ids``."""
  cap = index.post.shape[0]
  width = max(1, min(int(width), cap))
  lane = jnp.arange(width, dtype=jnp.int32)
  size = buf.size

  def neuron(k, flat):
    j = ids[k]
    lo, hi = index.indptr[j], index.indptr[j + 1]

    def window(w, flat):
      first = lo + w * width
      # A slice past the end would be shifted back by dynamic_slice: start
      # it at most at cap - width and mask the slots before `first`.
      s = jnp.minimum(first, cap - width)
      take = lambda a: jax.lax.dynamic_slice_in_dim(a, s, width)  # noqa: E731
      pos = s + lane
      dst = jnp.where((pos >= first) & (pos < hi),
                      _targets(index, take, t, buf.shape), size)
      return flat.at[dst].add(take(index.weight).astype(flat.dtype),
                              mode="drop")

    return jax.lax.fori_loop(0, (hi - lo + width - 1) // width, window, flat)

  flat = jax.lax.fori_loop(0, count, neuron, buf.reshape(-1))
  return flat.reshape(buf.shape)


def deliver(buf: jax.Array, fired: jax.Array, t, index: SynapseIndex,
            sizes: Sequence[int] = EVENT_SIZES, width: int | None = 1024,
            chunk: int = 16, kernel: str = "auto") -> jax.Array:
  """Adds the synapses of the neurons that fired in step ``t`` (``fired
  [n_pre]``, bool) into the ring buffer ``buf [R, L, n_local]`` at slot
  ``(t + delay) % L``: per target, in global presynaptic order, then CSR
  order, whichever kernel runs.

  ``kernel``: ``"native"`` (the numba loop of :mod:`.native`, CPU only:
  numba must be installed), ``"xla"`` (:func:`deliver_xla`; ``sizes``,
  ``width`` and ``chunk`` shape it), or ``"auto"``: native on CPU where
  numba is installed, the buffer and index dtypes suit it and the shard
  holds at least ``NATIVE_MIN_SLOTS`` (4 M) synapse slots, else XLA.
  Both give the same buffer bit for bit.
  """
  _check(fired, index)
  if index.post.shape[0] == 0 or index.max_degree == 0:
    return buf
  xla = partial(deliver_xla, sizes=sizes, width=width, chunk=chunk)
  if not _native(kernel, buf, index):
    return xla(buf, fired, t, index)
  return _on_cpu(lambda *a: native.push(*a, tangent=xla), xla,
                 buf, fired, t, index)


def clear_slots(buf: jax.Array, start, count: int, index: SynapseIndex,
                kernel: str = "auto") -> jax.Array:
  """``buf [R, L, n_local]`` with its ``count`` slots from ``start % L`` on
  set to 0 (``count`` static; the slots must not wrap past ``L``, as a
  ring of whole exchange blocks never does). Where :func:`deliver` runs
  the native kernel the clear is native too: XLA copies the whole buffer
  twice a step when its own in-place update meets the native call's in one
  loop body (see ``native.clear``)."""
  def xla(buf, start):
    zeros = jnp.zeros((buf.shape[0], count, buf.shape[2]), buf.dtype)
    return jax.lax.dynamic_update_slice_in_dim(buf, zeros,
                                               start % buf.shape[1], axis=1)
  start = jnp.asarray(start, jnp.int32)
  if not _native(kernel, buf, index):
    return xla(buf, start)
  return _on_cpu(lambda b, s: native.clear(b, s, count), xla, buf, start)


def _native(kernel: str, buf, index: SynapseIndex) -> bool:
  """Whether ``kernel`` (``'auto'``, ``'native'``, ``'xla'``) means the
  native kernel for this buffer and index."""
  if kernel not in ("auto", "native", "xla"):
    raise ValueError(f"deliver: kernel must be 'auto', 'native' or 'xla', "
                     f"got {kernel!r}.")
  if kernel == "native" and not native.available():
    raise ValueError("deliver: kernel='native' needs numba (pip install "
                     "'brainshard[native]').")
  if kernel == "xla" or not (native.available()
                             and native.supports(buf, index)):
    return False
  if kernel == "native":
    return True
  return index.post.shape[0] >= NATIVE_MIN_SLOTS and native.loads()


def _on_cpu(cpu, default, *args):
  # The native kernels are registered for CPU only: lowering for another
  # platform keeps only that platform's branch (no conditional, no copy).
  return jax.lax.platform_dependent(*args, cpu=cpu, default=default)


def _check(fired, index) -> None:
  n_pre = index.indptr.shape[0] - 1
  if fired.shape != (n_pre,):
    raise ValueError(
        f"deliver: fired has shape {fired.shape}, the index expects "
        f"({n_pre},) presynaptic neurons (n_pre).")


def deliver_xla(buf: jax.Array, fired: jax.Array, t, index: SynapseIndex,
                sizes: Sequence[int] = EVENT_SIZES, width: int | None = 1024,
                chunk: int = 16) -> jax.Array:
  """:func:`deliver` in XLA: :func:`deliver_ids` for the global spike
  vector ``fired [n_pre]`` (bool) of step ``t``, visiting only the neurons
  that fired.

  The fired ids are found ``max(sizes)`` at a time (one pass unless more
  fired) and delivered in a ``while`` loop: rows of up to ``width / 2``
  synapses ``width // max_degree`` neurons per iteration (lanes padded to
  ``max_degree``), longer rows one neuron at a time in windows of ``width``
  slots (:func:`deliver_windows`). Loops update
  the buffer in place, whereas a ``lax.cond`` with the buffer as operand
  copies it (``R * L * n_local`` floats) on XLA:CPU every step. Pass
  ``index`` as an argument (e.g. from a State), not as constants closed
  over by a jit: baked-in index arrays made these loops 20-30x slower on
  XLA:CPU. ``width=None`` delivers ``chunk`` neurons per iteration
  whatever the rows (for GPUs, where every loop iteration costs kernel
  launches; on a CPU, 16 neurons x ``max_degree`` lanes cost ~10x the
  events at the microcircuit's degrees, max 6,723 and ~3,900 on average).
  """
  _check(fired, index)
  if index.post.shape[0] == 0 or index.max_degree == 0:
    return buf
  n_pre = index.indptr.shape[0] - 1
  cap = min(max(sizes), n_pre)
  # Short rows (at most width / 2 synapses per neuron): several neurons per
  # iteration, lanes padded to max_degree; long rows: windows of a row.
  if width is not None:
    chunk = width // index.max_degree
  windows = chunk < 2 and width is not None  # long rows: by windows
  chunk = min(chunk, cap)
  if not windows:
    cap = -(-cap // chunk) * chunk
  ids_of = jnp.arange(n_pre, dtype=jnp.int32)

  def one_pass(carry, masked=True):
    buf, start, left = carry
    ids = first_fired(fired & (ids_of >= start) if masked else fired, left,
                      cap, sizes)
    ids = jnp.pad(ids, (0, cap - ids.shape[0]), constant_values=n_pre)
    done = jnp.minimum(left, cap)
    if windows:
      buf = deliver_windows(buf, ids, done, t, index,
                            min(width, WINDOW, index.max_degree))
    else:
      part = lambda k, b: deliver_ids(  # noqa: E731
          b, jax.lax.dynamic_slice_in_dim(ids, k * chunk, chunk), t, index)
      buf = jax.lax.fori_loop(0, (done + chunk - 1) // chunk, part, buf)
    return buf, ids[cap - 1] + 1, left - done

  left = jnp.sum(fired, dtype=jnp.int32)
  # The first pass needs no mask (one O(n) pass less in the usual case);
  # start = left * 0: a loop carry keeps its shard_map type (varying or
  # not), and the next start is computed from `fired` like `left`.
  carry = one_pass((buf, left * 0, left), masked=False)
  buf, _, _ = jax.lax.while_loop(lambda c: c[2] > 0, one_pass, carry)
  return buf
