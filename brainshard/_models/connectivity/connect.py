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
from brainshard._models.connectivity.build import Spec, count_pass, fill_pass
from brainshard._models.connectivity.parameters import Normal, Uniform, with_lower
from brainshard._models.delivery.index import SynapseIndex, field_dtypes
from brainshard._models.layout import Layout
from brainshard._models.connectivity.plans import (
    BernoulliPlan, ExplicitPlan, InDegreePlan, OutDegreePlan,
    TotalPlan)
from brainshard._models.connectivity.rules import (
    Explicit, FixedInDegree, FixedOutDegree, FixedTotalNumber,
    PairwiseBernoulli, Projection)

__all__ = ["connect", "synapses"]

_PLANS = {FixedInDegree: InDegreePlan, FixedOutDegree: OutDegreePlan,
          PairwiseBernoulli: BernoulliPlan, FixedTotalNumber: TotalPlan,
          Explicit: ExplicitPlan}


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


def _delay_steps(ms: float, dt: float) -> int:
  # NEST: ld_round(ms * steps_per_ms); multiplying by 1/dt (not dividing by
  # dt) keeps 0.15 ms at dt=0.1 exactly 1.5 steps, which rounds up.
  return math.floor(ms * (1.0 / dt) + 0.5)


def _explicit_arrays(rule: Explicit, pre, post, dt, where, padded):
  n_pre, n_post = pre[1] - pre[0], post[1] - post[0]
  for name, ids, n in (("pre", rule.pre, n_pre), ("post", rule.post, n_post)):
    if ids.size and (ids.min() < 0 or ids.max() >= n):
      raise ValueError(f"{where}: Explicit {name} ids must lie in [0, {n}) "
                       f"(indices within the population), got "
                       f"[{ids.min()}, {ids.max()}].")
  pad = lambda a, dtype: jnp.asarray(np.pad(a.astype(dtype),
                                            (0, padded - a.size)))
  arrays = [pad(rule.pre, np.int32), pad(rule.post, np.int32), None, None]
  if rule.weight is not None:
    arrays[2] = pad(rule.weight, np.float32)
  if rule.delay is not None:
    steps = np.floor(rule.delay * (1.0 / dt) + 0.5).astype(np.int64)
    if steps.size and steps.min() < 1:
      bad = int(np.argmin(steps))
      raise ValueError(f"{where}: Explicit delay[{bad}] = {rule.delay[bad]} "
                       f"ms rounds to {steps[bad]} steps of dt={dt} ms; "
                       "delays must be >= dt.")
    arrays[3] = pad(steps, np.int32)
  return arrays


def _specs(projections, layout, dt) -> tuple[list[Spec], list, list[str]]:
  """Checks every projection; returns the passes' specs, the explicit
  arrays (flat) and each kept projection's label."""
  specs, arrays, labels = [], [], []
  for i, proj in enumerate(projections):
    if not isinstance(proj, Projection):
      raise TypeError(f"projections[{i}] must be a bs.models.Projection, got "
                      f"{type(proj).__name__}.")
    proj.check(i)
    where = proj.label(i)
    pre = _range(proj.pre, layout, f"{where}: pre")
    post = _range(proj.post, layout, f"{where}: post")
    if isinstance(proj.delay, (int, float)):
      if _delay_steps(proj.delay, dt) < 1:
        raise ValueError(f"{where}: delay {proj.delay} ms rounds to "
                         f"{_delay_steps(proj.delay, dt)} steps of dt={dt} "
                         "ms; delays must be >= dt.")
    rule = proj.rule
    if (isinstance(rule, (FixedInDegree, FixedOutDegree)) and not
        rule.autapses and rule.k and pre == post and pre[1] - pre[0] == 1):
      raise ValueError(f"{where}: autapses=False leaves no partner in a "
                       "population of one neuron.")
    plan = _PLANS[type(rule)](rule, pre, post)
    first = -1
    if isinstance(rule, Explicit):
      first = len(arrays)
      arrays += _explicit_arrays(rule, pre, post, dt, where, plan.padded)
    spec = Spec(plan, proj.weight, with_lower(proj.delay, 0.5 * dt),
                int(proj.receptor), first, i)
    if pre[1] > pre[0] and post[1] > post[0]:
      specs.append(spec)
      labels.append(where)
  return specs, arrays, labels


def _mesh(mesh: Any) -> jax.sharding.Mesh:
  if mesh is None:
    mesh = jax.sharding.get_mesh()
    if mesh is None or mesh.empty:
      raise ValueError("connect has no mesh: pass mesh=..., or set one with "
                       "`jax.set_mesh(mesh)` around the call.")
  if not isinstance(mesh, jax.sharding.Mesh):
    raise TypeError("connect: mesh must be a concrete jax.sharding.Mesh "
                    f"(e.g. from jax.make_mesh), got {type(mesh).__name__}.")
  return mesh


