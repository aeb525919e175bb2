"""Statistics of a run's spike records, on the host with NumPy: firing rates
and the coefficient of variation of the inter-spike intervals (CV of ISI).

They take a :class:`~brainshard.SpikeData` (``result.spikes``, read from
memory or from disk alike) and work per neuron; ``bs.models`` applies them
per population.

The CV of ISI, as NEST's microcircuit reference computes it
(``examples/microcircuit``): for each neuron with at least ``min_spikes``
spikes in the record (default 3, i.e. at least two intervals), the standard
deviation of its intervals (``ddof=0``) over their mean; NaN for the others.
A single interval has a standard deviation of 0, so counting neurons with 2
spikes (``min_spikes=2``) pulls the mean towards 0. The population's CV is
the mean over the neurons that have one. Regular firing gives 0, a Poisson
process 1.

Example:
  >>> import numpy as np, brainshard as bs
  >>> spikes = bs.SpikeData(steps=np.array([0, 3, 10, 20, 30, 40]),
  ...                       neurons=np.array([1, 0, 1, 1, 1, 0]), n=3, dt=0.1)
  >>> bs.firing_rates(spikes, steps=100).tolist()   # Hz: 10 ms recorded
  [200.0, 400.0, 0.0]
  >>> bs.cv_isi(spikes).round(3).tolist()            # intervals 10, 10, 10
  [nan, 0.0, nan]
  >>> spikes = bs.SpikeData(np.array([0, 3, 10, 30, 70, 80]),
  ...                       spikes.neurons, n=3, dt=0.1)
  >>> round(bs.mean_cv_isi(spikes), 4)               # intervals 10, 20, 40
  0.5345
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["firing_rates", "cv_isi", "mean_cv_isi"]


def firing_rates(spikes: Any, steps: int) -> np.ndarray:
  """float64 ``[n]``: each neuron's spikes per second over a record of
  ``steps`` steps (``result.steps``), for ``dt`` in ms."""
  if steps <= 0:
    raise ValueError(f"firing_rates: steps must be positive, got {steps}")
  counts = np.bincount(np.asarray(spikes.neurons, np.int64),
                       minlength=spikes.n)
  return counts / (steps * spikes.dt * 1e-3)


def cv_isi(spikes: Any, min_spikes: int = 3) -> np.ndarray:
  """float64 ``[n]``: each neuron's CV of ISI (std / mean of its intervals);
  NaN for neurons with fewer than ``min_spikes`` spikes (see the module)."""
  if min_spikes < 2:
    raise ValueError(f"cv_isi: min_spikes must be >= 2 (one interval), "
                     f"got {min_spikes}")
  steps = np.asarray(spikes.steps, np.int64)
  neurons = np.asarray(spikes.neurons, np.int64)
  order = np.lexsort((steps, neurons))
  steps, neurons = steps[order], neurons[order]
  same = neurons[1:] == neurons[:-1]     # an interval: two spikes of one neuron
  who, isi = neurons[1:][same], np.diff(steps)[same].astype(np.float64)
  count = np.bincount(who, minlength=spikes.n)
  mean = np.bincount(who, isi, minlength=spikes.n) / np.maximum(count, 1)
  # Two passes (mean, then squared deviations): exact for regular trains,
  # where E[x^2] - E[x]^2 would leave rounding noise.
  var = np.bincount(who, (isi - mean[who]) ** 2,
                    minlength=spikes.n) / np.maximum(count, 1)
  with np.errstate(divide="ignore", invalid="ignore"):
    cv = np.sqrt(var) / mean
  return np.where(count >= min_spikes - 1, cv, np.nan)


def mean_cv_isi(spikes: Any, min_spikes: int = 3) -> float:
  """The mean CV of ISI over the neurons with at least ``min_spikes``
  spikes; NaN (without a warning) when there are none."""
  cv = cv_isi(spikes, min_spikes)
  cv = cv[~np.isnan(cv)]
  return float(cv.mean()) if cv.size else float("nan")
