"""The CUBA/COBA example network: the same spikes on 1 and on 8 devices, and
a mean rate in the published range."""

import jax
import numpy as np
import pytest

from examples import cuba
from brainshard import models as bm


def _mesh(n):
  return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


@pytest.mark.slow
def test_stored_index_holds_the_fixed_in_degree_table_on_any_mesh():
  """Every neuron has exactly k partners (0.8 k excitatory), and each
  shard's push index lists exactly the hash table's synapses."""
  n, k = 64, 10
  table = np.asarray(bm.hashed_presynaptic(jax.numpy.arange(n), k, n=n,
                                          n_exc=51, k=k, seed=1))
  assert (table[:, :8] < 51).all() and (table[:, 8:] >= 51).all()
  for shards in (1, 4):
    net = cuba.EINetwork(_mesh(shards), "cuba", seed=1, n=n, k=k)
    indptr = np.asarray(net.indptr.value).reshape(shards, n + 1)
    indices = np.asarray(net.indices.value).reshape(shards, -1)
    n_local = n // shards
    rebuilt = np.zeros((n, n), int)  # [post, pre] synapse counts
    for s in range(shards):
      for j in range(n):
        for post in indices[s, indptr[s, j]:indptr[s, j + 1]]:
          rebuilt[s * n_local + post, j] += 1
    expect = np.zeros((n, n), int)
    np.add.at(expect, (np.repeat(np.arange(n), k), table.ravel()), 1)
    np.testing.assert_array_equal(rebuilt, expect)


@pytest.mark.slow
def test_refractory_gap_is_brian2s_five_ms():
  """Brian2's convention: after the spike step v is held ref_steps - 1
  steps, so the shortest inter-spike gap is exactly t_ref = 5.0 ms."""
  net = cuba.EINetwork(_mesh(1), "cuba", seed=0, n=400, k=80)
  net.v.value = net.v.value * 0 + 100.0  # far above threshold
  net.ge.value = net.ge.value * 0 + 1e6  # keeps v above threshold
  spikes = net.run(20.0)
  assert (spikes.sum(0) == 4).all()  # at steps 0, 50, 100, 150
  steps = np.nonzero(spikes[:, 0])[0]
  np.testing.assert_array_equal(np.diff(steps), [50, 50, 50])
  assert net.params.ref_steps * net.params.dt == pytest.approx(5.0)


@pytest.mark.slow
def test_onthefly_and_delay_exchange_spike_like_stored_every_step():
  """Connectivity regenerated every step gives the stored network's spikes;
  with delay D, exchanging every D steps on 8 devices gives the spikes of
  exchanging every step on 1 device."""
  stored = cuba.EINetwork(_mesh(1), "cuba", seed=2, n=800).run(40.0)
  fly = cuba.EINetwork(_mesh(8), "cuba", seed=2, n=800,
                       connectivity="onthefly").run(40.0)
  assert stored.sum() > 20
  np.testing.assert_array_equal(fly, stored)
  step = cuba.EINetwork(_mesh(1), "cuba", seed=2, n=800, delay=4).run(40.0)
  block = cuba.EINetwork(_mesh(8), "cuba", seed=2, n=800, delay=4,
                         exchange="delay").run(40.0)
  assert step.sum() > 20 and not np.array_equal(step, stored)
  np.testing.assert_array_equal(block, step)


@pytest.mark.slow
def test_rate_stays_in_range_at_forty_thousand_neurons():
  net = cuba.EINetwork(_mesh(1), "cuba", seed=0, n=40_000)
  rate = cuba.mean_rate(net.run(500.0), net.params.dt)
  low, high = cuba.RATE_RANGE["cuba"]
  assert low <= rate <= high, rate


@pytest.fixture(scope="module")
def cuba_one_second():
  """1 s of CUBA on one device (seed 0): the network and its spikes."""
  net = cuba.EINetwork(_mesh(1), "cuba", seed=0)
  return net, np.asarray(net.run(1000.0))


