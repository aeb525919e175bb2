"""The CUBA/COBA example network: the same spikes on 1 and on 8 devices, and
a mean rate in the published range."""

import pathlib
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import cuba  # noqa: E402


def _mesh(n):
  return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


def test_local_targets_cover_the_connectivity_on_any_mesh():
  params = cuba.Params(n=64, n_exc=48, p_connect=0.2)
  conn = cuba.connectivity(params, seed=1)
  for shards in (1, 4):
    table = cuba.local_targets(conn, shards).reshape(shards, 64, -1)
    n_local = 64 // shards
    rebuilt = np.zeros_like(conn)
    for s in range(shards):
      pre, slot = np.nonzero(table[s] < n_local)
      rebuilt[s * n_local + table[s][pre, slot], pre] = True
    np.testing.assert_array_equal(rebuilt, conn)


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
