"""The network's numbers: its parameters (Brette et al. (2007), Benchmarks
1 (COBA) and 2 (CUBA)), one step of its neurons (pure JAX, no States), and
its mean firing rate."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# (low, high) mean rate in Hz accepted for a 1 s run; see the package
# docstring (examples/cuba/__init__.py) for the references.
RATE_RANGE = {"cuba": (3.0, 10.0), "coba": (10.0, 35.0)}


@dataclass(frozen=True)
class Params:
  model: str = "cuba"
  n: int = 4000
  n_exc: int = field(default=None)  # 0.8 n
  k: int = 80            # presynaptic partners per neuron (in-degree)
  delay: int = 1         # synaptic delay in steps (>= 1)
  dt: float = 0.1        # ms
  taum: float = 20.0     # ms
  taue: float = 5.0      # ms
  taui: float = 10.0     # ms
  v_th: float = -50.0    # mV
  v_reset: float = -60.0  # mV
  t_ref: float = 5.0     # ms
  el: float = field(default=None)  # mV; -49 (CUBA) or -60 (COBA)
  we: float = field(default=None)
  wi: float = field(default=None)
  e_exc: float = 0.0     # mV, COBA only
  e_inh: float = -80.0   # mV, COBA only
  drive: float = 20.0    # mV, COBA only: constant input I

  def __post_init__(self):
    if self.model not in ("cuba", "coba"):
      raise ValueError(f"model must be 'cuba' or 'coba', got {self.model!r}")
    cuba = self.model == "cuba"
    if self.k < 5 or self.delay < 1:
      raise ValueError(f"need k >= 5 and delay >= 1, got {self.k}, {self.delay}")
    # Weights scale with 80 / k: the mean input stays that of the original
    # 4000-neuron network (in-degree 80 = 2% of 4000) at any size and k.
    scale = 80 / self.k
    defaults = dict(el=-49.0 if cuba else -60.0,
                    we=(60 * 0.27 / 10 if cuba else 0.6) * scale,
                    wi=(-20 * 4.5 / 10 if cuba else 6.7) * scale,
                    n_exc=int(round(0.8 * self.n)))
    for k, v in defaults.items():
      if getattr(self, k) is None:
        object.__setattr__(self, k, v)

  @property
  def ref_steps(self) -> int:
    return int(round(self.t_ref / self.dt))


def neuron_update(p: Params, v, ge, gi, ref, in_exc, in_inh):
  """One step of the neurons (pure JAX): the inputs that arrive now are
  added to ge/gi, the subthreshold system is integrated, and v is held
  while refractory. Brian2's convention: a neuron that spikes at step t is
  held for ``ref_steps - 1`` steps and may spike again at ``t + ref_steps``
  (a 5.0 ms minimum gap for t_ref = 5 ms, dt = 0.1 ms)."""
  import jax.numpy as jnp
  ge = ge + p.we * in_exc.astype(ge.dtype)
  gi = gi + p.wi * in_inh.astype(gi.dtype)
  decay_m = math.exp(-p.dt / p.taum)
  decay_e = math.exp(-p.dt / p.taue)
  decay_i = math.exp(-p.dt / p.taui)
  if p.model == "cuba":
    # Exact solution of the linear subthreshold system over one step.
    be = p.taue / (p.taue - p.taum) * (decay_e - decay_m)
    bi = p.taui / (p.taui - p.taum) * (decay_i - decay_m)
    v_new = p.el + (v - p.el) * decay_m + ge * be + gi * bi
  else:
    # Exponential Euler with the conductances held over the step.
    g_tot = 1.0 + ge + gi
    v_inf = (p.el + p.drive + ge * p.e_exc + gi * p.e_inh) / g_tot
    v_new = v_inf + (v - v_inf) * jnp.exp(-p.dt / p.taum * g_tot)
  resting = ref > 0
  v_new = jnp.where(resting, v, v_new)
  spikes = (v_new > p.v_th) & ~resting
  v_new = jnp.where(spikes, p.v_reset, v_new)
  ref = jnp.where(spikes, p.ref_steps - 1, jnp.maximum(ref - 1, 0))
  return v_new, ge * decay_e, gi * decay_i, ref, spikes




def mean_rate(spikes: Any, dt_ms: float) -> float:
  """Mean firing rate in Hz of a ``[steps, n]`` spike array."""
  spikes = np.asarray(spikes)
  return float(spikes.sum()) / (spikes.shape[1] * spikes.shape[0] * dt_ms * 1e-3)


def valid_device_counts(n: int = 4000, most: int = 64) -> list[int]:
  """Device counts the network splits over evenly (up to ``most``)."""
  return [d for d in range(1, most + 1) if n % d == 0]
