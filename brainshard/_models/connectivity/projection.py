"""A projection: which populations to connect, by which rule, with which
weight, delay and receptor (what to connect, not how).

Example:
  >>> from brainshard._models.connectivity.projection import Projection
  >>> from brainshard._models.connectivity.rules import FixedInDegree
  >>> from brainshard._models.connectivity.parameters import Normal
  >>> p = Projection('E', 'I', FixedInDegree(10),
  ...                weight=Normal(0.1, 0.01, lower=0.0), delay=1.5)
  >>> p.rule.k, p.receptor
  (10, 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from brainshard._models.connectivity.parameters import Parameter, parameter
from brainshard._models.connectivity.rules import Rule

__all__ = ["Projection"]


@dataclass(frozen=True)
class Projection:
  """Synapses from population ``pre`` to population ``post``.

  ``pre``/``post``: a Layout population name or a global id range
  ``(start, stop)``. ``rule``: a :class:`~.rules.Rule` or a NEST
  ``conn_spec`` dict. ``weight``: a number or a
  :class:`~.parameters.Parameter`. ``delay``: in ms, a number or a
  parameter (distributions are redrawn below ``0.5 * dt``); converted to
  ``round(delay / dt) >= 1`` steps. ``receptor``: the target's input
  channel (an int >= 0), or ``'sign'``: NEST's routing of ``psc`` and
  ``cond`` models, each synapse to receptor 0 if its weight is >= 0 and to
  receptor 1 if it is negative.
  """

  pre: str | tuple[int, int]
  post: str | tuple[int, int]
  rule: Rule | dict
  weight: Any = 1.0
  delay: Any = 1.0
  receptor: int = 0
  name: str | None = None

  def label(self, index: int) -> str:
    return f"projection {index}" + (f" ({self.name!r})" if self.name else (
        f" ({self.pre!r} -> {self.post!r})"))

  def checked(self, index: int) -> tuple[Rule, Parameter, Parameter, int]:
    """``(rule, weight, delay, receptor)`` checked, or an error naming
    this projection."""
    where = self.label(index)
    rule = self.rule
    if isinstance(rule, dict):
      rule = Rule.from_nest(rule)
    if not isinstance(rule, Rule):
      raise TypeError(f"{where}: rule must be a connection rule "
                      f"({sorted(Rule.registry)} or Explicit), got "
                      f"{rule!r:.60}.")
    weight = parameter(self.weight, f"{where}: weight")
    delay = parameter(self.delay, f"{where}: delay")
    if self.receptor == "sign":
      return rule, weight, delay, -1
    if isinstance(self.receptor, (bool, np.bool_)) or not isinstance(
        self.receptor, (int, np.integer)) or self.receptor < 0:
      raise ValueError(f"{where}: receptor must be an int >= 0 or 'sign', "
                       f"got {self.receptor!r}.")
    return rule, weight, delay, int(self.receptor)
