"""A spike with a surrogate derivative: Heaviside forward, a smooth
pseudo-derivative backward.

``spike(x)`` is ``1.0`` where ``x > 0`` and ``0.0`` elsewhere (``x`` is the
distance to threshold, e.g. ``(v - v_th) / (v_th - v_reset)``); its true
derivative is zero almost everywhere, so gradient training replaces it by a
*surrogate*. The default is SuperSpike's fast sigmoid (Zenke & Ganguli
2018; Neftci, Mostafa & Zenke 2019), ``1 / (1 + beta |x|)**2`` with ``beta
= 10``: cheap (no exp), peaked at threshold and with heavy enough tails that
neurons far from threshold still learn. Any callable ``x -> derivative``
may be passed instead (``surrogate=``); it must be a function of ``x``
alone (it is a static argument of a ``jax.custom_jvp``).

Example:
  >>> import jax, jax.numpy as jnp, numpy as np
  >>> from brainshard._models.surrogate import spike, ArcTan
  >>> x = jnp.array([-0.5, 0.0, 0.2])
  >>> spike(x).tolist()
  [0.0, 0.0, 1.0]
  >>> d = lambda f: np.round(np.float64(jax.grad(lambda x: f(x).sum())(x)), 4)
  >>> d(spike).tolist()                          # SuperSpike, beta = 10
  [0.0278, 1.0, 0.1111]
  >>> d(lambda x: spike(x, ArcTan())).tolist()
  [0.2884, 1.0, 0.717]
  >>> d(lambda x: spike(x, lambda x: jnp.exp(-x * x))).tolist()  # your own
  [0.7788, 1.0, 0.9608]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp

__all__ = ["spike", "FastSigmoid", "ArcTan", "Sigmoid"]


@dataclass(frozen=True)
class FastSigmoid:
  """SuperSpike's surrogate, ``1 / (1 + beta |x|)**2`` (peak 1 at x = 0)."""

  beta: float = 10.0

  def __call__(self, x):
    return 1.0 / (1.0 + self.beta * jnp.abs(x)) ** 2


@dataclass(frozen=True)
class ArcTan:
  """The arctan surrogate (Fang et al. 2021), ``1 / (1 + (pi/2 alpha
  x)**2)``: the derivative of ``arctan(pi/2 alpha x) / pi + 1/2``, scaled to
  peak 1 at x = 0 (``alpha / 2`` times the textbook form, whose peak is
  ``alpha / 2``)."""

  alpha: float = 2.0

  def __call__(self, x):
    return 1.0 / (1.0 + (0.5 * math.pi * self.alpha * x) ** 2)


@dataclass(frozen=True)
class Sigmoid:
  """The derivative of ``sigmoid(beta x)``, scaled to peak 1 at x = 0:
  ``4 s (1 - s)``."""

  beta: float = 5.0

  def __call__(self, x):
    s = jax.nn.sigmoid(self.beta * x)
    return 4.0 * s * (1.0 - s)


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def spike(x: jax.Array, surrogate: Callable = FastSigmoid()) -> jax.Array:
  """``1.0`` where ``x > 0``, else ``0.0`` (``x``'s dtype); backward,
  ``surrogate(x)`` times the incoming tangent."""
  return (x > 0).astype(x.dtype)


@spike.defjvp
def _spike_jvp(surrogate, primals, tangents):
  (x,), (dx,) = primals, tangents
  return spike(x, surrogate), (surrogate(x) * dx).astype(dx.dtype)
