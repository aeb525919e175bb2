"""float64 arithmetic as NEST's C++ does it: each product rounded on its own.

XLA fuses ``a * b + c`` into one fused multiply-add on CPUs that have one
(and on GPUs): a single rounding instead of two. That is more accurate,
but not NEST's arithmetic, and where a model's dynamics amplify the last
bit (``izhikevich``'s upswing, where ``V_m`` grows as ``V_m**2``) the
trajectories part: mV apart at a spike's peak, and a spike one step off
where the threshold is crossed slowly. :func:`rounded` marks a product that
must be rounded before it is added. In float64 it hides the product behind
a select that keeps its value (NaN included), which the compiler cannot
fuse through; in float32 it changes nothing, so float32 runs keep their
fused multiply-adds.

Example:
  >>> import jax, jax.numpy as jnp, numpy as np
  >>> from brainshard._models.neurons.rounding import rounded
  >>> a, b, c = np.random.default_rng(0).normal(size=(3, 1000))
  >>> with jax.enable_x64(True):
  ...   out = jax.jit(lambda a, b, c: rounded(a * b) + c)(a, b, c)
  >>> bool((np.asarray(out) == a * b + c).all())  # NumPy rounds twice
  True
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

__all__ = ["rounded"]


def rounded(x: Any) -> Any:
  """``x``, rounded on its own before any sum it enters (float64 only)."""
  if jnp.result_type(x) != jnp.float64:
    return x
  # Value-preserving for every x, NaN included; XLA does not simplify it
  # away, and an add of a select is not a multiply-add.
  return jnp.where(jnp.isnan(x), jnp.nan, x)
