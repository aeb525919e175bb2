"""Populations on one sharded axis: views, per-population values, masks in
shard_map, and per-population spike and rate records of a Runner."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._models.layout import Layout
from brainshard._models.population import (
    Population, counts_to_rates, population_counts, population_ids,
    population_rates, population_values, split_spikes)
from brainshard._models.delivery.delivery import block_spikes, unblock_spikes
from test_delivery import Net, small_network

LAYOUT = Layout({"E": 10, "I": 3, "X": 6}, n_shards=4)   # 19 -> 20


def test_views_and_values():
  x = np.arange(LAYOUT.n_padded) * 10
  assert Population(LAYOUT, "I").view(x).tolist() == [100, 110, 120]
  assert Population(LAYOUT, "X").view(x[:19]).tolist() == list(x[13:19])
  two = np.stack([x, -x])
  assert Population(LAYOUT, "I").view(two, axis=1).tolist() == [
      [100, 110, 120], [-100, -110, -120]]
  s = bs.State(jnp.asarray(x), name="s")
  assert Population(LAYOUT, "E").view(s).tolist() == list(x[:10])
  vals = population_values(LAYOUT, {"E": 1.0, "I": [2, 3, 4], "X": 5.0},
                           fill=-1)
  assert vals.tolist() == [1] * 10 + [2, 3, 4] + [5] * 6 + [-1]
  assert population_ids(LAYOUT).tolist() == [0] * 10 + [1] * 3 + [2] * 6 + [3]


def test_population_errors_name_what_is_wrong():
  with pytest.raises(ValueError, match=r"\['X'\] have no value"):
    population_values(LAYOUT, {"E": 1.0, "I": 2.0})
  with pytest.raises(ValueError, match=r"'Y'\] are not in the layout"):
    population_values(LAYOUT, {"E": 1, "I": 2, "X": 3, "Y": 4})
  with pytest.raises(ValueError, match=r"'I' has 3 neurons.*\(2,\)"):
    population_values(LAYOUT, {"E": 1, "I": [1, 2], "X": 3})
  with pytest.raises(ValueError, match=r"axis -1 of x has 7 entries.*19 \(20"):
    Population(LAYOUT, "E").view(np.zeros(7))
  with pytest.raises(KeyError, match="no population 'Y'"):
    Population(LAYOUT, "Y")


def test_local_mask_in_shard_map():
  mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
  pops = [Population(LAYOUT, n) for n in LAYOUT.names]
  masks = bs.shard_map(lambda: jnp.stack([p.local_mask() for p in pops]),
                       mesh=mesh, in_specs=(), out_specs=P(None, "x"))()
  ids = population_ids(LAYOUT)
  for k in range(3):
    np.testing.assert_array_equal(np.asarray(masks[k]), ids == k)


def test_split_spikes_and_rates():
  spikes = bs.SpikeData(np.array([0, 0, 1, 3, 3, 3]),
                        np.array([2, 11, 15, 0, 12, 18]), 19, 0.1)
  parts = split_spikes(spikes, LAYOUT)
  assert parts["E"].neurons.tolist() == [2, 0] and parts["E"].n == 10
  assert parts["I"].steps.tolist() == [0, 3] and parts["I"].neurons.tolist() == [1, 2]
  assert parts["X"].neurons.tolist() == [2, 5] and parts["X"].n == 6
  rates = population_rates(spikes, LAYOUT, steps=5)
  assert rates["E"].counts.tolist() == [1, 0, 0, 1, 0]
  assert rates["X"].counts.tolist() == [0, 1, 0, 1, 0]
  np.testing.assert_allclose(rates["I"].rate, [1 / (3 * 1e-4), 0, 0,
                                               1 / (3 * 1e-4), 0])


@pytest.fixture(scope="module")
def plain_spikes():
  """The plain run the Runner tests compare with: seed 3, 120 steps on one
  device (computed once for the module)."""
  syn, layout, drive, v0 = small_network(seed=3)
  return Net(syn, layout, drive, v0, devices=1).run(120)[0]


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 4])
def test_runner_records_per_population(devices, plain_spikes):
  """A Runner over a Delivery step: its spikes are those of a plain run,
  split by population; device-side counts equal the host-side rates."""
  syn, layout, drive, v0 = small_network(seed=3)
  steps = 120
  want = plain_spikes
  net = Net(syn, layout, drive, v0, devices=devices)
  lay = net.layout
  mesh = net.delivery.mesh
  runner = bs.Runner(net.step, {
      "spikes": bs.SpikeMonitor(),
      "counts": bs.StateMonitor(population_counts(lay, mesh))},
      dt=0.1, chunk=50, progress=False)
  res = runner.run(steps)
  parts = split_spikes(res["spikes"], lay)
  for name in lay.names:
    a, b = lay.range(name)
    s, nrn = np.nonzero(want[:, a:b])
    assert parts[name].steps.tolist() == s.tolist()
    assert parts[name].neurons.tolist() == nrn.tolist()
  host = population_rates(res["spikes"], lay, res.steps, res.start)
  dev = counts_to_rates(res["counts"], lay)
  for name in lay.names:
    np.testing.assert_array_equal(dev[name].counts, host[name].counts)
    np.testing.assert_array_equal(dev[name].steps, host[name].steps)
    assert dev[name].n == host[name].n == Population(lay, name).size
  assert host["I"].counts.sum() > 0 and host["E"].counts.sum() > 0


@pytest.mark.slow
def test_runner_with_an_exchange_every_two_steps(plain_spikes):
  """A Runner over a 2-steps-per-call Delivery step (dt = 2 steps) records
  the spikes of the plain run once unblocked."""
  syn, layout, drive, v0 = small_network(seed=3)
  want = plain_spikes
  net = Net(syn, layout, drive, v0, devices=4, every=2)
  runner = bs.Runner(net.step, {"spikes": bs.SpikeMonitor(block_spikes)},
                     dt=0.2, chunk=20, progress=False)
  res = runner.run(duration=12.0)
  assert res.steps == 60
  got = unblock_spikes(res["spikes"], 2)
  s, nrn = np.nonzero(want)
  assert got.steps.tolist() == s.tolist() and got.neurons.tolist() == nrn.tolist()
  assert got.n == net.layout.n_padded and got.dt == pytest.approx(0.1)
  parts = split_spikes(got, net.layout)
  assert sum(len(p) for p in parts.values()) == len(s) > 20


def test_population_counts_checks_the_mesh():
  mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
  with pytest.raises(ValueError, match=r"layout has 4 shard.*has 2"):
    population_counts(LAYOUT, mesh)
