"""Parameters of the Potjans & Diesmann (2014) microcircuit, and their scaling.

The numbers are the published model's, in the form NEST 3's PyNEST example
uses: eight populations (L2/3, L4, L5, L6; excitatory and inhibitory),
``iaf_psc_exp`` neurons, fixed-total-number connectivity from the
connection probabilities, normal weights redrawn until they have their sign,
normal delays redrawn below half a step, Poisson background. ``scaled``
derives what a run at ``n_scale`` (neurons) and ``k_scale`` (in-degrees)
needs, with the published compensation: weights divided by
``sqrt(k_scale)`` and a DC input that restores each population's mean input.

Example:
  >>> from examples.microcircuit.params import scaled
  >>> net = scaled(n_scale=0.1, k_scale=0.1)
  >>> [int(x) for x in net.neurons]
  [2068, 583, 2192, 548, 485, 106, 1440, 295]
  >>> int(net.synapses.sum())
  2988807
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POPULATIONS = ("L23E", "L23I", "L4E", "L4I", "L5E", "L5I", "L6E", "L6I")
FULL_NEURONS = np.array([20683, 5834, 21915, 5479, 4850, 1065, 14395, 2948])
# Rates of the full-scale network (spikes/s) that NEST's example publishes;
# the DC compensation of a down-scaled in-degree is computed from them.
FULL_RATES = np.array([0.943, 3.026, 4.368, 5.882, 7.733, 8.664, 1.096, 7.851])
# Connection probabilities, [target, source].
CONN_PROBS = np.array([
    [0.1009, 0.1689, 0.0437, 0.0818, 0.0323, 0.0, 0.0076, 0.0],
    [0.1346, 0.1371, 0.0316, 0.0515, 0.0755, 0.0, 0.0042, 0.0],
    [0.0077, 0.0059, 0.0497, 0.135, 0.0067, 0.0003, 0.0453, 0.0],
    [0.0691, 0.0029, 0.0794, 0.1597, 0.0033, 0.0, 0.1057, 0.0],
    [0.1004, 0.0622, 0.0505, 0.0057, 0.0831, 0.3726, 0.0204, 0.0],
    [0.0548, 0.0269, 0.0257, 0.0022, 0.06, 0.3158, 0.0086, 0.0],
    [0.0156, 0.0066, 0.0211, 0.0166, 0.0572, 0.0197, 0.0396, 0.2252],
    [0.0364, 0.001, 0.0034, 0.0005, 0.0277, 0.008, 0.0658, 0.1443]])
K_EXT = np.array([1600, 1500, 2100, 1900, 2000, 1900, 2900, 2100])
BG_RATE = 8.0            # Hz per external input
PSP_EXC = 0.15           # mV, mean excitatory PSP amplitude
WEIGHT_REL_STD = 0.1
G = -4.0                 # inhibitory / excitatory weight
DELAY_EXC, DELAY_INH, DELAY_REL_STD = 1.5, 0.75, 0.5   # ms
DELAY_POISSON = 1.5      # ms
# 'optimized' initial membrane potentials: per-population mean and std (mV).
V0_MEAN = np.array([-68.28, -63.16, -63.33, -63.45, -63.11, -61.66, -66.72, -61.43])
V0_STD = np.array([5.36, 4.57, 4.74, 4.94, 4.94, 4.55, 5.46, 4.48])
NEURON = dict(E_L=-65.0, V_th=-50.0, V_reset=-65.0, C_m=250.0, tau_m=10.0,
              tau_syn=0.5, t_ref=2.0)


def psc_over_psp(C_m: float, tau_m: float, tau_syn: float) -> float:
  """pA of current amplitude per mV of PSP peak, for an exponential PSC."""
  sub = 1.0 / (tau_syn - tau_m)
  pre = tau_m * tau_syn / C_m * sub
  frac = (tau_m / tau_syn) ** sub
  return 1.0 / (pre * (frac ** tau_m - frac ** tau_syn))


def full_synapses() -> np.ndarray:
  """[target, source] synapse counts of the full network: the number of
  draws with replacement that gives each pair probability ``CONN_PROBS``."""
  prod = np.outer(FULL_NEURONS, FULL_NEURONS).astype(np.float64)
  return np.log(1.0 - CONN_PROBS) / np.log((prod - 1.0) / prod)


@dataclass(frozen=True)
class Scaled:
  """What one run needs: sizes, synapse counts, weights (pA), delays (ms),
  external input and DC (pA), per population (``[target, source]`` for
  matrices)."""

  neurons: np.ndarray
  synapses: np.ndarray
  weight_mean: np.ndarray
  weight_ext: float
  delay_mean: np.ndarray
  k_ext: np.ndarray
  dc: np.ndarray


def scaled(n_scale: float = 0.1, k_scale: float = 0.1) -> Scaled:
  """The network at ``n_scale`` of the neurons and ``k_scale`` of the
  in-degrees, with NEST's compensation for ``k_scale < 1``."""
  if not (0 < n_scale <= 1 and 0 < k_scale <= 1):
    raise ValueError(f"n_scale and k_scale must be in (0, 1], got {n_scale}, {k_scale}.")
  full = full_synapses()
  ratio = psc_over_psp(NEURON["C_m"], NEURON["tau_m"], NEURON["tau_syn"])
  psp = np.where(np.arange(8)[None, :] % 2 == 0, PSP_EXC, PSP_EXC * G) * np.ones((8, 1))
  psp[0, 2] = 2.0 * PSP_EXC   # L4E -> L2/3E is doubled
  w, w_ext = psp * ratio, PSP_EXC * ratio
  dc = np.zeros(8)
  if k_scale != 1:
    # Preserve each population's mean input: what the removed synapses
    # delivered at the full network's rates comes back as a DC current.
    indegree = full / FULL_NEURONS[:, None]
    lost = 0.001 * NEURON["tau_syn"] * (1.0 - np.sqrt(k_scale))
    dc = lost * ((w * indegree * FULL_RATES).sum(1) + w_ext * K_EXT * BG_RATE)
    w, w_ext = w / np.sqrt(k_scale), w_ext / np.sqrt(k_scale)
  delay = np.where(np.arange(8)[None, :] % 2 == 0, DELAY_EXC, DELAY_INH) * np.ones((8, 1))
  return Scaled(
      neurons=np.round(FULL_NEURONS * n_scale).astype(int),
      synapses=np.round(full * n_scale * k_scale).astype(int),
      weight_mean=w, weight_ext=float(w_ext), delay_mean=delay,
      k_ext=np.round(K_EXT * k_scale).astype(int), dc=dc)
