"""The CV of the inter-spike intervals as NEST's reference computes it
(``nest_reference``), kept beside the example so that the library's
``bm.population_cv_isi``, which the example prints, is checked against it
(tests/test_spike_analysis.py).

Example:
  >>> import numpy as np
  >>> from examples.microcircuit.analysis import cv_isi
  >>> round(cv_isi(np.array([0., 10, 20, 30, 1, 2, 9]),
  ...              np.array([0, 0, 0, 0, 1, 1, 1])), 3)   # neuron 0: regular
  0.375
"""

from __future__ import annotations

import numpy as np


def cv_isi(times: np.ndarray, senders: np.ndarray) -> float:
  """Mean over neurons with >= 3 spikes of std / mean of their intervals
  (NaN if no neuron has 3 spikes); the statistic of ``nest_reference``."""
  times, senders = np.asarray(times, float), np.asarray(senders)
  order = np.lexsort((times, senders))
  t, s = times[order], senders[order]
  cvs = []
  for ids in np.split(np.arange(len(s)), np.flatnonzero(np.diff(s)) + 1):
    if len(ids) >= 3:
      isi = np.diff(t[ids])
      cvs.append(isi.std() / isi.mean())
  return float(np.mean(cvs)) if cvs else float("nan")
