"""Drawing a run's records with matplotlib (an optional extra)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["raster", "rate", "traces", "overview", "pyplot"]


def pyplot() -> Any:
  """matplotlib.pyplot, or an ImportError saying how to install it."""
  try:
    import matplotlib.pyplot as plt
  except ImportError:
    raise ImportError(
        "drawing needs matplotlib: pip install 'brainshard[plot]'") from None
  return plt


def _axes(ax: Any) -> Any:
  if ax is None:
    _, ax = pyplot().subplots(figsize=(8, 3))
  return ax


def raster(data: Any, ax: Any = None, *, s: float = 1.0, color: str = "k",
           **kw) -> Any:
  ax = _axes(ax)
  ax.scatter(data.times, data.neurons, s=s, c=color, marker=".",
             linewidths=0, **kw)
  ax.set_xlabel("time (ms)")
  ax.set_ylabel("neuron")
  ax.set_ylim(-0.5, data.n - 0.5)
  return ax


def rate(data: Any, ax: Any = None, *, bin_ms: float = 1.0, **kw) -> Any:
  ax = _axes(ax)
  per_bin = max(1, int(round(bin_ms / data.dt)))
  whole = len(data.counts) // per_bin * per_bin
  counts = np.asarray(data.counts[:whole]).reshape(-1, per_bin).sum(1)
  hz = counts / (data.n * per_bin * data.dt * 1e-3)
  t = data.times[:whole:per_bin] if whole else np.zeros(0)
  ax.plot(t, hz, **kw)
  ax.set_xlabel("time (ms)")
  ax.set_ylabel("rate (Hz)")
  return ax


def traces(data: Any, ax: Any = None, **kw) -> Any:
  ax = _axes(ax)
  values = np.asarray(data.values)
  ax.plot(data.times, values.reshape(len(values), -1), **kw)
  ax.set_xlabel("time (ms)")
  return ax


def overview(result: Any, title: str | None = None) -> Any:
  kinds = list(dict.fromkeys(result.kinds.values()))
  panels = [k for k in ("spikes", "rate", "trace") if k in kinds]
  if "spikes" in kinds and "rate" not in kinds:
    panels.insert(1, "rate")
  plt = pyplot()
  heights = {"spikes": 3, "rate": 1.2, "trace": 1.5}
  fig, axes = plt.subplots(
      len(panels), 1, sharex=True, squeeze=False,
      figsize=(8, sum(heights[p] for p in panels) + 0.6),
      gridspec_kw={"height_ratios": [heights[p] for p in panels]})
  for p, ax in zip(panels, axes[:, 0]):
    if p == "spikes":
      result.plot_raster(ax=ax)
    elif p == "rate":
      result.plot_rate(ax=ax)
    else:
      result.plot_traces(ax=ax)
      ax.set_ylabel(next(n for n, k in result.kinds.items() if k == "trace"))
  for ax in axes[:-1, 0]:
    ax.set_xlabel("")
  if title:
    axes[0, 0].set_title(title)
  fig.tight_layout()
  return fig
