"""Weight and delay distributions, drawn from counter-based keys.

A projection's weight or delay is a number (every synapse the same) or a
distribution. ``Normal(mean, std, lower=..., upper=...)`` *redraws* a value
outside ``[lower, upper]`` until it lies inside, as NEST's
``nest.math.redraw`` does in the microcircuit example: the result is the
normal truncated to the bounds, not clipped (clipping piles mass at the
bound). Draws come from a key per generating unit (a target, a source, a
block of slots), never from a shard's index, so they do not depend on the
mesh.

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

import math
from dataclasses import dataclass
from typing import Any, Union

import jax
import jax.numpy as jnp

from brainshard._models.connectivity import counter

__all__ = ["Normal", "Uniform", "Distribution", "sample", "check_value",
           "with_lower", "encode", "sample_encoded", "MAX_REDRAWS"]

# A value is redrawn at most this many times; check_value refuses bounds that
# keep under MIN_ACCEPT of the mass, so a value is still out of bounds after
# MAX_REDRAWS draws with probability below 0.95**2000 ~ 1e-45.
MAX_REDRAWS = 2000
MIN_ACCEPT = 0.05


@dataclass(frozen=True)
class Normal:
  """Normal(mean, std), redrawn until it lies in ``[lower, upper]``."""

  mean: float
  std: float
  lower: float = -math.inf
  upper: float = math.inf

  def accept_fraction(self) -> float:
    def cdf(x):
      if self.std == 0:
        return float(x >= self.mean)
      return 0.5 * (1 + math.erf((x - self.mean) / (self.std * math.sqrt(2))))
    return cdf(self.upper) - cdf(self.lower)


@dataclass(frozen=True)
class Uniform:
  """Uniform on ``[low, high)``, redrawn until it lies in ``[lower, upper]``."""

  low: float
  high: float
  lower: float = -math.inf
  upper: float = math.inf

  def accept_fraction(self) -> float:
    lo, hi = max(self.low, self.lower), min(self.high, self.upper)
    return max(0.0, hi - lo) / (self.high - self.low)


Distribution = Union[Normal, Uniform]


def check_value(value: Any, what: str) -> None:
  """Raises a clear error for a weight/delay that is neither a number nor a
  usable distribution; ``what`` names it (projection and field)."""
  if isinstance(value, (Normal, Uniform)):
    if isinstance(value, Normal) and not value.std >= 0:
      raise ValueError(f"{what}: Normal std must be >= 0, got {value.std}.")
    if isinstance(value, Uniform) and not value.high > value.low:
      raise ValueError(f"{what}: Uniform needs high > low, got {value}.")
    if not value.lower <= value.upper:
      raise ValueError(f"{what}: lower {value.lower} > upper {value.upper}.")
    frac = value.accept_fraction()
    if frac < MIN_ACCEPT:
      raise ValueError(
          f"{what}: the bounds [{value.lower}, {value.upper}] keep only "
          f"{frac:.2%} of {value}; redrawing needs at least "
          f"{MIN_ACCEPT:.0%}. Widen the bounds or move the distribution.")
    return
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise TypeError(
        f"{what} must be a number or a distribution (bs.models.Normal, "
        f"bs.models.Uniform), got {type(value).__name__} ({value!r:.60}).")
  if not math.isfinite(value):
    raise ValueError(f"{what} must be finite, got {value}.")


def with_lower(value: Any, lower: float) -> Any:
  """``value`` with its redraw bound raised to at least ``lower``."""
  if isinstance(value, (Normal, Uniform)) and value.lower < lower:
    return type(value)(**{**value.__dict__, "lower": lower})
  return value


def encode(value: Any) -> tuple[str, tuple[float, float, float, float]]:
  """``(family, params)``: values of one family share compiled code, their
  four parameters travel as data."""
  if isinstance(value, Normal):
    return "normal", (value.mean, value.std, value.lower, value.upper)
  if isinstance(value, Uniform):
    return "uniform", (value.low, value.high, value.lower, value.upper)
  return "const", (float(value), 0.0, -math.inf, math.inf)


def sample_encoded(family: str, params: jax.Array, keys: jax.Array,
                   width: int, stream: int) -> jax.Array:
  """:func:`sample` of the value ``encode`` gave ``(family, params)``;
  ``params`` (float32 ``[4]``) may be traced."""
  shape = (keys.shape[0], width)
  if family == "const":
    return jnp.full(shape, params[0], jnp.float32)
  a, b, lo, hi = params[0], params[1], params[2], params[3]

  def draw(attempt):
    if family == "normal":
      return a + b * counter.normal(keys, width, stream, attempt)
    return a + (b - a) * counter.uniform(keys, width, stream, attempt)

  def bad(x):
    return (x < lo) | (x > hi)

  def cond(carry):
    k, x = carry
    return (k < MAX_REDRAWS) & bad(x).any()

  def body(carry):
    k, x = carry
    return k + 1, jnp.where(bad(x), draw(k), x)

  return jax.lax.while_loop(cond, body, (jnp.int32(1), draw(0)))[1]


def sample(value: Any, keys: jax.Array, width: int, stream: int) -> jax.Array:
  """float32 ``[G, width]`` draws of ``value`` (a number or a distribution)
  for the units ``keys`` (uint32 ``[G, 2]``, see ``counter.unit_keys``).

  Redrawing is counter-based: attempt ``a`` of a slot hashes ``a`` in, so
  each slot's value depends only on its unit's key and its slot, never on
  the other units drawn with it.
  """
  family, params = encode(value)
  return sample_encoded(family, jnp.asarray(params, jnp.float32), keys,
                        width, stream)