@pytest.mark.slow
def test_cuba_mean_rate_in_published_range(cuba_one_second):
  net, spikes = cuba_one_second
  rate = cuba.mean_rate(spikes, net.params.dt)
  low, high = cuba.RATE_RANGE["cuba"]
  assert low <= rate <= high, rate


@pytest.mark.slow
def test_cuba_on_eight_devices_spikes_exactly_like_one(cuba_one_second):
  _, one = cuba_one_second
  net = cuba.EINetwork(_mesh(8), "cuba", seed=0)
  eight = np.asarray(net.run(100.0))  # 1000 steps
  assert net.v.value.sharding.spec == jax.sharding.PartitionSpec("x")
  assert eight.sum() > 500  # the network is active
  np.testing.assert_array_equal(eight, one[:1000])
  net.reset()  # a rerun from the seed's initial conditions repeats itself
  np.testing.assert_array_equal(np.asarray(net.run(100.0)), eight)


@pytest.mark.slow
def test_coba_on_four_devices_spikes_exactly_like_one():
  runs = [np.asarray(cuba.EINetwork(_mesh(n), "coba", seed=3).run(50.0))
          for n in (1, 4)]
  assert runs[0].sum() > 500
  np.testing.assert_array_equal(runs[1], runs[0])


@pytest.mark.slow
def test_cli_runs_and_saves_a_raster(tmp_path, capsys):
  pytest.importorskip("matplotlib")
  out = tmp_path / "raster.png"
  result = cuba.main(["--devices", "2", "--duration", "0.05",
                      "--plot", str(out), "--progress"])
  assert out.stat().st_size > 1000
  assert result["devices"] == 2 and result["rate_hz"] > 0
  assert "mean firing rate" in capsys.readouterr().out


@pytest.mark.slow
def test_runner_records_the_same_spikes_as_one_loop(cuba_one_second):
  """The runner's sparse events are the non-zeros of the dense raster."""
  net, one = cuba_one_second
  net.reset()
  runner = net.runner(chunk=500, progress=False)
  res = runner.run(duration=100.0)  # 1000 steps: 2 chunks
  steps, neurons = np.nonzero(one[:1000])
  np.testing.assert_array_equal(res.spikes.steps, steps)
  np.testing.assert_array_equal(res.spikes.neurons, neurons)
  np.testing.assert_array_equal(res.rate.counts, one[:1000].sum(1))
  assert res.v.values.shape == (1000, 4)


@pytest.mark.slow
def test_cli_runs_a_bigger_network_with_min_delay_exchange(capsys):
  result = cuba.main(["--devices", "2", "--neurons", "800", "--delay", "5",
                      "--duration", "0.02"])
  assert result["exchange"] == "delay" and result["neurons"] == 800
  assert result["spikes"] > 0 and result["duration_s"] == pytest.approx(0.02)
  assert "exchange every 5 step(s)" in capsys.readouterr().out


def test_cli_rejects_a_device_count_that_does_not_divide_the_network():
  with pytest.raises(SystemExit) as err:
    cuba.main(["--devices", "3"])
  msg = str(err.value.code)
  assert "\n" not in msg
  assert "--devices 3" in msg and "valid device counts: 1, 2, 4, 5, 8" in msg


@pytest.mark.slow
def test_cli_save_on_eight_devices_resume_on_one_matches_one_run(tmp_path):
  """0.05 s on 8 devices, saved, resumed on 1 device for 0.05 s more: the
  States equal a 0.1 s run bit for bit (issue 13's example)."""
  import brainshard as bs
  ckpt = str(tmp_path / "ckpt")
  cuba.main(["--devices", "8", "--duration", "0.05", "--save", ckpt])
  one = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  resumed = cuba.EINetwork(one, "cuba", seed=0)
  meta = bs.restore_states(ckpt, resumed.dynamic_states())
  assert meta["t_ms"] == pytest.approx(50.0)
  resumed.runner().run(duration=50.0)
  whole = cuba.EINetwork(one, "cuba", seed=0)
  whole.runner().run(duration=100.0)
  for name, state in whole.dynamic_states().items():
    np.testing.assert_array_equal(np.asarray(resumed.dynamic_states()[name].value),
                                  np.asarray(state.value), err_msg=name)
