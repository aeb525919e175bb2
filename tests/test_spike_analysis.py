"""Host-side statistics of spike records: firing rates and CV of ISI per
neuron and per population, against hand-computed values and processes whose
CV is known (regular 0, Poisson 1, gamma of order k 1/sqrt(k)); the raster
and rate figure per population."""

import warnings

import numpy as np
import pytest

import brainshard as bs
from brainshard import models as bm


def events(trains, n, dt=0.1):
  """SpikeData from ``{neuron: steps}``, sorted by step then neuron."""
  steps = np.concatenate([np.asarray(s, np.int64) for s in trains.values()])
  neurons = np.concatenate([np.full(len(s), k, np.int32)
                            for k, s in trains.items()])
  order = np.lexsort((neurons, steps))
  return bs.SpikeData(steps[order], neurons[order], n, dt)


def test_cv_isi_against_a_hand_computed_value():
  spikes = events({0: [0, 2, 6, 12], 1: [5, 9], 3: [1, 3, 5, 7, 9]}, n=4)
  cv = bs.cv_isi(spikes)
  # neuron 0: intervals 2, 4, 6: mean 4, std sqrt(8/3)
  assert cv[0] == pytest.approx(np.sqrt(8 / 3) / 4, rel=1e-12)
  assert np.isnan(cv[1]) and np.isnan(cv[2])   # 2 spikes, no spikes
  assert cv[3] == 0.0                          # regular
  assert bs.mean_cv_isi(spikes) == pytest.approx((cv[0] + 0.0) / 2)
  # With min_spikes=2 the single interval counts, as a CV of 0.
  assert bs.cv_isi(spikes, min_spikes=2)[1] == 0.0
  with pytest.raises(ValueError, match="min_spikes must be >= 2"):
    bs.cv_isi(spikes, min_spikes=1)


def test_cv_isi_matches_the_microcircuits_nest_statistic():
  from examples.microcircuit.analysis import cv_isi as nest_statistic
  rng = np.random.default_rng(3)
  steps = np.sort(rng.integers(0, 5000, 400))
  spikes = bs.SpikeData(steps, rng.integers(0, 60, 400).astype(np.int32),
                        60, 0.1)
  assert bs.mean_cv_isi(spikes) == pytest.approx(
      nest_statistic(spikes.times, spikes.neurons), rel=1e-12)


def renewal(rng, n, rate_hz, seconds, dt, order=1):
  """Spike steps of ``n`` gamma renewal trains of order ``order`` (1:
  Poisson) at ``rate_hz``, on a grid of ``dt`` ms."""
  trains = {}
  mean_steps = 1e3 / rate_hz / dt
  for k in range(n):
    isi = rng.gamma(order, mean_steps / order, int(rate_hz * seconds * 1.5))
    t = np.cumsum(isi)
    trains[k] = np.floor(t[t < seconds * 1e3 / dt]).astype(np.int64)
  return events(trains, n, dt)


@pytest.mark.parametrize("order,expected", [(1, 1.0), (4, 0.5)],
                         ids=["poisson", "gamma4"])
def test_cv_isi_of_renewal_processes(order, expected):
  spikes = renewal(np.random.default_rng(order), 50, 20.0, 50.0, 0.1, order)
  assert bs.mean_cv_isi(spikes) == pytest.approx(expected, abs=0.02)
  rates = bs.firing_rates(spikes, steps=500_000)
  assert rates.mean() == pytest.approx(20.0, rel=0.02)


def test_regular_trains_have_a_cv_of_zero():
  spikes = events({k: np.arange(k, 100_000, 37 + k) for k in range(5)}, n=5)
  assert bs.cv_isi(spikes).tolist() == [0.0] * 5


def test_no_neuron_with_enough_spikes_gives_nan_without_a_warning():
  spikes = events({0: [3], 1: [4, 9]}, n=2)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert np.isnan(bs.mean_cv_isi(spikes))
    none = bs.SpikeData(np.zeros(0, np.int64), np.zeros(0, np.int32), 3, 1.0)
    assert np.isnan(bs.mean_cv_isi(none))


def test_rates_and_cv_per_population_on_a_padded_layout():
  lay = bm.Layout({"E": 5, "I": 2}, n_shards=4)      # 8 ids, 1 padding
  spikes = events({0: [0, 10, 20], 4: [5], 5: [1, 2, 3, 4, 5, 6]}, n=8,
                  dt=1.0)
  rates = bm.population_firing_rates(spikes, lay, steps=2000)   # 2 s
  assert rates == {"E": pytest.approx(4 / 5 / 2), "I": pytest.approx(6 / 2 / 2)}
  cvs = bm.population_cv_isi(spikes, lay)
  assert cvs["E"] == 0.0 and cvs["I"] == 0.0
  assert bm.population_rates(spikes, lay, 2000)["I"].counts.sum() == 6


@pytest.mark.slow
def test_plot_populations_draws_a_raster_and_a_rate_per_population():
  matplotlib = pytest.importorskip("matplotlib")
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  lay = bm.Layout({"E": 30, "I": 10}, n_shards=1)
  spikes = renewal(np.random.default_rng(0), 40, 50.0, 0.5, 0.1)
  fig = bm.plot_populations(spikes, lay, steps=5000, window=(100.0, 300.0),
                            max_neurons=20, title="two populations")
  raster, rate = fig.axes
  assert [t.get_text() for t in raster.get_yticklabels()] == ["E", "I"]
  assert len(raster.collections) == 2 and len(rate.lines) == 2
  shown = np.concatenate([c.get_offsets()[:, 0] for c in raster.collections])
  assert shown.min() >= 100.0 and shown.max() <= 300.0
  plt.close(fig)
