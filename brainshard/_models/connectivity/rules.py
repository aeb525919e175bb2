"""Connection rules and the projection spec (what to connect, not how).

The rules are NEST's (``nest.Connect`` ``conn_spec``): ``FixedInDegree``
(``fixed_indegree``), ``FixedOutDegree`` (``fixed_outdegree``),
``PairwiseBernoulli`` (``pairwise_bernoulli``), ``FixedTotalNumber``
(``fixed_total_number``) and ``Explicit`` arrays (NEST's
``one_to_one``/array connect). A :class:`Projection` names the pre- and
postsynaptic populations, the rule, the weight, the delay (ms) and the
receptor (the target's input channel).

Example:
  >>> from brainshard._models.connectivity.rules import FixedInDegree, Projection
  >>> from brainshard._models.connectivity.parameters import Normal
  >>> p = Projection('E', 'I', FixedInDegree(10),
  ...                weight=Normal(0.1, 0.01, lower=0.0), delay=1.5)
  >>> p.rule.k, p.receptor
  (10, 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from brainshard._models.connectivity.parameters import check_value

__all__ = ["FixedInDegree", "FixedOutDegree", "PairwiseBernoulli",
           "FixedTotalNumber", "Explicit", "Projection", "Rule"]


def _count(value: Any, what: str) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (
      value < 0):
    raise ValueError(f"{what} must be a non-negative int, got {value!r}.")


def _no_multapses(rule: str, multapses: bool) -> None:
  if not multapses:
    raise NotImplementedError(
        f"{rule}(multapses=False) is not supported: drawing without "
        "replacement needs per-target state the counter-based build avoids. "
        "Use PairwiseBernoulli (never repeats a pair) or allow multapses.")


@dataclass(frozen=True)
class FixedInDegree:
  """Each target gets ``k`` sources drawn uniformly (with replacement)."""

  k: int
  autapses: bool = True
  multapses: bool = True

  def __post_init__(self):
    _count(self.k, "FixedInDegree: k")
    _no_multapses("FixedInDegree", self.multapses)


@dataclass(frozen=True)
class FixedOutDegree:
  """Each source gets ``k`` targets drawn uniformly (with replacement).

  Every shard regenerates all ``n_pre * k`` draws and keeps the targets it
  holds: O(all synapses of the projection) work per shard.
  """

  k: int
  autapses: bool = True
  multapses: bool = True

  def __post_init__(self):
    _count(self.k, "FixedOutDegree: k")
    _no_multapses("FixedOutDegree", self.multapses)


@dataclass(frozen=True)
class PairwiseBernoulli:
  """Each (source, target) pair is connected with probability ``p``."""

  p: float
  autapses: bool = True

  def __post_init__(self):
    if not 0.0 <= self.p <= 1.0:
      raise ValueError(f"PairwiseBernoulli: p must be in [0, 1], got {self.p!r}.")


@dataclass(frozen=True)
class FixedTotalNumber:
  """``n`` synapses, each with a uniform source and a uniform target
  (multapses and autapses allowed, as NEST's microcircuit uses it)."""

  n: int
  autapses: bool = True
  multapses: bool = True

  def __post_init__(self):
    _count(self.n, "FixedTotalNumber: n")
    _no_multapses("FixedTotalNumber", self.multapses)
    if not self.autapses:
      raise NotImplementedError(
          "FixedTotalNumber(autapses=False) is not supported.")


class Explicit:
  """Given synapses: ``pre[i] -> post[i]`` (indices *within* the pre and
  post populations), optional per-synapse ``weight`` and ``delay`` (ms)
  arrays that override the projection's."""

  def __init__(self, pre: Any, post: Any, weight: Any = None,
               delay: Any = None):
    self.pre = np.asarray(pre)
    self.post = np.asarray(post)
    n = self.pre.shape
    if self.pre.ndim != 1 or self.post.shape != n:
      raise ValueError(
          f"Explicit: pre and post must be 1-D and equal in length, got "
          f"shapes {self.pre.shape} and {self.post.shape}.")
    for name, arr in (("pre", self.pre), ("post", self.post)):
      if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"Explicit: {name} must hold ints, got {arr.dtype}.")
    self.weight = None if weight is None else np.asarray(weight, np.float32)
    self.delay = None if delay is None else np.asarray(delay, np.float64)
    for name, arr in (("weight", self.weight), ("delay", self.delay)):
      if arr is not None and arr.shape != n:
        raise ValueError(f"Explicit: {name} has shape {arr.shape}; pre and "
                         f"post have {n}.")

  def __repr__(self) -> str:
    return f"Explicit(<{self.pre.size} synapses>)"


Rule = Union[FixedInDegree, FixedOutDegree, PairwiseBernoulli,
             FixedTotalNumber, Explicit]
RULES = (FixedInDegree, FixedOutDegree, PairwiseBernoulli, FixedTotalNumber,
         Explicit)


@dataclass(frozen=True)
class Projection:
  """Synapses from population ``pre`` to population ``post``.

  ``pre``/``post``: a Layout population name or a global id range
  ``(start, stop)``. ``weight``: a number or a distribution. ``delay``: in
  ms, a number or a distribution (distributions are redrawn below
  ``0.5 * dt``); converted to ``round(delay / dt) >= 1`` steps.
  ``receptor``: the target's input channel (an int >= 0).
  """

  pre: str | tuple[int, int]
  post: str | tuple[int, int]
  rule: Rule
  weight: Any = 1.0
  delay: Any = 1.0
  receptor: int = 0
  name: str | None = None

  def label(self, index: int) -> str:
    return f"projection {index}" + (f" ({self.name!r})" if self.name else (
        f" ({self.pre!r} -> {self.post!r})"))

  def check(self, index: int) -> None:
    where = self.label(index)
    if not isinstance(self.rule, RULES):
      raise TypeError(f"{where}: rule must be one of "
                      f"{[r.__name__ for r in RULES]}, got {self.rule!r:.60}.")
    check_value(self.weight, f"{where}: weight")
    check_value(self.delay, f"{where}: delay")
    if isinstance(self.receptor, bool) or not isinstance(
        self.receptor, (int, np.integer)) or self.receptor < 0:
      raise ValueError(f"{where}: receptor must be an int >= 0, got "
                       f"{self.receptor!r}.")
