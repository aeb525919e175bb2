"""The example's figures: the runner's raster / rate / voltage figure and a
plain spike raster (files; a bare name goes into ``results/``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from examples import _cli


def save_figure(result: Any, path: str, title: str = "") -> bool:
  """Saves the runner's raster / rate / voltage figure; False without
  matplotlib."""
  plt = _cli.pyplot("examples.cuba")
  if plt is None:
    return False
  fig = result.plot(title=title)
  fig.savefig(_cli.output_path(path), dpi=120)
  plt.close(fig)
  return True


def save_raster(spikes: Any, dt_ms: float, path: str, title: str = "") -> bool:
  """Saves a spike raster; returns False if matplotlib is missing."""
  plt = _cli.pyplot("examples.cuba")
  if plt is None:
    return False
  steps, neurons = np.nonzero(np.asarray(spikes))
  fig, ax = plt.subplots(figsize=(8, 4))
  ax.plot(steps * dt_ms, neurons, ",k")
  ax.set_xlabel("time (ms)")
  ax.set_ylabel("neuron index")
  ax.set_title(title)
  fig.tight_layout()
  fig.savefig(_cli.output_path(path), dpi=120)
  plt.close(fig)
  return True
