"""NEST's recorders on a network: ``spike_recorder`` and ``multimeter``.

A recorder is a handle that a :class:`~.network.Network` turns into a
``bs.Runner`` monitor when it builds: a spike recorder records the spikes
of the neurons connected to it as sparse events (filtered on the device,
so only those neurons' spikes are stored), a multimeter records NEST's
recordables of the neurons it is connected to every ``interval`` ms.
Records accumulate over ``simulate`` calls; times are NEST's: a spike in
the step from ``t`` to ``t + dt`` is stamped ``t + dt``, and a multimeter
samples the state at ``interval``, ``2 * interval``, ...

Example: see :class:`~brainshard._models.network.network.Network`.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from brainshard._models.nest_params import refuse_unknown
from brainshard._simulation.monitors.monitors import SpikeMonitor, StateMonitor
from brainshard._simulation.monitors.records import SpikeData

__all__ = ["SpikeRecorder", "Multimeter", "RECORDERS"]


class Recorder:
  """What the two recorders share: a name, connected id ranges, and the
  network that fills their records."""

  nest_name = ""
  defaults: dict[str, Any] = {}

  def __init__(self, network: Any, key: str, **params: Any):
    refuse_unknown(self.nest_name, self.defaults, params)
    self.network, self.key = network, key
    self.params = {**self.defaults, **params}
    self.ranges: list[tuple[int, int]] = []

  def __repr__(self) -> str:
    return f"{type(self).__name__}({self.key!r}, {len(self.ids())} neurons)"

  def ids(self) -> np.ndarray:
    """The global ids of the connected neurons, in order, once each."""
    if not self.ranges:
      return np.zeros(0, np.int64)
    return np.unique(np.concatenate([np.arange(a, b) for a, b in self.ranges]))

  def _result(self) -> Any:
    runner = self.network.runner
    if runner is None or self.key not in runner.result.kinds:
      return None
    return runner.result[self.key]


class SpikeRecorder(Recorder):
  """NEST's ``spike_recorder``: ``net.connect(neurons, recorder)``.

  ``events``: NEST's dict, ``senders`` (global neuron ids, from 0) and
  ``times`` (ms), ordered by time then sender; ``spikes``: the same as a
  ``bs.SpikeData`` (steps of ``dt``, for ``bs.models`` analysis). The
  Runner's own record of a recorder on one range of neurons on one shard
  (in memory or ``record_to``) counts ids from the range's first neuron
  (see :meth:`monitor`); ``events`` and ``spikes`` add it back."""

  nest_name = "spike_recorder"

  def monitor(self, every: int, n: int, shards: int = 1) -> SpikeMonitor:
    """The Runner monitor: this recorder's spikes of a block of ``every``
    steps, as one neuron-major vector (see ``block_spikes``). On one shard
    (``shards``), neurons in one range (a population) are recorded as that
    slice only: eight recorders, one per population, then record each
    neuron once, not eight times (a sharded axis is masked instead: a
    slice across shards is not a shard's block)."""
    ids = self.ids()
    keep = np.zeros(n, bool)
    keep[ids] = True
    everything = keep.all()
    one_range = (shards == 1 and len(ids) > 0
                 and ids[-1] - ids[0] + 1 == len(ids))
    # neuron ids of the record count from here
    self._first = int(ids[0]) if one_range and not everything else 0

    def source(out):
      spikes = out if out.ndim == 2 else out[None]       # [every, n]
      if one_range and not everything:
        spikes = spikes[:, ids[0]:ids[-1] + 1]
      elif not everything:
        spikes = spikes & jnp.asarray(keep)[None, :]
      return spikes.T.reshape(-1)
    source.__name__ = self.key
    return SpikeMonitor(source)

  @property
  def spikes(self) -> SpikeData:
    data = self._result()
    net = self.network
    if data is None:
      return SpikeData(np.zeros(0, np.int64), np.zeros(0, np.int32),
                       net.n_neurons if net.built else 0, net.dt)
    every = net.exchange_every
    flat = np.asarray(data.neurons, np.int64)
    steps = np.asarray(data.steps, np.int64) * every + flat % every
    neurons = flat // every + self._first
    order = np.lexsort((neurons, steps))
    return SpikeData(steps[order], neurons[order].astype(np.int32),
                     net.layout.n_padded, net.dt)

  @property
  def n_events(self) -> int:
    return int(len(self.spikes.steps))

  @property
  def events(self) -> dict:
    s = self.spikes
    return {"senders": np.asarray(s.neurons, np.int64),
            "times": (np.asarray(s.steps, np.float64) + 1) * s.dt}


class Multimeter(Recorder):
  """NEST's ``multimeter``: ``net.connect(multimeter, neurons)``, with
  ``record_from`` (recordables of one model) and ``interval`` (ms, a
  multiple of ``dt``; default 1.0).

  ``events``: NEST's dict, ``senders``, ``times`` and one entry per
  recorded variable, flat (time-major); ``traces``: ``{variable: [time,
  neuron]}`` with ``times``."""

  nest_name = "multimeter"
  defaults = {"record_from": (), "interval": 1.0}

  def interval_steps(self, dt: float) -> int:
    steps = self.params["interval"] / dt
    if abs(steps - round(steps)) > 1e-9 * max(1.0, steps) or round(steps) < 1:
      raise ValueError(
          f"multimeter {self.key!r}: interval {self.params['interval']} ms "
          f"is not a whole number of steps of dt = {dt} ms.")
    return int(round(steps))

  def monitors(self, every: int, dt: float, parts: list) -> dict:
    """One StateMonitor per recorded variable and model group (``parts``:
    ``(the group's States by variable, its recorded ids)``)."""
    out, steps = {}, self.interval_steps(dt) // every
    self._parts = [ids for _, ids in parts]
    for k, (states, ids) in enumerate(parts):
      for var in self.params["record_from"]:
        out[f"{self.key}__{var}__{k}"] = StateMonitor(
            states[var], index=ids, every=steps)
    return out

  @property
  def traces(self) -> dict:
    """``{variable: [time, neuron] (ids in order), 'times': ms}``."""
    result = self._result_of()
    if result is None:
      return {}
    ids = np.concatenate(self._parts)
    order = np.argsort(ids, kind="stable")
    out = {}
    for var in self.params["record_from"]:
      parts = [result[f"{self.key}__{var}__{k}"]
               for k in range(len(self._parts))]
      out[var] = np.concatenate([np.asarray(d.values) for d in parts],
                                axis=1)[:, order]
    out["times"] = (np.asarray(parts[0].steps, np.float64) + 1) * (
        self.network.dt * self.network.exchange_every)
    return out

  def _result_of(self):
    runner = self.network.runner
    if runner is None or not self.params["record_from"] or (
        f"{self.key}__{self.params['record_from'][0]}__0"
        not in runner.result.kinds):
      return None
    return runner.result

  @property
  def events(self) -> dict:
    traces = self.traces
    if "times" not in traces:
      return {"senders": np.zeros(0, np.int64), "times": np.zeros(0)}
    ids = self.ids()
    times = traces.pop("times")
    out = {"senders": np.tile(ids, len(times)),
           "times": np.repeat(times, len(ids))}
    out.update({var: v.reshape(-1) for var, v in traces.items()})
    return out


RECORDERS = {cls.nest_name: cls for cls in (SpikeRecorder, Multimeter)}
