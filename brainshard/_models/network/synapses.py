"""A network's plastic connection: what ``net.connect`` returns for a
``stdp_synapse``, a ``tsodyks2_synapse`` or a user's ``PairRule``, and how
it is built into its own :class:`~brainshard._models.delivery.plastic.
PlasticSynapses`.

A plastic connection is keyed by its place among all of the network's
connections, as a static one is: making a connection plastic changes none
of the network's synapses. Its index is built alone with ``bm.connect``
(weights in the network's dtype; a constant weight exactly, as NEST's), its
rule's per-presynaptic state starts at NEST's initial values, and the post
neurons' ``tau_minus`` comes from their models (NEST's ``ArchivingNode``).

:class:`Synapses` is the handle (NEST's ``SynapseCollection``):
``get()`` reads the synapses (``source``, ``target``, ``weight``,
``delay``, and the rule's ``Kplus`` or ``u``, ``x``), ``histogram(bins,
interval)`` records their weights' distribution over time.

Example: see docs/plasticity.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._scaleout.multihost import gather
from brainshard._models.connectivity.connect import connect
from brainshard._models.connectivity.parameters import Parameter
from brainshard._models.connectivity.projection import Projection
from brainshard._models.connectivity.rules import Explicit
from brainshard._models.delivery.archive import Archive
from brainshard._models.delivery.plastic import PlasticSynapses
from brainshard._models.network.weights import (
    WeightHistogram, host_synapses)
from brainshard._models.plasticity.history import TAU_MINUS
from brainshard._models.plasticity.pair_rule import PairRule
from brainshard._models.plasticity.stdp import StdpSynapse

__all__ = ["Synapses", "build_plastic", "tau_minus", "weight_monitors"]


class Synapses:
  """A plastic connection of ``network`` (``net.connect``'s handle): the
  ``position``-th of its connections, ``projection`` with ``model`` (a
  ``StdpSynapse``, ``Tsodyks2Synapse`` or ``PairRule``)."""

  def __init__(self, network: Any, position: int, projection: Projection,
               model: Any, recorder: Any = None):
    self.network, self.position = network, position
    self.projection, self.model, self.recorder = projection, model, recorder
    self.histograms: list[WeightHistogram] = []
    self.plastic: PlasticSynapses | None = None

  @property
  def synapse_model(self) -> str:
    return getattr(self.model, "nest_name", "pair_rule")

  def __repr__(self) -> str:
    return (f"Synapses({self.synapse_model}, "
            f"{self.projection.name or self.position})")

  def histogram(self, bins: Any, interval: float = 1.0) -> WeightHistogram:
    """Records the weights' distribution in ``bins`` (edges) every
    ``interval`` ms (a multiple of the exchange interval); call before the
    first ``simulate``."""
    self.network._not_built("histogram")
    hist = WeightHistogram(self, bins, interval,
                           f"weights_{self.position}_{len(self.histograms)}")
    self.histograms.append(hist)
    return hist

  def get(self) -> dict:
    """The synapses on the host (NEST's ``GetConnections(...).get()``), in
    index order (target shard, source, then the rule's order): ``source``,
    ``target`` (global ids), ``weight``, ``delay`` (ms), and per synapse
    its source's ``Kplus`` (pair rules) or ``u``, ``x`` (tsodyks2)."""
    self.network.build()
    plastic = self.plastic
    index = plastic.index.value
    table = host_synapses(index)
    h = gather({"weight": plastic.weight.value, "delay": index.delay,
                "pre": plastic.pre.value})
    flat = table["shard"] * index.capacity + table["slot"]
    at_pre = table["shard"] * index.n_pre + table["pre"]
    out = {"source": table["pre"], "target": table["post"],
           "weight": np.asarray(h["weight"])[flat],
           "delay": np.asarray(h["delay"], np.int64)[flat] * self.network.dt}
    names = {"kplus": "Kplus", "u": "u", "x": "x"}
    for k, v in h["pre"].items():
      if k in names:
        out[names[k]] = np.asarray(v)[at_pre]
    return out


def _rule(model: Any) -> Any:
  if isinstance(model, StdpSynapse):
    return model.rule()
  return model


def _exact_weight(index: Any, proj: Projection, dtype: Any) -> Any:
  """A constant weight set exactly in ``dtype`` (the build draws in
  float32: 0.1 would become float32's 0.1 in a float64 network)."""
  weight = proj.weight
  if isinstance(proj.rule, Explicit) and proj.rule.weight is not None or (
      isinstance(weight, Parameter) and weight.family != "const"):
    return index  # given per synapse, or drawn
  value = weight.numbers()[0] if isinstance(weight, Parameter) else weight
  w = jnp.full(index.weight.shape, float(value), dtype)
  w = jax.device_put(w, index.weight.sharding)
  return dataclasses.replace(index, weight=w)


def build_plastic(synapses: list[Synapses], layout: Any, *, dt: float,
                  seed: int, mesh: Any, axis: str, dtype: Any,
                  tau_minus: np.ndarray, history: int
                  ) -> tuple[list[PlasticSynapses], Archive | None]:
  """Each plastic connection's own index and States, and the post
  neurons' archive where a pair rule needs it."""
  pair = any(not hasattr(s.model, "nest_name") or isinstance(
      s.model, StdpSynapse) for s in synapses)
  archive = None
  if pair:
    archive = Archive(tau_minus, mesh, axis, dt=dt, size=history,
                      dtype=dtype, name="network.archive")
  out = []
  for syn in synapses:
    proj = syn.projection
    index = connect([proj], layout, dt=dt, seed=seed, mesh=mesh, axis=axis,
                    keys=[syn.position], weight_dtype=dtype)
    index = _exact_weight(index, proj, dtype)
    rule = _rule(syn.model)
    kplus = syn.model.params.get("Kplus", 0.0) if isinstance(
        syn.model, StdpSynapse) else 0.0
    plastic = PlasticSynapses(
        index, rule, mesh, axis, dt=dt,
        archive=archive if isinstance(rule, PairRule) else None,
        kplus=kplus, name=f"network.plastic{syn.position}")
    syn.plastic = plastic
    out.append(plastic)
  return out, archive


def tau_minus(populations: list, layout: Any) -> np.ndarray:
  """The neurons' ``tau_minus`` (ms) over the padded axis, from each
  population's model (NEST's default, 20 ms, for the padding)."""
  out = np.full(layout.n_padded, TAU_MINUS, np.float64)
  for label, model, _ in populations:
    start, stop = layout.range(label)
    out[start:stop] = model.params.get("tau_minus", TAU_MINUS)
  return out


def weight_monitors(synapses: list[Synapses], recorders: list, every: int,
                    dt: float, mesh: Any, axis: str) -> dict:
  """The Runner monitors of the weight recorders and histograms."""
  out = {}
  for rec in recorders:
    out.update(rec.monitors())
  for syn in synapses:
    for hist in syn.histograms:
      out[hist.key] = hist.monitor(syn.plastic, mesh, axis,
                                   hist.interval_steps(dt) // every)
  return out