def _axis(mesh, axis, layout) -> str:
  names = tuple(mesh.axis_names)
  if axis is None:
    if len(names) != 1:
      raise ValueError(f"connect: the mesh has axes {names}; name the one "
                       "the neurons are split over with axis=...")
    axis = names[0]
  if axis not in names:
    raise ValueError(f"connect: axis {axis!r} is not an axis of the mesh "
                     f"{dict(mesh.shape)}.")
  if layout.n_shards != mesh.shape[axis]:
    raise ValueError(
        f"connect: the layout has n_shards={layout.n_shards} but mesh axis "
        f"{axis!r} has {mesh.shape[axis]} devices; pass "
        f"layout.with_shards({mesh.shape[axis]}).")
  return axis


def connect(projections: Sequence[Projection], layout: Layout, *, dt: float,
            seed: int, mesh: Any = None, axis: str | None = None
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

  Returns:
    a :class:`SynapseIndex` whose arrays are split over ``axis``.
  """
  mesh = _mesh(mesh)
  axis = _axis(mesh, axis, layout)
  if not (isinstance(dt, (int, float)) and dt > 0):
    raise ValueError(f"connect: dt must be a positive number (ms), got {dt!r}.")
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise TypeError(f"connect: seed must be an int, got {seed!r}.")
  specs, arrays, labels = _specs(list(projections), layout, float(dt))
  n_pre, n_local, S = layout.n_padded, layout.n_local, layout.n_shards
  kw = dict(seed=int(seed), axis=axis, n_local=n_local, n_pre=n_pre)
  args = [a for a in arrays if a is not None]
  rep = (P(),) * len(args)
  indptr, count, degree = shard_map(
      _with_none(count_pass(specs, **kw), arrays), mesh=mesh,
      in_specs=rep, out_specs=P(axis))(*args)
  count_h, degree_h = jax.device_get((count, degree))  # 2S scalars
  capacity = max(1, int(count_h.max()))
  n_receptors = 1 + max([int(p.receptor) for p in projections] or [0])
  # The delay field's dtype must be fixed before the fill: take it from an
  # upper bound of the delays; the fill reports the true largest delay, and
  # the rare bound that was too small (a wrapped delay) fills again.
  dtypes = field_dtypes(n_local, _delay_bound(specs, arrays, float(dt)),
                        n_receptors)
  while True:
    out = _fill(specs, dtypes, mesh, axis, capacity, float(dt), kw, arrays,
                indptr, args)
    post, weight, delay, receptor, dmin, dmax = out
    dmin = np.asarray(dmin).reshape(S, -1).min(0) if specs else np.ones(1)
    dmax = np.asarray(dmax).reshape(S, -1).max(0) if specs else np.ones(1)
    for label, lo_d in zip(labels, dmin):
      if lo_d < 1:
        raise ValueError(f"{label}: a delay rounds to {lo_d} steps of "
                         f"dt={dt} ms; delays must be >= dt.")
    used = dmax >= 1  # projections with synapses
    max_delay = int(dmax[used].max()) if used.any() else 1
    want = field_dtypes(n_local, max_delay, n_receptors)["delay"]
    if np.dtype(want).itemsize <= np.dtype(dtypes["delay"]).itemsize:
      break
    del out, post, weight, delay, receptor
    dtypes = dict(dtypes, delay=want)
  if want != dtypes["delay"]:  # the bound was loose: one narrow copy
    delay = delay.astype(want)
  return SynapseIndex(
      indptr, post, weight, delay, receptor, count, n_pre=n_pre,
      n_local=n_local, n_shards=S, capacity=capacity,
      min_delay=int(dmin[used].min()) if used.any() else 1,
      max_delay=max_delay, n_receptors=n_receptors,
      max_degree=int(degree_h.max()))


def _fill(specs, dtypes, mesh, axis, capacity, dt, kw, arrays, indptr, args):
  """Pass 2, compiled ahead and run: the index's per-synapse arrays."""
  rep = (P(),) * len(args)
  fill = jit(shard_map(
      _with_none(fill_pass(specs, capacity=capacity, dt=dt, dtypes=dtypes,
                           **kw), arrays, first=1), mesh=mesh,
      in_specs=(P(axis),) + rep, out_specs=P(axis))).compile(indptr, *args)
  _release_freed_heap()  # the compiler's freed pages, before the index
  return fill(indptr, *args)


# A counter normal's |z| stays below 5.5 (its uniforms keep 2**-25 from 0
# and 1); a bound above it only widens a dtype, never changes a delay.
_Z_MAX = 6.5


def _delay_bound(specs, arrays, dt: float) -> int:
  """An upper bound of the delays' steps, from the projections' values: a
  number itself, a distribution its upper redraw bound or (Normal) its
  mean + 6.5 std, (Uniform) its high end; explicit delays their maximum."""
  bound = 1
  for spec in specs:
    steps = arrays[spec.arrays + 3] if spec.arrays >= 0 else None
    if steps is not None:
      top = int(np.asarray(steps).max(initial=1))
    else:
      d = spec.delay
      if isinstance(d, Normal):
        ms = min(d.upper, d.mean + _Z_MAX * d.std)
      elif isinstance(d, Uniform):
        ms = min(d.upper, d.high)
      else:
        ms = float(d)
      top = _delay_steps(ms, dt) if math.isfinite(ms) else 2**31 - 1
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
  ``weight``, ``delay`` (steps), ``receptor``: int32 and float32 columns
  whatever the index's field dtypes. For tests and export (e.g. to NEST);
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
