"""Recording plastic weights: NEST's ``weight_recorder`` (the value each
presynaptic spike delivers through chosen synapses) and a histogram of a
projection's weights over time.

A :class:`WeightRecorder` (``net.create('weight_recorder', {'senders':
..., 'targets': ...})``, given to a plastic connection as its syn_spec's
``weight_recorder``) picks the connection's synapses from ``senders`` to
``targets`` (default: all) when the network builds. Each shard keeps a
table of its picked slots; after each step's plastic update it writes the
value each picked synapse delivered in that step (NaN where its
presynaptic neuron did not fire) into a ``[picked, every]`` State that a
``bs.StateMonitor`` records once per exchange, shard-locally. ``events``
is NEST's: ``senders``, ``targets``, ``times`` (the spike's stamp, ms) and
``weights`` (STDP: the new weight; ``tsodyks2_synapse``: ``x u weight``).

A :class:`WeightHistogram` (``syn.histogram(bins, interval)``) counts the
projection's weights in ``bins`` every ``interval`` ms: per shard, then an
integer ``psum`` (exact, so the same on any mesh).

Example: see docs/plasticity.md.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.state.state import ParamState, ShortTermState
from brainshard._scaleout.multihost import gather
from brainshard._simulation.monitors.monitors import StateMonitor
from brainshard._models.network.nodes import NodeCollection
from brainshard._models.network.recorders import Recorder
from brainshard._models.plasticity.tsodyks2 import Tsodyks2Synapse

__all__ = ["WeightRecorder", "WeightHistogram", "host_synapses"]


def host_synapses(index: Any) -> dict:
  """Per shard, on the host: the ``pre`` (global id) and local ``post`` of
  every used slot, and its slot: ``{'shard', 'slot', 'pre', 'post'}``."""
  h = gather({"indptr": index.indptr, "post": index.post,
              "count": index.count})
  s_n, cap, n = index.n_shards, index.capacity, index.n_pre
  cols: dict[str, list] = {k: [] for k in ("shard", "slot", "pre", "post")}
  for s in range(s_n):
    indptr = np.asarray(h["indptr"][s * (n + 1):(s + 1) * (n + 1)], np.int64)
    used = int(h["count"][s])
    cols["shard"].append(np.full(used, s, np.int64))
    cols["slot"].append(np.arange(used, dtype=np.int64))
    cols["pre"].append(np.repeat(np.arange(n, dtype=np.int64),
                                 np.diff(indptr)))
    cols["post"].append(np.asarray(h["post"][s * cap:s * cap + used],
                                   np.int64) + s * index.n_local)
  return {k: np.concatenate(v) for k, v in cols.items()}


class WeightRecorder(Recorder):
  """NEST's ``weight_recorder``: ``senders`` and ``targets`` restrict the
  synapses recorded (neurons of the network, or None: all)."""

  nest_name = "weight_recorder"
  defaults = {"senders": None, "targets": None}

  def __init__(self, network: Any, key: str, **params: Any):
    super().__init__(network, key, **params)
    self.parts: list[dict] = []  # one per plastic connection attached

  def _ids(self, which: str) -> np.ndarray | None:
    nodes = self.params[which]
    if nodes is None:
      return None
    if isinstance(nodes, NodeCollection):
      return np.arange(*nodes.ids)
    return np.asarray(nodes, np.int64).reshape(-1)

  def attach(self, plastic: Any, mesh: Any, axis: str, every: int) -> None:
    """Picks ``plastic``'s synapses (a ``PlasticSynapses``) and gives it
    the per-shard table and the State the step writes."""
    index = plastic.index.value
    table = host_synapses(index)
    keep = np.ones(table["pre"].shape, bool)
    for which, col in (("senders", "pre"), ("targets", "post")):
      ids = self._ids(which)
      if ids is not None:
        keep &= np.isin(table[col], ids)
    picked = {k: v[keep] for k, v in table.items()}
    s_n = index.n_shards
    rank = np.zeros(len(picked["slot"]), np.int64)
    for s in range(s_n):
      mine = picked["shard"] == s
      rank[mine] = np.arange(mine.sum())
    c = max(1, int(rank.max(initial=-1)) + 1)
    slots = np.full((s_n, c), index.capacity, np.int32)
    pres = np.full((s_n, c), index.n_pre, np.int32)
    slots[picked["shard"], rank] = picked["slot"]
    pres[picked["shard"], rank] = picked["pre"]
    put = lambda x: jax.device_put(x, NamedSharding(mesh, P(axis)))  # noqa: E731
    dtype = plastic.weight.value.dtype
    rec = _Picked(
        ParamState(put(jnp.asarray(np.stack([slots, pres], -1).reshape(
            s_n * c, 2))), name=f"{self.key}.{plastic.name}.table",
                   spec=P(axis)),
        ShortTermState(put(jnp.full((s_n * c, every), jnp.nan, dtype)),
                       name=f"{self.key}.{plastic.name}.values",
                       spec=P(axis)),
        plastic.rule)
    plastic.recorders.append(rec)
    where = picked["shard"] * c + rank
    self.parts.append({"record": rec, "where": where, "pre": picked["pre"],
                       "post": picked["post"],
                       "name": f"{self.key}__{len(self.parts)}"})

  def monitors(self) -> dict:
    return {p["name"]: StateMonitor(p["record"].values, index=p["where"])
            for p in self.parts}

  @property
  def events(self) -> dict:
    """NEST's events: ``senders``, ``targets``, ``times`` (ms), ``weights``,
    ordered by time, then sender, then target."""
    net = self.network
    runner = net.runner
    cols: dict[str, list] = {k: [] for k in ("senders", "targets", "times",
                                             "weights")}
    for p in self.parts:
      if runner is None or p["name"] not in runner.result.kinds:
        continue
      data = runner.result[p["name"]]
      values = np.asarray(data.values)           # [blocks, picked, every]
      block, col, k = np.nonzero(~np.isnan(values))
      steps = np.asarray(data.steps, np.int64)[block] * values.shape[2] + k
      cols["senders"].append(p["pre"][col])
      cols["targets"].append(p["post"][col])
      cols["times"].append((steps + 1) * net.dt)
      cols["weights"].append(values[block, col, k])
    if not cols["times"]:
      return {"senders": np.zeros(0, np.int64),
              "targets": np.zeros(0, np.int64), "times": np.zeros(0),
              "weights": np.zeros(0)}
    out = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((out["targets"], out["senders"], out["times"]))
    return {k: v[order] for k, v in out.items()}


class _Picked:
  """One connection's picked synapses: ``table [S * C, 2]`` (local slot,
  presynaptic id) and ``values [S * C, every]``."""

  def __init__(self, table: ParamState, values: ShortTermState, rule: Any):
    self.table, self.values, self.rule = table, values, rule

  def sample(self, values, table, carried, fired, k):
    """Per shard, after step ``k`` of a block: column ``k`` of ``values``
    set to what each picked synapse delivered (NaN: its pre did not fire)."""
    slot, pre = table[:, 0], table[:, 1]
    n_pre = fired.shape[0]
    w = carried["weight"][jnp.minimum(slot, carried["weight"].shape[0] - 1)]
    if isinstance(self.rule, Tsodyks2Synapse):
      j = jnp.minimum(pre, n_pre - 1)
      u, x = carried["pre"]["u"][j], carried["pre"]["x"][j]
      w = (x * u * 1.0) * w  # as tsodyks2_rows computes it
    spiked = fired[jnp.minimum(pre, n_pre - 1)] & (pre < n_pre)
    col = jnp.where(spiked, w, jnp.nan).astype(values.dtype)
    return jax.lax.dynamic_update_slice_in_dim(values, col[:, None], k, 1)


class WeightHistogram:
  """The weights of one plastic connection counted in ``bins`` (edges,
  NumPy's ``histogram`` convention: the last bin includes its right edge)
  every ``interval`` ms. After a run: ``counts [time, len(bins) - 1]``,
  ``times`` (ms), ``bins``."""

  def __init__(self, synapses: Any, bins: Any, interval: float, key: str):
    self.synapses, self.key = synapses, key
    self.bins = np.asarray(bins, np.float64)
    if self.bins.ndim != 1 or self.bins.size < 2 or np.any(
        np.diff(self.bins) <= 0):
      raise ValueError("histogram: bins must be at least two increasing "
                       "edges.")
    self.interval = float(interval)

  def interval_steps(self, dt: float) -> int:
    steps = self.interval / dt
    if abs(steps - round(steps)) > 1e-9 * max(1.0, steps) or round(steps) < 1:
      raise ValueError(f"histogram {self.key!r}: interval {self.interval} ms "
                       f"is not a whole number of steps of dt = {dt} ms.")
    return int(round(steps))

  def monitor(self, plastic: Any, mesh: Any, axis: str, steps: int
              ) -> StateMonitor:
    """The Runner monitor: counts every ``steps`` calls of the step."""
    n_local = plastic.index.value.n_local
    nb = self.bins.size - 1

    def local(w, post):
      edges = jnp.asarray(self.bins, w.dtype)
      b = jnp.searchsorted(edges, w, side="right") - 1
      b = jnp.where(w == edges[-1], nb - 1, b)
      ok = (post.astype(jnp.int32) < n_local) & (b >= 0) & (b < nb)
      c = jnp.zeros(nb, jnp.int32).at[jnp.where(ok, b, nb)].add(
          1, mode="drop")
      return jax.lax.psum(c, axis)

    def counts():
      return jax.shard_map(local, mesh=mesh, in_specs=(P(axis), P(axis)),
                           out_specs=P())(plastic.weight.value,
                                          plastic.index.value.post)
    counts.__name__ = self.key
    return StateMonitor(counts, every=steps)

  def _data(self):
    runner = self.synapses.network.runner
    if runner is None or self.key not in runner.result.kinds:
      return None
    return runner.result[self.key]

  @property
  def counts(self) -> np.ndarray:
    data = self._data()
    if data is None:
      return np.zeros((0, self.bins.size - 1), np.int64)
    return np.asarray(data.values, np.int64)

  @property
  def times(self) -> np.ndarray:
    data = self._data()
    net = self.synapses.network
    if data is None:
      return np.zeros(0)
    return (np.asarray(data.steps, np.float64) + 1) * (
        net.dt * net.exchange_every)
