"""Weights and delays as parameter objects, drawn from counter-based keys.

A projection's weight or delay is a :class:`Parameter`: a :class:`Constant`
(a plain number becomes one), a :class:`Normal` or a :class:`Uniform`. A
distribution *redraws* a value outside ``[lower, upper]`` until it lies
inside, as NEST's ``nest.math.redraw`` does in the microcircuit example: the
result is the distribution truncated to the bounds, not clipped (clipping
piles mass at the bound). Draws come from a key per generating unit (a
target, a source, a block of slots), never from a shard's index, so they do
not depend on the mesh. Parameters of one family share compiled code: their
four numbers travel as data (:meth:`Parameter.numbers`).

Example:
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._models.connectivity.counter import unit_keys
  >>> from brainshard._models.connectivity.parameters import Normal, sample
  >>> keys = unit_keys(jax.random.key(0), jnp.arange(10))
  >>> w = sample(Normal(1.0, 0.5, lower=0.0), keys, 100, stream=2)
  >>> w.shape, bool((w >= 0).all()), w.dtype
  ((10, 100), True, dtype('float32'))
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.connectivity import counter

__all__ = ["Parameter", "Constant", "Normal", "Uniform", "parameter",
           "sample", "sample_encoded", "MAX_REDRAWS"]

# A value is redrawn at most this many times; check refuses bounds that
# keep under MIN_ACCEPT of the mass, so a value is still out of bounds after
# MAX_REDRAWS draws with probability below 0.95**2000 ~ 1e-45.
MAX_REDRAWS = 2000
MIN_ACCEPT = 0.05
# A counter normal's |z| stays below 5.5 (its uniforms keep 2**-25 from 0
# and 1); a bound above it only widens a dtype, never changes a value.
Z_MAX = 6.5


def _finite(value: Any, what: str) -> float:
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, (int, float, np.integer, np.floating)):
    raise TypeError(f"{what} must be a number, got {type(value).__name__} "
                    f"({value!r:.60}).")
  if not math.isfinite(float(value)):
    raise ValueError(f"{what} must be finite, got {value}.")
  return float(value)


class Parameter:
  """A weight's or delay's value: every synapse the same, or drawn.

  Subclasses set ``family`` (the registry's key) and implement
  :meth:`numbers` (four floats) and :meth:`draw` (from those numbers)."""

  family: ClassVar[str] = ""
  families: ClassVar[dict[str, type[Parameter]]] = {}
  lower: float = -math.inf
  upper: float = math.inf

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    if cls.family:
      Parameter.families[cls.family] = cls

  def numbers(self) -> tuple[float, float, float, float]:
    """The four numbers compiled code reads (two of the family's, then
    ``lower``, ``upper``)."""
    raise NotImplementedError

  @staticmethod
  def draw(a, b, keys, width: int, stream: int, attempt) -> jax.Array:
    """float32 ``[G, width]``: attempt ``attempt`` of each slot."""
    raise NotImplementedError

  def accept_fraction(self) -> float:
    return 1.0

  def largest(self) -> float:
    """An upper bound of every value drawn (for a delay field's dtype)."""
    raise NotImplementedError

  def with_lower(self, lower: float) -> Parameter:
    """This parameter with its redraw bound raised to at least ``lower``."""
    if self.lower >= lower:
      return self
    return dataclasses.replace(self, lower=lower)

  def check(self, what: str) -> None:
    """Raises a clear error naming ``what`` for a parameter no synapse can
    draw: a non-finite number, bounds out of order or keeping too little."""
    _finite(self.numbers()[0], f"{what}: {type(self).__name__}'s first value")
    if math.isnan(self.lower) or math.isnan(self.upper) or not (
        self.lower <= self.upper):
      raise ValueError(f"{what}: lower {self.lower} > upper {self.upper}.")
    frac = self.accept_fraction()
    if frac < MIN_ACCEPT:
      raise ValueError(
          f"{what}: the bounds [{self.lower}, {self.upper}] keep only "
          f"{frac:.2%} of {self}; redrawing needs at least "
          f"{MIN_ACCEPT:.0%}. Widen the bounds or move the distribution.")


@dataclass(frozen=True)
class Constant(Parameter):
  """Every synapse the same value."""

  family: ClassVar[str] = "const"
  value: float

  def numbers(self):
    return (float(self.value), 0.0, -math.inf, math.inf)

  def largest(self):
    return float(self.value)

  def with_lower(self, lower):
    return self  # a number is checked, never redrawn

  def check(self, what):
    _finite(self.value, what)


@dataclass(frozen=True)
class Normal(Parameter):
  """Normal(mean, std), redrawn until it lies in ``[lower, upper]``."""

  family: ClassVar[str] = "normal"
  mean: float
  std: float
  lower: float = -math.inf
  upper: float = math.inf

  def numbers(self):
    return (self.mean, self.std, self.lower, self.upper)

  @staticmethod
  def draw(a, b, keys, width, stream, attempt):
    return a + b * counter.normal(keys, width, stream, attempt)

  def check(self, what):
    _finite(self.mean, f"{what}: Normal mean")
    if _finite(self.std, f"{what}: Normal std") < 0:
      raise ValueError(f"{what}: Normal std must be >= 0, got {self.std}.")
    super().check(what)

  def accept_fraction(self):
    def cdf(x):
      if self.std == 0:
        return float(x >= self.mean)
      return 0.5 * (1 + math.erf((x - self.mean) / (self.std * math.sqrt(2))))
    return cdf(self.upper) - cdf(self.lower)

  def largest(self):
    return min(self.upper, self.mean + Z_MAX * self.std)


@dataclass(frozen=True)
class Uniform(Parameter):
  """Uniform on ``[low, high)``, redrawn until it lies in ``[lower, upper]``."""

  family: ClassVar[str] = "uniform"
  low: float
  high: float
  lower: float = -math.inf
  upper: float = math.inf

  def numbers(self):
    return (self.low, self.high, self.lower, self.upper)

  @staticmethod
  def draw(a, b, keys, width, stream, attempt):
    return a + (b - a) * counter.uniform(keys, width, stream, attempt)

  def check(self, what):
    low = _finite(self.low, f"{what}: Uniform low")
    if not _finite(self.high, f"{what}: Uniform high") > low:
      raise ValueError(f"{what}: Uniform needs high > low, got {self}.")
    super().check(what)

  def accept_fraction(self):
    lo, hi = max(self.low, self.lower), min(self.high, self.upper)
    return max(0.0, hi - lo) / (self.high - self.low)

  def largest(self):
    return min(self.upper, self.high)


def parameter(value: Any, what: str) -> Parameter:
  """``value`` as a checked :class:`Parameter` (a number, NumPy scalars
  included, becomes a :class:`Constant`); ``what`` names it in errors."""
  if isinstance(value, Parameter):
    value.check(what)
    return value
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, (int, float, np.integer, np.floating)):
    raise TypeError(
        f"{what} must be a number or a distribution (bs.models.Normal, "
        f"bs.models.Uniform), got {type(value).__name__} ({value!r:.60}).")
  return Constant(_finite(value, what))


def sample_encoded(family: str, numbers: jax.Array, keys: jax.Array,
                   width: int, stream: int) -> jax.Array:
  """float32 ``[G, width]`` draws of a ``family`` parameter whose
  :meth:`~Parameter.numbers` are ``numbers`` (float32 ``[4]``, may be
  traced) for the units ``keys`` (uint32 ``[G, 2]``).

  Redrawing is counter-based: attempt ``k`` of a slot hashes ``k`` in, so
  each slot's value depends only on its unit's key and its slot, never on
  the other units drawn with it."""
  shape = (keys.shape[0], width)
  if family == Constant.family:
    return jnp.full(shape, numbers[0], jnp.float32)
  a, b, lo, hi = numbers[0], numbers[1], numbers[2], numbers[3]
  draw = Parameter.families[family].draw

  def cond(carry):
    k, _, bad = carry
    return (k < MAX_REDRAWS) & bad.any()

  def body(carry):
    k, x, bad = carry
    x = jnp.where(bad, draw(a, b, keys, width, stream, k), x)
    return k + 1, x, (x < lo) | (x > hi)

  # The first draw is attempt 0 of the loop (every slot "bad"): the draw's
  # code appears once in the program, not twice (it dominates the compile).
  # (Derived from the keys: under shard_map the carry varies as they do.)
  none = jnp.broadcast_to(keys[:, :1] != keys[:, :1], shape)
  start = (jnp.int32(0), none.astype(jnp.float32), ~none)
  return jax.lax.while_loop(cond, body, start)[1]


def sample(value: Any, keys: jax.Array, width: int, stream: int) -> jax.Array:
  """float32 ``[G, width]`` draws of ``value`` (a number or a
  :class:`Parameter`) for the units ``keys``."""
  value = parameter(value, "value")
  return sample_encoded(value.family, jnp.asarray(value.numbers(),
                                                  jnp.float32),
                        keys, width, stream)
