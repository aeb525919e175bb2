"""NEST's ``create`` and ``connect`` arguments, read and checked: a neuron
model and its parameters, a ``conn_spec``, a ``syn_spec`` and its synapse
model (static, NEST's plastic ``stdp_synapse`` and ``tsodyks2_synapse``,
or a user's :class:`~brainshard._models.plasticity.pair_rule.PairRule`).

Example:
  >>> from brainshard._models.network.specs import syn_spec
  >>> common, model = syn_spec({'synapse_model': 'stdp_synapse',
  ...                           'weight': 2.0, 'Wmax': 5.0})
  >>> common, model
  ({'weight': 2.0}, StdpSynapse(weight=2.0, Wmax=5.0))
  >>> syn_spec({'weight': 1.0, 'Wmax': 5.0})  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ValueError: connect: syn_spec takes [...], not ['Wmax'].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from brainshard._models.connectivity.parameters import Parameter
from brainshard._models.connectivity.rules import AllToAll, Rule
from brainshard._models.devices import DEVICES
from brainshard._models.network.recorders import RECORDERS
from brainshard._models.neurons import MODELS
from brainshard._models.neurons.base import NeuronModel
from brainshard._models.plasticity.pair_rule import PairRule
from brainshard._models.plasticity.stdp import StdpSynapse
from brainshard._models.plasticity.tsodyks2 import Tsodyks2Synapse

__all__ = ["COMMON", "SYNAPSE_MODELS", "conn_rule", "syn_spec",
           "neuron_model"]

# What every syn_spec may hold (NEST's names; ``weight_recorder``: NEST's
# synapse-model property, given here with the connection).
COMMON = {"weight", "delay", "receptor_type", "synapse_model"}
SYNAPSE_MODELS = {cls.nest_name: cls for cls in (StdpSynapse,
                                                   Tsodyks2Synapse)}


def syn_spec(spec: Any) -> tuple[dict, Any]:
  """``(common, model)``: the ``weight``, ``delay``, ``receptor_type``
  (and ``weight_recorder``) given, and the synapse model: None for
  ``static_synapse``, else a ``StdpSynapse`` or ``Tsodyks2Synapse`` with
  the spec's parameters (numbers, one set per connection), or the user's
  ``PairRule``."""
  syn = dict(spec or {})
  model = syn.get("synapse_model", "static_synapse")
  if isinstance(model, str) and model == "static_synapse":
    return _static_spec(syn), None
  if isinstance(model, PairRule):
    params, cls = {}, None
  elif isinstance(model, str) and model in SYNAPSE_MODELS:
    cls = SYNAPSE_MODELS[model]
    params = {k: syn.pop(k) for k in list(syn)
              if k in cls.defaults and k not in COMMON}
  else:
    raise ValueError(
        f"connect: synapse_model {model!r:.60}; the models are "
        f"{['static_synapse', *sorted(SYNAPSE_MODELS)]} or a "
        "bs.models.PairRule of one's own.")
  syn.pop("synapse_model")
  recorder = syn.pop("weight_recorder", None)
  common = _static_spec(syn)
  for name, value in params.items():
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)):
      raise TypeError(f"connect: {model}'s {name} must be one number for the "
                      f"connection, got {value!r:.60}.")
  if recorder is not None:
    common["weight_recorder"] = recorder
  if cls is None:
    return common, model
  weight = common.get("weight", cls.defaults["weight"])
  if not isinstance(weight, Parameter):
    params["weight"] = weight
  return common, cls(**params)

def conn_rule(conn_spec: Any) -> Rule:
  if conn_spec is None:
    return AllToAll()  # NEST's default
  if isinstance(conn_spec, str):
    conn_spec = {"rule": conn_spec}
  if isinstance(conn_spec, dict):
    return Rule.from_nest(conn_spec)
  if isinstance(conn_spec, Rule):
    return conn_spec
  raise TypeError(f"connect: conn_spec must be a NEST conn_spec (a rule name "
                  f"or a dict), or a bs.models rule; got {conn_spec!r:.60}.")



def _static_spec(syn_spec: Any) -> dict:
  syn = dict(syn_spec or {})
  unknown = sorted(set(syn) - COMMON)
  if unknown:
    raise ValueError(f"connect: syn_spec takes {sorted(COMMON)}, not "
                     f"{unknown}.")
  return syn


def neuron_model(model: Any, params: dict) -> tuple[NeuronModel, dict]:
  """The model with ``params`` set, and the initial values of state
  variables given among them (NEST's ``V_m`` in ``Create``'s params)."""
  if isinstance(model, str):
    if model not in MODELS:
      raise ValueError(f"create: unknown model {model!r}; the neuron models "
                       f"are {sorted(MODELS)}, the devices {sorted(DEVICES)}, "
                       f"the recorders {sorted(RECORDERS)}.")
    model = MODELS[model]
  cls = model if isinstance(model, type) else type(model)
  if not (isinstance(cls, type) and issubclass(cls, NeuronModel)):
    raise TypeError(f"create: model must be a NEST model name or a "
                    f"bs.models neuron model, got {model!r:.60}.")
  initial = {k: params.pop(k) for k in list(params)
             if k in cls.initial and k not in cls.defaults}
  for k, v in initial.items():
    if not np.all(np.isfinite(np.asarray(v, np.float64))):
      raise ValueError(f"create: initial {k} must be finite.")
  if isinstance(model, NeuronModel):
    changed = {k: v for k, v in model.params.items()
               if np.ndim(v) or v != model.defaults[k]}
    params = {**changed, **params}
  return cls(**params), initial
