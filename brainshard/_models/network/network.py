"""A network in NEST's terms: create populations, connect them, add devices
and recorders, then ``simulate(ms)`` and continue.

:class:`Network` is the one object a NEST script ports to, call for call:

====================================  ====================================
NEST                                  brainshard
====================================  ====================================
``nest.resolution = 0.1``             ``net = bm.Network(dt=0.1, seed=1)``
``E = nest.Create('iaf_psc_delta',    ``E = net.create('iaf_psc_delta',
n, params)``                          n, params)``
``nest.Connect(E, E + I, conn_spec,   ``net.connect(E, E + I, conn_spec,
syn_spec)``                           syn_spec)``
``nest.Create('poisson_generator')``  ``net.create('poisson_generator')``
``nest.Create('spike_recorder')``     ``net.create('spike_recorder')``
``nest.Simulate(1000.0)``             ``net.simulate(1000.0)``
``sr.get('events')``                  ``sr.events``
====================================  ====================================

Beneath it, on the first ``simulate`` (or :meth:`Network.build`), the
populations become one :class:`~brainshard._models.layout.Layout` sharded
over a mesh axis, the connections one
:class:`~brainshard._models.delivery.index.SynapseIndex` (``bm.connect``),
the neurons of each model class a :class:`~.groups.ModelGroup`, and the step
a :class:`~brainshard._models.delivery.delivery.Delivery` that exchanges
spikes every ``exchange_every`` steps (the shortest delay by default), run
by a ``bs.Runner`` in compiled chunks with the recorders as its monitors.
The network checks its own consistency: one ``dt`` for connectivity,
delivery and records; each connection's receptor against the receptors its
target's model declares; durations in whole exchange intervals. The same
seed gives the same spikes on any mesh.

Example:
  >>> import jax, brainshard as bs
  >>> from brainshard import models as bm
  >>> net = bm.Network(dt=0.1, seed=1, mesh=jax.make_mesh((1,), ('x',)))
  >>> E = net.create('iaf_psc_delta', 40, {'I_e': 500.0})
  >>> I = net.create('iaf_psc_delta', 10)
  >>> net.connect(E, E + I, {'rule': 'fixed_indegree', 'indegree': 4},
  ...             {'weight': 0.5, 'delay': 1.5})
  >>> sr = net.create('spike_recorder')
  >>> net.connect(E, sr)
  >>> net.simulate(30.0)
  >>> sr.n_events, float(sr.events['times'].min())
  (80, 13.9)
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.connectivity.connect import connect
from brainshard._models.connectivity.projection import Projection
from brainshard._models.delays import check_dt, delay_steps
from brainshard._models.delivery.delivery import Delivery, delay_bounds
from brainshard._models.devices import DEVICES
from brainshard._models.devices.base import Device
from brainshard._models.layout import Layout, mesh_axis
from brainshard._models.population import population_ids
from brainshard._models.network.groups import ModelGroup, group_key
from brainshard._models.network.persist import NetworkState
from brainshard._models.network.specs import (
    conn_rule, neuron_model, syn_spec as read_syn_spec)
from brainshard._models.network.stimulus import Stimulus
from brainshard._models.network.poisson_pass import passes
from brainshard._models.network.nodes import DeviceNode, NodeCollection
from brainshard._models.network.recorders import (
    RECORDERS, Multimeter, Recorder, SpikeRecorder)
from brainshard._models.network.synapses import (
    Synapses, build_plastic, tau_minus, weight_monitors)
from brainshard._models.network.weights import WeightRecorder
from brainshard._models.neurons.base import NeuronModel
from brainshard._models.plasticity.history import DEFAULT_SIZE
from brainshard._simulation.runner.runner import Runner, whole_steps

__all__ = ["Network"]

class Network(NetworkState):
  """Populations, connections, devices and recorders, simulated on a mesh.

  Args:
    dt: the resolution (ms).
    seed: connectivity, initial draws and devices' draws (an int).
    mesh: a ``jax.sharding.Mesh``; None takes the one set with
      ``jax.set_mesh``, else all devices on one axis ``'x'``.
    axis: the mesh axis the neurons are split over (default: the only one).
    dtype: the neurons' floats (float64 needs ``jax_enable_x64``).
    exchange_every: steps between spike exchanges (default: the shortest
      delay, reduced so that every multimeter interval and the first
      ``simulate``'s (or ``compile``'s) duration are multiples).
    chunk, progress, record_to: as ``bs.Runner``'s (``record_to``: a zarr
      path the recorders' records go to, host memory staying flat).
    history: the entries of each neuron's spike history kept for the STDP
      synapses onto it (``H``; see ``plasticity/history.py``): an update
      that needed an older one is counted in :attr:`plasticity_overflow`.
  """

  def __init__(self, dt: float = 0.1, *, seed: int = 0, mesh: Any = None,
               axis: str | None = None, dtype: Any = jnp.float32,
               exchange_every: int | None = None, chunk: int | None = None,
               progress: bool | str = False, record_to: Any = None,
               history: int = DEFAULT_SIZE):
    self.dt = check_dt(dt, "Network")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(
        seed, (int, np.integer)):
      raise TypeError(f"Network: seed must be an int, got {seed!r}.")
    if not 0 <= seed < 2**63:
      raise ValueError(f"Network: seed must be in [0, 2**63), got {seed}.")
    self.seed = int(seed)
    self.dtype = jnp.dtype(dtype)
    if self.dtype == jnp.float64 and not jax.config.jax_enable_x64:
      raise ValueError("Network(dtype=float64) needs 64-bit floats: "
                       "jax.config.update('jax_enable_x64', True) first.")
    self.mesh, self.axis = mesh_axis(mesh, axis, "Network", all_devices=True)
    if isinstance(history, bool) or not isinstance(history, int) or (
        history < 1):
      raise ValueError(f"Network: history = {history!r} entries must be a "
                       "positive int.")
    self.history = history
    self._exchange = exchange_every
    self.chunk, self.progress, self.record_to = chunk, progress, record_to
    self._populations: list[tuple[str, NeuronModel, int]] = []
    self._projections: list[Projection] = []
    self._keys: list[int] = []          # each static projection's place
    self._plastic: list[Synapses] = []
    self._weight_recorders: list[WeightRecorder] = []
    self._recorders: list[Recorder] = []
    self._stimuli: list[Stimulus] = []
    self._initial: dict[str, dict] = {}
    self._devices: list[DeviceNode] = []
    self.runner: Runner | None = None
    self.delivery: Delivery | None = None
    self.groups: list[ModelGroup] = []
    self.plastic: list[Any] = []
    self.archive: Any = None

  def __repr__(self) -> str:
    pops = ", ".join(f"{label}: {n} {m.nest_name}"
                     for label, m, n in self._populations)
    return f"Network(dt={self.dt}, {pops or 'empty'})"

  # -- building the network --------------------------------------------------

  @property
  def built(self) -> bool:
    return self.runner is not None

  @property
  def n_neurons(self) -> int:
    return sum(n for _, _, n in self._populations)

  def _not_built(self, what: str) -> None:
    if self.built:
      raise RuntimeError(
          f"Network.{what}: the network was built by the first simulate; "
          "create and connect everything before it.")

  def create(self, model: Any, n: int = 1,
             params: Mapping[str, Any] | None = None, *,
             label: str | None = None) -> Any:
    """``n`` neurons of ``model`` (a NEST model name, a ``bs.models``
    neuron class or instance), or a recorder (``'spike_recorder'``,
    ``'multimeter'``). ``params``: NEST's parameter names; a value may be
    one number or one per neuron. Returns a :class:`NodeCollection`, or
    the recorder."""
    self._not_built("create")
    if isinstance(n, Mapping) and params is None:  # create(model, params)
      n, params = 1, n
    params = dict(params or {})
    if isinstance(model, str) and model == WeightRecorder.nest_name:
      rec = WeightRecorder(self, label or f"{model}_"
                           f"{len(self._weight_recorders)}", **params)
      self._weight_recorders.append(rec)
      return rec
    if isinstance(model, str) and model in RECORDERS:
      key = label or f"{model}_{len(self._recorders)}"
      rec = RECORDERS[model](self, key, **params)
      self._recorders.append(rec)
      return rec
    if isinstance(model, str) and model in DEVICES or isinstance(
        model, Device):
      if n != 1:
        raise ValueError(f"create({model!r}, {n}): create one device at a "
                         "time (each of its connections is independent).")
      device = DEVICES[model](**params) if isinstance(model, str) else model
      node = DeviceNode(self, device, label or
                        f"{device.nest_name}_{len(self._devices)}")
      self._devices.append(node)
      return node
    model, initial = neuron_model(model, params)
    if isinstance(n, (bool, np.bool_)) or not isinstance(
        n, (int, np.integer)) or n < 1:
      raise ValueError(f"create: n must be a positive int, got {n!r}.")
    for name, value in {**model.params, **initial}.items():
      if np.ndim(value) and np.shape(value) != (n,):
        raise ValueError(f"create({model.nest_name!r}, {n}): parameter "
                         f"{name!r} has {np.shape(value)[0]} values, not one "
                         f"or {n}.")
    label = label or f"{model.nest_name}_{len(self._populations)}"
    if label in {p[0] for p in self._populations}:
      raise ValueError(f"create: label {label!r} is taken.")
    start = self.n_neurons
    self._populations.append((label, model, int(n)))
    self._initial[label] = initial
    return NodeCollection(self, start, start + int(n), label)

  def connect(self, pre: Any, post: Any, conn_spec: Any = None,
              syn_spec: Mapping[str, Any] | None = None) -> Any:
    """NEST's ``Connect``: neurons to neurons (``conn_spec``: a rule name,
    a NEST ``conn_spec`` dict or a ``bs.models`` rule; default
    ``'all_to_all'``; ``syn_spec``: ``weight``, ``delay`` (ms),
    ``receptor_type``, numbers or ``bs.models`` distributions), neurons to
    a spike recorder, or a multimeter to neurons.

    A ``synapse_model`` of ``'stdp_synapse'`` or ``'tsodyks2_synapse'``
    (with NEST's parameters in ``syn_spec``, and a ``weight_recorder``) or
    a ``bs.models.PairRule`` makes the synapses plastic: it returns their
    :class:`~.synapses.Synapses` handle (``get()``, ``histogram()``)."""
    self._not_built("connect")
    if isinstance(post, SpikeRecorder):
      post.ranges.append(self._nodes(pre, "pre").ids)
      return
    if isinstance(pre, Multimeter):
      pre.ranges.append(self._nodes(post, "post").ids)
      return
    if isinstance(pre, DeviceNode):
      self._connect_device(pre, self._nodes(post, "post"), conn_spec,
                           syn_spec)
      return
    if isinstance(pre, Recorder) or isinstance(post, Recorder):
      raise TypeError("connect: neurons go to a spike_recorder "
                      "(connect(neurons, recorder)); a multimeter goes to "
                      "neurons (connect(multimeter, neurons)).")
    pre, post = self._nodes(pre, "pre"), self._nodes(post, "post")
    syn, model = read_syn_spec(syn_spec)
    receptor = self._receptor(post, syn.get("receptor_type"))
    proj = Projection(pre.ids, post.ids, conn_rule(conn_spec),
                      weight=syn.get("weight", 1.0),
                      delay=syn.get("delay", 1.0), receptor=receptor,
                      name=f"{pre.label} -> {post.label}")
    # its errors now, not at build
    position = len(self._projections) + len(self._plastic)
    _, _, delay, _ = proj.checked(position)
    if delay.family == "const":
      delay_steps(delay.largest(), self.dt, proj.label(position))
    if model is None:
      self._projections.append(proj)
      self._keys.append(position)
      return None
    recorder = syn.get("weight_recorder")
    if recorder is not None and not isinstance(recorder, WeightRecorder):
      raise TypeError(f"connect: weight_recorder must be one this network "
                      f"created ('weight_recorder'), got {recorder!r:.60}.")
    handle = Synapses(self, position, proj, model, recorder)
    self._plastic.append(handle)
    return handle

  def _connect_device(self, node: DeviceNode, post: NodeCollection,
                      conn_spec: Any, syn_spec: Any) -> None:
    """A device to every neuron of ``post``, each target its own train
    (NEST's ``all_to_all`` from a generator)."""
    if conn_spec not in (None, "all_to_all") and conn_spec != {
        "rule": "all_to_all"}:
      raise ValueError(f"connect: a device connects all_to_all (every "
                       f"target its own stimulus), not {conn_spec!r}.")
    syn, model = read_syn_spec(syn_spec)
    if model is not None:
      raise ValueError(f"connect: a device's synapses are static, not "
                       f"{syn_spec['synapse_model']!r:.60}.")
    where = f"connect({node.label} -> {post.label})"
    weight = syn.get("weight", 1.0)
    if isinstance(weight, (bool, np.bool_)) or not isinstance(
        weight, (int, float, np.integer, np.floating)) or not math.isfinite(
            weight):
      raise ValueError(f"{where}: a device's weight is one finite number, "
                       f"got {weight!r:.60}.")
    delay = syn.get("delay", 1.0)
    steps = int(delay_steps(delay, self.dt, where))
    receptor = self._receptor(post, syn.get("receptor_type"))
    if receptor == "sign":
      receptor = 0 if weight >= 0 else 1
    self._stimuli.append(Stimulus(node.device, post.ids, float(weight),
                                  steps, receptor, len(self._stimuli)))

  def _nodes(self, nodes: Any, side: str) -> NodeCollection:
    if not isinstance(nodes, NodeCollection) or nodes.network is not self:
      raise TypeError(f"connect: {side} must be neurons this network "
                      f"created, got {nodes!r:.60}.")
    return nodes

  def _models_of(self, nodes: NodeCollection) -> list[NeuronModel]:
    out, start = [], 0
    for _, model, n in self._populations:
      if start < nodes.stop and nodes.start < start + n:
        out.append(model)
      start += n
    return out

  def _receptor(self, post: NodeCollection, receptor: Any) -> Any:
    """The connection's receptor: NEST's sign routing for ``psc``/``cond``
    models, else 0; a given one is checked against every target model."""
    models = self._models_of(post)
    if receptor is None:
      routed = {m.sign_routed for m in models}
      if len(routed) > 1:
        raise ValueError(f"connect: the targets {post!r} mix models that "
                         "route by sign and models that do not; connect "
                         "each population.")
      return "sign" if routed.pop() else 0
    for m in models:
      if not (isinstance(receptor, (int, np.integer)) and
              0 <= receptor < m.n_receptors):
        raise ValueError(
            f"connect: receptor_type {receptor!r} does not exist on "
            f"{m.nest_name}, whose receptors are {list(m.receptors)} "
            f"(0 .. {m.n_receptors - 1}).")
    return int(receptor)

  def build(self, t: float | None = None) -> None:
    """Builds the layout, synapses, model groups, delivery and runner (the
    first ``simulate`` or ``compile`` calls it with its duration ``t``, ms:
    NEST simulates any whole number of steps, so unless ``exchange_every``
    was given the exchange interval divides ``t``'s steps)."""
    if self.built:
      return
    first = None if t is None else self._dt_steps(t, "build")
    if not self._populations:
      raise ValueError("Network.build: no neurons; create some first.")
    layout = Layout([(label, n) for label, _, n in self._populations],
                    n_shards=self.mesh.shape[self.axis])
    index = connect(self._projections, layout, dt=self.dt, seed=self.seed,
                    mesh=self.mesh, axis=self.axis, keys=self._keys)
    self.plastic, self.archive = build_plastic(
        self._plastic, layout, dt=self.dt, seed=self.seed, mesh=self.mesh,
        axis=self.axis, dtype=self.dtype,
        tau_minus=tau_minus(self._populations, layout), history=self.history)
    by_key: dict[Any, list] = {}
    for label, model, _ in self._populations:
      by_key.setdefault(group_key(model), []).append((label, model))
    self.layout = layout
    self.groups = [ModelGroup(members, layout, dt=self.dt, mesh=self.mesh,
                              axis=self.axis, dtype=self.dtype,
                              initial=self._initial)
                   for members in by_key.values()]
    self._passes = passes(self._stimuli, self.dt)  # Poisson draws fused
    every = self._exchange_every(delay_bounds(index, self.plastic)[0], first)
    for rec in self._weight_recorders:
      for syn in self._plastic:
        if syn.recorder is rec:
          rec.attach(syn.plastic, self.mesh, self.axis, every)
    self.delivery = Delivery(index, self.mesh, axis=self.axis, every=every,
                             name="network", dtype=self.dtype,
                             plastic=self.plastic)
    self.step = self.delivery.step(self._update)
    monitors: dict[str, Any] = {}
    for rec in self._recorders:
      if isinstance(rec, SpikeRecorder):
        monitors[rec.key] = rec.monitor(every, layout.n_padded,
                                        self.mesh.shape[self.axis])
      else:
        monitors.update(rec.monitors(every, self.dt, self._parts(rec)))
    monitors.update(weight_monitors(self._plastic, self._weight_recorders,
                                    every, self.dt, self.mesh, self.axis))
    self.runner = Runner(self.step, monitors, dt=self.dt * every,
                         chunk=self.chunk, progress=self.progress,
                         record_to=self.record_to,
                         checkpoint_states=self._states())

  def _exchange_every(self, min_delay: int, first: int | None) -> int:
    intervals = [rec.interval_steps(self.dt) for rec in self._recorders
                 if isinstance(rec, Multimeter)] + [
                     h.interval_steps(self.dt) for syn in self._plastic
                     for h in syn.histograms]
    every = self._exchange
    if every is None:
      every = min_delay
      # e.g. NEST's Brunel example: 1000 ms with 1.5 ms delays, every 5 steps
      for k in intervals + ([first] if first else []):
        every = math.gcd(every, k)
    elif not (isinstance(every, int) and 1 <= every <= min_delay) or any(
        k % every for k in intervals):
      raise ValueError(
          f"Network: exchange_every = {every!r} must be an int in [1, "
          f"{min_delay}] (the shortest delay in steps) that divides every "
          f"multimeter and weight histogram interval ({intervals} steps).")
    return every

  @property
  def exchange_every(self) -> int:
    return self.delivery.every if self.delivery else 1

  def _parts(self, rec: Multimeter) -> list[tuple[dict, np.ndarray]]:
    """``rec``'s neurons by model group: ``(the group's States of the
    recorded variables, the group's recorded ids)``."""
    ids = rec.ids()
    pops = population_ids(self.layout)[ids]
    parts = []
    for group in self.groups:
      mine = np.isin(pops, [self.layout.names.index(label)
                            for label in group.labels])
      if not mine.any():
        continue
      allowed = group.model.recordable()
      bad = [v for v in rec.params["record_from"] if v not in allowed]
      if bad:
        raise ValueError(f"multimeter {rec.key!r}: {bad} are not recordables"
                         f" of {group.model.nest_name}; it has "
                         f"{list(allowed)}.")
      parts.append(({v: group.states[v] for v in rec.params["record_from"]},
                    ids[mine]))
    return parts

  # -- one step, per shard ---------------------------------------------------

  def _update(self, inputs: jax.Array) -> jax.Array:
    """The neurons' step inside the Delivery's ``bs.shard_map``: ``inputs
    [R, n_local]`` is the recurrent input arriving now."""
    n_local = self.layout.n_local
    ids = jax.lax.axis_index(self.axis) * n_local + jnp.arange(
        n_local, dtype=jnp.int32)
    inputs = inputs.astype(self.dtype)
    currents = jnp.zeros(n_local, self.dtype)
    if self._stimuli:
      rows = max(inputs.shape[0], 1 + max(
          (s.receptor for s in self._stimuli if s.device.emits == "spikes"),
          default=0))
      inputs = jnp.concatenate([inputs, jnp.zeros(
          (rows - inputs.shape[0], n_local), self.dtype)])
      t = self.delivery.t.value
      for stim in self._passes:
        inputs, currents = stim.add(inputs, currents, t, ids, self.seed,
                                    self.dt, self.dtype,
                                    self.mesh.shape[self.axis])
    spikes = jnp.zeros(n_local, bool)
    for group in self.groups:
      spikes = spikes | group.step(inputs, currents, ids)
    spikes = spikes & (ids < self.layout.n)  # padding never fires
    if self.archive is not None:  # NEST stamps a spike with the step's end
      self.archive.record(spikes, self.delivery.t.value + 1)
    return spikes

  # -- running ---------------------------------------------------------------

  def _dt_steps(self, t: Any, what: str) -> int:
    """``t`` ms in steps of ``dt``: a whole number, as NEST requires."""
    return whole_steps(t, self.dt, f"Network.{what}")

  def _steps(self, t: Any, what: str) -> int:
    self._dt_steps(t, what)
    block = self.dt * self.exchange_every
    blocks = t / block
    if abs(blocks - round(blocks)) > 1e-9 * max(1.0, blocks):
      raise ValueError(
          f"Network.{what}({t}): not a whole number of exchange intervals "
          f"({self.exchange_every} steps of dt = {self.dt} ms = {block:g} "
          f"ms, set by the shortest delay and the first simulate); simulate "
          f"a multiple of {block:g} ms, or build with exchange_every=1.")
    return int(round(blocks))

  def simulate(self, t: float) -> None:
    """Simulates ``t`` ms (building first), continuing from where the
    last call stopped; recorders keep every call's records."""
    self._dt_steps(t, "simulate")
    self.build(t)
    before = self.plasticity_overflow
    self.runner.run(self._steps(t, "simulate"))
    after = self.plasticity_overflow
    if after > before:
      warnings.warn(
          f"Network.simulate: {after - before} STDP update(s) may have "
          f"missed a post spike (a neuron fired more than history = "
          f"{self.history} times within a synapse's window): their weights "
          "are not NEST's. Raise Network(history=...).", RuntimeWarning,
          stacklevel=2)

  def compile(self, t: float) -> float:
    """Compiles, ahead of time, what ``simulate(t)`` will run (so that a
    timed simulate compiles nothing); returns the seconds it took."""
    self._dt_steps(t, "compile")
    self.build(t)
    return self.runner.compile(self._steps(t, "compile"))

  @property
  def time(self) -> float:
    """The simulated time reached (ms)."""
    return 0.0 if self.runner is None else self.runner.time

  def get(self, nodes: NodeCollection, name: str) -> np.ndarray:
    """The current value of state variable ``name`` of ``nodes`` (NEST's
    ``nodes.get(name)``), a host copy."""
    self.build()
    self._nodes(nodes, "nodes")
    for group in self.groups:
      if name in group.states and any(
          a <= nodes.start and nodes.stop <= b for a, b in group.ranges):
        return np.asarray(group.states[name].value)[nodes.start:nodes.stop]
    raise ValueError(f"Network.get: {nodes!r} has no state variable "
                     f"{name!r} (or spans models).")
