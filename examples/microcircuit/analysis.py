"""Per-population statistics and figures of a microcircuit run: the CV of
the inter-spike intervals (computed as NEST's reference does) and a raster
with one panel per population.

Example:
  >>> import numpy as np
  >>> from examples.microcircuit.analysis import cv_isi
  >>> round(cv_isi(np.array([0., 10, 20, 30, 1, 2, 9]),
  ...              np.array([0, 0, 0, 0, 1, 1, 1])), 3)   # neuron 0: regular
  0.375
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from examples import _cli


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


def population_cv(split: Mapping[str, Any]) -> dict[str, float]:
  """``{population: CV of ISI}`` from ``bm.split_spikes``' records."""
  return {name: cv_isi(np.asarray(d.steps) * d.dt, d.neurons)
          for name, d in split.items()}


def save_raster(split: Mapping[str, Any], path: str, title: str = "",
                window_ms: float = 200.0, max_neurons: int = 400) -> bool:
  """One raster panel per population (the first ``window_ms`` of the
  record, at most ``max_neurons`` neurons each, panels as tall as their
  share of the shown neurons); False without matplotlib."""
  plt = _cli.pyplot("examples.microcircuit")
  if plt is None:
    return False
  shown = {k: min(d.n, max_neurons) for k, d in split.items()}
  fig, axes = plt.subplots(len(split), 1, sharex=True, figsize=(8, 8),
                           gridspec_kw={"height_ratios": list(shown.values())})
  for ax, (name, d), color in zip(axes, split.items(), ["k", "r"] * 8):
    t = np.asarray(d.steps) * d.dt
    sel = (t < window_ms) & (np.asarray(d.neurons) < shown[name])
    ax.plot(t[sel], np.asarray(d.neurons)[sel], ",", color=color)
    ax.set_ylim(0, shown[name])
    ax.set_yticks([])
    ax.set_ylabel(name, rotation=0, ha="right", va="center")
  axes[-1].set_xlabel("time after warm-up (ms)")
  axes[0].set_title(title)
  fig.tight_layout()
  fig.savefig(_cli.output_path(path), dpi=120)
  plt.close(fig)
  return True
