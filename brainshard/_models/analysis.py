"""Per-population statistics and pictures of a run's spikes: each
population's firing rate and CV of ISI (``bs.firing_rates``, ``bs.cv_isi``
on its neurons), and one figure with a raster and a rate per population
(matplotlib, optional). They read a ``SpikeData`` over a
:class:`~brainshard.models.Layout`'s axis, from memory or from disk alike.

Example:
  >>> import numpy as np, brainshard as bs
  >>> from brainshard import models as bm
  >>> lay = bm.Layout({'E': 4, 'I': 2}, n_shards=1)
  >>> spikes = bs.SpikeData(steps=np.array([0, 5, 100, 200, 300]),
  ...                       neurons=np.array([0, 5, 0, 0, 0]), n=6, dt=1.0)
  >>> bm.population_firing_rates(spikes, lay, steps=1000)   # Hz, over 1 s
  {'E': 1.0, 'I': 0.5}
  >>> bm.population_cv_isi(spikes, lay)                      # E: regular
  {'E': 0.0, 'I': nan}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from brainshard._models.layout import Layout
from brainshard._models.population import population_rates, split_spikes
from brainshard._simulation.monitors import plots
from brainshard._simulation.monitors.analysis import firing_rates, mean_cv_isi

__all__ = ["population_firing_rates", "population_cv_isi", "plot_populations"]


def population_firing_rates(spikes: Any, layout: Layout,
                            steps: int) -> dict[str, float]:
  """``{population: Hz}``: the mean firing rate of each population's
  neurons over a record of ``steps`` steps (``result.steps``)."""
  return {name: float(firing_rates(data, steps).mean())
          for name, data in split_spikes(spikes, layout).items()}


def population_cv_isi(spikes: Any, layout: Layout,
                      min_spikes: int = 3) -> dict[str, float]:
  """``{population: mean CV of ISI}`` over each population's neurons with
  at least ``min_spikes`` spikes (NaN where none has; see ``bs.cv_isi``)."""
  return {name: mean_cv_isi(data, min_spikes)
          for name, data in split_spikes(spikes, layout).items()}


def plot_populations(spikes: Any, layout: Layout, steps: int, start: int = 0,
                     *, bin_ms: float = 5.0,
                     window: tuple[float, float] | None = None,
                     max_neurons: int = 200, title: str | None = None) -> Any:
  """One figure: a raster of each population (its first ``max_neurons``
  neurons, stacked top to bottom in the layout's order) over its rate in
  bins of ``bin_ms``, one colour per population, for the ``steps`` steps
  from ``start`` (``result.steps``, ``result.start``); ``window=(t0, t1)``
  (ms) limits what is drawn. Needs matplotlib; returns the figure.

  Example:
    >>> import matplotlib; matplotlib.use('Agg')
    >>> import numpy as np, brainshard as bs
    >>> from brainshard import models as bm
    >>> lay = bm.Layout({'E': 40, 'I': 10}, n_shards=1)
    >>> rng = np.random.default_rng(0)
    >>> steps = np.sort(rng.integers(0, 1000, 300))
    >>> spikes = bs.SpikeData(steps, rng.integers(0, 50, 300), n=50, dt=0.1)
    >>> fig = bm.plot_populations(spikes, lay, steps=1000, bin_ms=10.0)
    >>> [ax.get_ylabel() for ax in fig.axes]
    ['population', 'rate (Hz)']
  """
  plt = plots.pyplot()
  split = split_spikes(spikes, layout)
  rates = population_rates(spikes, layout, steps, start)
  fig, (top, bottom) = plt.subplots(
      2, 1, sharex=True, figsize=(8, 6), gridspec_kw={"height_ratios": [3, 1]})
  t0, t1 = window if window is not None else (-np.inf, np.inf)
  base, ticks = 0, []
  for k, name in enumerate(layout.names):
    data, color = split[name], f"C{k % 10}"
    shown = min(data.n, max_neurons)
    t, ids = np.asarray(data.times), np.asarray(data.neurons)
    sel = (ids < shown) & (t >= t0) & (t <= t1)
    top.scatter(t[sel], base + ids[sel], s=1.0, c=color, marker=".",
                linewidths=0)
    ticks.append(base + shown / 2)
    base += shown
    rate = rates[name]
    keep = (rate.times >= t0) & (rate.times <= t1)
    plots.rate(rate._replace(steps=rate.steps[keep],
                             counts=rate.counts[keep]),
               bottom, bin_ms=bin_ms, color=color, label=name)
  top.set_yticks(ticks, list(layout.names))
  top.set_ylim(base - 0.5, -0.5)   # inverted: the first population on top
  top.set_ylabel("population")
  top.set_xlabel("")
  if len(layout.names) > 1:
    bottom.legend(loc="upper right", fontsize="small",
                  ncol=min(len(layout.names), 4))
  if title:
    top.set_title(title)
  fig.tight_layout()
  return fig
