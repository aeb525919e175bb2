"""NEST's ``poisson_generator``: an independent Poisson train per target.

As NEST's: in every step ``t`` with ``origin + start < t <= origin +
stop`` (in steps) each target gets its own count, Poisson with mean
``lam = dt * rate * 1e-3`` (``rate`` in Hz, ``dt`` in ms), sent as one
event of that multiplicity; over a delay of ``d`` steps it lands in the
target's ``inputs[t + d]``, times the connection's weight.

The counts are exact: ``bs.random.poisson`` at a rate known on the host
inverts one 31-bit uniform per target against a table built once
(``_simulation/random/small.py``; each probability within ``2**-31``), and
below ``lam = 1e-3`` (10 Hz at ``dt = 0.1``) or above a table's reach runs
its exact loop. The table is in :meth:`PoissonGenerator.constants`, so the
draw is the same whether the constants are closed over or traced. Step
``t`` draws from the connection's key folded with ``t``: counts are a pure
function of ``(key, t)``, and a shard draws its block of the unsharded
draw (``base.py``), the same on any mesh.

Example:
  >>> import jax
  >>> from brainshard._models.devices.poisson import PoissonGenerator
  >>> pg = PoissonGenerator(rate=5000.0, stop=100.0)   # lam = 0.5 at 0.1 ms
  >>> c = pg.constants(0.1)
  >>> key = jax.random.key(1)
  >>> counts = jax.vmap(lambda t: pg.emit(c, t, 1000, key))(
  ...     jax.numpy.arange(1, 201))
  >>> counts.dtype, round(float(counts.mean()), 2)
  (dtype('int32'), 0.5)
  >>> int(pg.emit(c, 0, 1000, key).sum())   # step 0 is not after start
  0
  >>> int(pg.emit(c, 1001, 1000, key).sum())   # stopped: t_max = 1000
  0
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.devices.base import (
    WINDOW, Device, active, base_key, slots)
from brainshard._simulation.random.draw import from_table, poisson
from brainshard._simulation.random.small import poisson_plan

__all__ = ["PoissonGenerator"]


class PoissonGenerator(Device):
  """NEST's ``poisson_generator``: ``rate`` (Hz), per-target trains (see
  the module doc)."""

  nest_name = "poisson_generator"
  defaults = {**WINDOW, "rate": 0.0}
  emits = "spikes"
  random = True

  def validate(self, p):
    if p["rate"] < 0:
      raise ValueError(f"{self.nest_name}: rate cannot be negative (got "
                       f"{p['rate']} Hz).")

  def constants(self, dt):
    # NEST's order: resolution (ms) * rate (Hz) * 1e-3
    lam = np.float64(dt * self.params["rate"] * 1e-3)
    table = poisson_plan(lam)
    draw = {"lam": lam} if table is None else {"table": table}
    return {**self.window(dt), **draw}

  def emit(self, c, t, targets, key=None, *, dtype=jnp.float32, spec=None):
    n, hit = slots(targets)
    if self.params["rate"] == 0:  # NEST sends nothing
      return jnp.zeros((n,), jnp.int32)
    t = jnp.asarray(t, jnp.int32)
    k = jax.random.fold_in(base_key(key, self.nest_name), t)
    if "table" in c:
      counts = from_table(c["table"], size=n, key=k, spec=spec)
    else:
      counts = poisson(c["lam"], size=n, key=k, spec=spec)
    return jnp.where(active(c, t) & hit, counts, 0).astype(jnp.int32)
