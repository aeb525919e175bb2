"""A SynapseIndex from explicit ``(pre, post, weight, delay, receptor)``
lists, built on the host with NumPy: for tests and small networks.

The connectivity builder (rules, on-device, in place) is the real way to
make a :class:`~brainshard._models.delivery.index.SynapseIndex`; this one is the
reference it can be checked against. Synapses go to the shard of their
target and keep, per presynaptic neuron, the order they were given in.

Example:
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> idx = index_from_arrays([0, 1, 0], [3, 0, 2], [1., 2., 3.], [1, 1, 2],
  ...                         n=4, n_shards=2)
  >>> idx.indptr.tolist(), idx.post.tolist(), idx.max_degree
  ([0, 0, 1, 1, 1, 0, 2, 2, 2, 2], [0, 2, 1, 0], 2)
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._models.delivery.index import SynapseIndex, field_dtypes

__all__ = ["index_from_arrays"]


def index_from_arrays(pre: Any, post: Any, weight: Any, delay: Any,
                      receptor: Any = None, *, n: int, n_shards: int = 1,
                      n_receptors: int | None = None, mesh: Any = None,
                      axis: str = "x", dt: float | None = None
                      ) -> SynapseIndex:
  """The per-shard CSR of synapses ``pre[k] -> post[k]`` (global ids in
  ``[0, n)``, ``n`` = the padded axis, a multiple of ``n_shards``) with
  ``weight[k]``, ``delay[k]`` (steps, >= 1) and ``receptor[k]`` (default
  0). With ``mesh`` the arrays are placed ``P(axis)`` on it; ``dt`` (ms)
  is the step the delays count (optional). Field dtypes as ``connect``'s
  (``index.field_dtypes``)."""
  pre, post = (np.asarray(a, np.int64).ravel() for a in (pre, post))
  weight = np.asarray(weight, np.float32).ravel()
  delay = np.asarray(delay, np.int64).ravel()
  receptor = (np.zeros_like(pre) if receptor is None
              else np.asarray(receptor, np.int64).ravel())
  _check(pre, post, weight, delay, receptor, n, n_shards)
  n_rec = int(receptor.max(initial=0)) + 1 if n_receptors is None else n_receptors
  if receptor.size and receptor.max() >= n_rec:
    raise ValueError(f"index_from_arrays: receptor {receptor.max()} >= "
                     f"n_receptors {n_rec}.")
  n_local = n // n_shards
  shard = post // n_local
  counts = np.bincount(shard, minlength=n_shards)
  cap = max(int(counts.max(initial=0)), 1)
  indptr = np.zeros((n_shards, n + 1), np.int32)
  dtypes = field_dtypes(n_local, int(delay.max(initial=1)), n_rec)
  cols = {k: np.zeros((n_shards, cap), dt) for k, dt in (
      ("post", dtypes["post"]), ("weight", np.float32),
      ("delay", dtypes["delay"]), ("receptor", dtypes["receptor"] or np.uint8))}
  cols["post"][:] = n_local
  max_degree = 0
  for s in range(n_shards):
    sel = np.flatnonzero(shard == s)
    sel = sel[np.argsort(pre[sel], kind="stable")]  # by pre, given order kept
    deg = np.bincount(pre[sel], minlength=n)
    indptr[s, 1:] = np.cumsum(deg)
    max_degree = max(max_degree, int(deg.max(initial=0)))
    m = len(sel)
    cols["post"][s, :m] = post[sel] - s * n_local
    cols["weight"][s, :m] = weight[sel]
    cols["delay"][s, :m] = delay[sel]
    cols["receptor"][s, :m] = receptor[sel]
  put = _placer(mesh, axis)
  rec = cols.pop("receptor")  # one receptor: no array (as connect)
  return SynapseIndex(
      indptr=put(indptr.ravel()),
      receptor=None if dtypes["receptor"] is None else put(rec.ravel()),
      **{k: put(v.ravel()) for k, v in cols.items()},
      count=put(counts.astype(np.int32)), n_pre=n, n_local=n_local,
      n_shards=n_shards, capacity=cap,
      min_delay=int(delay.min()) if delay.size else 1,
      max_delay=int(delay.max(initial=1)),
      n_receptors=n_rec, max_degree=max_degree, dt=dt)


def _check(pre, post, weight, delay, receptor, n, n_shards) -> None:
  lens = {k: len(v) for k, v in dict(pre=pre, post=post, weight=weight,
                                      delay=delay, receptor=receptor).items()}
  if len(set(lens.values())) != 1:
    raise ValueError(f"index_from_arrays: lengths differ: {lens}.")
  if n % n_shards:
    raise ValueError(f"index_from_arrays: n = {n} is not a multiple of "
                     f"n_shards = {n_shards}.")
  for name, a in (("pre", pre), ("post", post)):
    if a.size and (a.min() < 0 or a.max() >= n):
      raise ValueError(f"index_from_arrays: {name} ids must lie in [0, {n}), "
                       f"got [{a.min()}, {a.max()}].")
  if delay.size and delay.min() < 1:
    raise ValueError(f"index_from_arrays: delays are steps >= 1, got "
                     f"{delay.min()} (a delay below one step is an error).")


def _placer(mesh: Any, axis: str):
  if mesh is None:
    return lambda a: jax.numpy.asarray(a)
  sharding = NamedSharding(mesh, P(axis))
  return lambda a: jax.device_put(a, sharding)
