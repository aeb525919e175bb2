"""``connect``: projections + a Layout -> one sharded ``SynapseIndex``.

Every device builds only its own shard (a counting sort in two passes, see
``build.py``) from counter-based draws keyed on ``(seed, projection, unit)``
where a unit is a target, a source or a block of slots: the same seed gives
the same synapses, weights and delays on any number of devices.

Example:
  >>> import jax, brainshard as bs
  >>> from brainshard import models as bm
  >>> mesh = jax.make_mesh((2,), ('x',))
  >>> lay = bm.Layout({'E': 8, 'I': 2}, n_shards=2)
  >>> idx = bm.connect([
  ...     bm.Projection('E', 'I', bm.FixedInDegree(3), weight=0.5, delay=1.0),
  ...     bm.Projection('I', 'E', bm.FixedInDegree(1), weight=-2.0,
  ...                   delay=bm.Normal(1.5, 0.5), receptor=1)],
  ...     lay, dt=0.1, seed=0, mesh=mesh, axis='x')
  >>> int(idx.count.sum()), idx.n_receptors, idx.min_delay >= 1
  (14, 2, True)
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from brainshard._scaleout.multihost import gather
from brainshard._transforms.jit import jit
from brainshard._transforms.shard_map.shard_map import shard_map
from brainshard._models.delays import (
    check_dt, delay_steps, to_steps, too_short)
from brainshard._models.layout import Layout, mesh_axis
from brainshard._models.connectivity.build import (
    Spec, both_passes, count_pass, exact_counts, fill_pass)
from brainshard._models.connectivity.projection import Projection
from brainshard._models.connectivity.rules import Explicit
from brainshard._models.delivery.index import SynapseIndex, field_dtypes

__all__ = ["connect", "synapses"]


def _range(which: Any, layout: Layout, where: str) -> tuple[int, int]:
  if isinstance(which, str):
    try:
      return layout.range(which)
    except KeyError as e:
      raise ValueError(f"{where}: {e.args[0]}") from None
  try:
    start, stop = (int(v) for v in which)
  except (TypeError, ValueError):
    raise TypeError(f"{where}: a population is a Layout name or a global id "
                    f"range (start, stop), got {which!r:.60}.") from None
  if not 0 <= start <= stop <= layout.n:
    raise ValueError(f"{where}: id range ({start}, {stop}) is not inside the "
                     f"layout's {layout.n} neurons.")
  return start, stop


def _explicit_arrays(rule: Explicit, dt: float, where: str, padded: int,
                     weight_dtype: Any = np.float32):
  """The arrays an Explicit projection passes to the build, padded to
  ``padded``: pre, post, weight (in ``weight_dtype``) or None, delay steps
  or None."""
  pad = lambda a, dtype: jnp.asarray(np.pad(a.astype(dtype),  # noqa: E731
                                            (0, padded - a.size)))
  arrays = [pad(rule.pre, np.int32), pad(rule.post, np.int32), None, None]
  if rule.weight is not None:
    arrays[2] = pad(rule.weight, weight_dtype)
  if rule.delay is not None:
    arrays[3] = pad(delay_steps(rule.delay, dt, f"{where}: Explicit"),
                    np.int32)
  return arrays


def _specs(projections, layout, dt, keys=None, weight_dtype=np.float32
           ) -> tuple[list[Spec], list, list[str]]:
  """Checks every projection; returns the passes' specs, the explicit
  arrays (flat) and each kept projection's label; ``keys[i]`` keys the
  draws of projection ``i`` (default ``i``)."""
  specs, arrays, labels = [], [], []
  for i, proj in enumerate(projections):
    if not isinstance(proj, Projection):
      raise TypeError(f"projections[{i}] must be a bs.models.Projection, got "
                      f"{type(proj).__name__}.")
    rule, weight, delay, receptor = proj.checked(i)
    where = proj.label(i)
    pre = _range(proj.pre, layout, f"{where}: pre")
    post = _range(proj.post, layout, f"{where}: post")
    if delay.family == "const":
      delay_steps(delay.largest(), dt, where)
    rule.check(pre, post, where)
    rule = rule.resolve(pre, post)
    plan = rule.plan(pre, post)
    first = -1
    if isinstance(rule, Explicit):
      first = len(arrays)
      arrays += _explicit_arrays(rule, dt, where, rule.padded(plan),
                                 weight_dtype)
    spec = Spec(plan, weight, delay.with_lower(0.5 * dt), receptor, first,
                i if keys is None else int(keys[i]))
    if pre[1] > pre[0] and post[1] > post[0]:
      specs.append(spec)
      labels.append(where)
  return specs, arrays, labels


def _axis(mesh, axis, layout) -> tuple[jax.sharding.Mesh, str]:
  mesh, axis = mesh_axis(mesh, axis, "connect")
  if layout.n_shards != mesh.shape[axis]:
    raise ValueError(
        f"connect: the layout has n_shards={layout.n_shards} but mesh axis "
        f"{axis!r} has {mesh.shape[axis]} devices; pass "
        f"layout.with_shards({mesh.shape[axis]}).")
  return mesh, axis


def connect(projections: Sequence[Projection], layout: Layout, *, dt: float,
            seed: int, mesh: Any = None, axis: str | None = None,
            keys: Sequence[int] | None = None, weight_dtype: Any = None
            ) -> SynapseIndex:
  """Builds the synapses of ``projections`` in their target's shard.

  Args:
    projections: ``bs.models.Projection`` s; their synapses are merged into
      one index (per presynaptic id: projection order, then the order the
      rule generated them in).
    layout: the populations, with ``n_shards`` = the devices on ``axis``.
    dt: the simulation step (ms); delays become ``round(d / dt) >= 1``
      steps (half steps round up, as NEST).
    seed: an int; the same seed gives the same synapses on any mesh.
    mesh: a ``jax.sharding.Mesh``; None takes the one set by ``jax.set_mesh``.
    axis: the mesh axis the neurons are split over (default: the only one).
    keys: one int per projection that keys its draws (default: its place
      in ``projections``): a network building several indices (static and
      plastic synapses) keys each projection by its place among all of its
      connections, so that splitting them changes no synapse.
    weight_dtype: the index's weight dtype (default float32). Drawn weights
      are drawn in float32 and cast; explicit weights are cast from float64
      (a network keeps float64 plastic weights for NEST's numbers).

  Returns:
    a :class:`SynapseIndex` whose arrays are split over ``axis``.
  """
  mesh, axis = _axis(mesh, axis, layout)
  dt = check_dt(dt, "connect")
  if isinstance(seed, (bool, np.bool_)) or not isinstance(
      seed, (int, np.integer)):
    raise TypeError(f"connect: seed must be an int, got {seed!r}.")
  if not 0 <= seed < 2**63:
    raise ValueError(f"connect: seed must be in [0, 2**63), got {seed}.")
  projections = list(projections)
  if keys is not None and len(keys) != len(projections):
    raise ValueError(f"connect: {len(keys)} keys for {len(projections)} "
                     "projections.")
  weight_dtype = np.dtype(np.float32 if weight_dtype is None else weight_dtype)
  specs, arrays, labels = _specs(projections, layout, dt, keys, weight_dtype)
  n_pre, n_local, S = layout.n_padded, layout.n_local, layout.n_shards
  kw = dict(seed=int(seed), axis=axis, n_local=n_local, n_pre=n_pre)
  args = [a for a in arrays if a is not None]
  rep = (P(),) * len(args)
  exact = exact_counts(specs, n_local, S)
  indptr = None
  if exact is None:  # pass 1 on its own: the capacity is its count
    indptr, count, degree = shard_map(
        _with_none(count_pass(specs, **kw), arrays), mesh=mesh,
        in_specs=rep, out_specs=P(axis))(*args)
    exact = jax.device_get(count)  # S scalars
  capacity = max(1, int(max(exact)))
  n_receptors = 1 + max([1 if p.receptor == "sign" else int(p.receptor)
                         for p in projections] or [0])
  # The delay field's dtype must be fixed before the fill: take it from an
  # upper bound of the delays; the fill reports the true largest delay, and
  # the rare bound that was too small (a wrapped delay) fills again.
  dtypes = dict(field_dtypes(n_local, _delay_bound(specs, arrays, float(dt)),
                             n_receptors), weight=weight_dtype)
  while True:
    out = _fill(specs, dtypes, mesh, axis, capacity, float(dt), kw, arrays,
                indptr, args)
    if indptr is None:
      indptr, count, degree, *out = out
      _check_counts(exact, count)
    post, weight, delay, receptor, dmin, dmax = out
    dmin = np.asarray(dmin).reshape(S, -1).min(0) if specs else np.ones(1)
    dmax = np.asarray(dmax).reshape(S, -1).max(0) if specs else np.ones(1)
    for label, lo_d in zip(labels, dmin):
      if lo_d < 1:
        raise too_short(label, None, lo_d, dt)
    used = dmax >= 1  # projections with synapses
    max_delay = int(dmax[used].max()) if used.any() else 1
    want = field_dtypes(n_local, max_delay, n_receptors)["delay"]
    if np.dtype(want).itemsize <= np.dtype(dtypes["delay"]).itemsize:
      break
    del out, post, weight, delay, receptor
    dtypes = dict(dtypes, delay=want)
  if want != dtypes["delay"]:  # the bound was loose: one narrow copy
    delay = delay.astype(want)
  degree_h = jax.device_get(degree)  # S scalars
  return SynapseIndex(
      indptr, post, weight, delay, receptor, count, n_pre=n_pre,
      n_local=n_local, n_shards=S, capacity=capacity,
      min_delay=int(dmin[used].min()) if used.any() else 1,
      max_delay=max_delay, n_receptors=n_receptors,
      max_degree=int(degree_h.max()), dt=dt)


def _fill(specs, dtypes, mesh, axis, capacity, dt, kw, arrays, indptr, args):
  """Pass 2, compiled ahead and run: the index's per-synapse arrays; with
  ``indptr`` None, passes 1 and 2 in one program (``indptr``, ``count``
  and ``max_degree`` first)."""
  rep = (P(),) * len(args)
  made = dict(capacity=capacity, dt=dt, dtypes=dtypes, **kw)
  if indptr is None:
    fun, in_specs, head = both_passes(specs, **made), rep, ()
  else:
    fun, in_specs, head = fill_pass(specs, **made), (P(axis),) + rep, (
        indptr,)
  fill = jit(shard_map(
      _with_none(fun, arrays, first=len(head)), mesh=mesh,
      in_specs=in_specs, out_specs=P(axis))).compile(*head, *args)
  _release_freed_heap()  # the compiler's freed pages, before the index
  return fill(*head, *args)


def _check_counts(exact: list[int], count: Any) -> None:
  """The synapses each shard drew are those its rules said it would."""
  got = [int(c) for c in np.asarray(jax.device_get(count)).reshape(-1)]
  if got != [int(c) for c in exact]:
    raise AssertionError(f"connect: shards drew {got} synapses where their "
                         f"rules said {list(exact)} (a rule's exact_count "
                         "is wrong).")


def _delay_bound(specs, arrays, dt: float) -> int:
  """An upper bound of the delays' steps, from the projections' values
  (:meth:`~.parameters.Parameter.largest`; explicit delays their maximum)."""
  bound = 1
  for spec in specs:
    steps = arrays[spec.arrays + 3] if spec.arrays >= 0 else None
    if steps is not None:
      top = int(np.asarray(steps).max(initial=1))
    else:
      ms = spec.delay.largest()
      top = to_steps(ms, 1.0 / dt) if math.isfinite(ms) else 2**31 - 1
    bound = max(bound, top)
  return min(bound, 2**31 - 1)


def _release_freed_heap() -> None:
  """Returns the C heap's free pages to the OS (glibc ``malloc_trim``).

  Compiling a pass allocates and frees ~100-200 MB on the host; glibc keeps
  those pages mapped, and the index (allocated next, in fresh mappings)
  would sit on top of them: the process's peak would be compilation plus
  index instead of the larger of the two. No-op where there is no glibc."""
  try:
    ctypes.CDLL(None).malloc_trim(0)
  except (OSError, AttributeError):
    pass


def _with_none(fun, arrays, first=0):
  """``fun`` called with the explicit arrays' ``None`` slots put back (only
  arrays are passed through shard_map)."""
  present = [a is not None for a in arrays]

  def run(*args):
    head, rest = list(args[:first]), iter(args[first:])
    full = [next(rest) if p else None for p in present]
    return fun(*head, *full)
  return run


def synapses(index: SynapseIndex) -> dict[str, np.ndarray]:
  """Every synapse of ``index`` on the host, in index order (shard, then
  presynaptic id, then generation order): ``pre``, ``post`` (global ids),
  ``weight``, ``delay`` (steps), ``receptor``: int32 columns whatever the
  index's integer field dtypes, weights in the index's dtype (float32
  unless built wider). For tests and export (e.g. to NEST);
  it copies the whole index to the host.

  Example:
    >>> import jax, brainshard as bs
    >>> from brainshard import models as bm
    >>> lay = bm.Layout({'A': 4})
    >>> idx = bm.connect([bm.Projection('A', 'A', bm.Explicit([0, 3], [1, 1]))],
    ...                  lay, dt=0.1, seed=0, mesh=jax.make_mesh((1,), ('x',)))
    >>> bm.synapses(idx)['pre'].tolist()
    [0, 3]
  """
  h = gather({k: getattr(index, k) for k in
              ("indptr", "post", "weight", "delay", "receptor", "count")})
  S, cap, n = index.n_shards, index.capacity, index.n_pre
  cols: dict[str, list] = {k: [] for k in
                           ("pre", "post", "weight", "delay", "receptor")}
  for s in range(S):
    indptr = h["indptr"][s * (n + 1):(s + 1) * (n + 1)]
    used = int(h["count"][s])
    cols["pre"].append(np.repeat(np.arange(n, dtype=np.int32),
                                 np.diff(indptr)))
    sl = slice(s * cap, s * cap + used)
    cols["post"].append(h["post"][sl].astype(np.int32) + s * index.n_local)
    cols["weight"].append(h["weight"][sl])
    cols["delay"].append(h["delay"][sl].astype(np.int32))
    cols["receptor"].append(np.zeros(used, np.int32) if h["receptor"] is None
                            else h["receptor"][sl].astype(np.int32))
  return {k: np.concatenate(v) for k, v in cols.items()}
