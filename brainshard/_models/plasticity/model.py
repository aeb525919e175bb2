"""What a synapse model is here: NEST's name, parameters and defaults.

A :class:`SynapseModel` holds numbers (or per-synapse arrays), no state:
the rules' functions are pure and a network keeps the per-synapse state.

Example:
  >>> from brainshard._models.plasticity.model import SynapseModel
  >>> class Static(SynapseModel):
  ...   nest_name = 'static_synapse'
  ...   defaults = {'weight': 1.0}
  >>> Static(weight=2), Static().params
  (Static(weight=2.0), {'weight': 1.0})
  >>> Static(w=1.0)  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ValueError: static_synapse: unknown parameter(s) ['w']; its parameters ...
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

import numpy as np

from brainshard._models.nest_params import refuse_unknown

__all__ = ["SynapseModel"]


class SynapseModel:
  """A NEST synapse model's parameters: NEST's names and defaults,
  overridden by keyword (``Model(**{'lambda': 0.05})`` for a name that
  is a Python keyword). A value is a number or an array (per synapse)."""

  nest_name: ClassVar[str] = ""
  defaults: ClassVar[Mapping[str, float]] = {}

  def __init__(self, **params: Any):
    refuse_unknown(self.nest_name, self.defaults, params)
    self.params: dict[str, Any] = dict(self.defaults)
    for name, value in params.items():
      if isinstance(value, (int, float, np.number)) and not isinstance(
          value, bool):
        if not math.isfinite(float(value)):
          raise ValueError(f"{self.nest_name}: {name} must be finite.")
        value = float(value)
      self.params[name] = value
    self.check()

  def numbers(self) -> dict:
    """The parameters given as numbers (arrays, traced ones too, are not
    checked)."""
    return {k: v for k, v in self.params.items() if isinstance(v, float)}

  def check(self) -> None:
    """Raises on parameters NEST rejects (numbers only are checked)."""

  def __repr__(self) -> str:
    changed = ", ".join(f"{k}={v!r:.20}" for k, v in self.params.items()
                        if np.ndim(v) or v != self.defaults[k])
    return f"{type(self).__name__}({changed})"
