"""Poisson generators' connections drawn in one pass (network/poisson_pass.py)
add exactly what the connections add one by one (Stimulus.add), on any
mesh; passes() fuses only runs of disjoint connections into one receptor,
so every input is summed in the order of the connections."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard import models as bm
from brainshard._models.network.poisson_pass import PoissonPass, passes
from brainshard._models.network.stimulus import Stimulus

from conftest import make_mesh

N = 24


def connections():
  """Four generators into [2, 7), [7, 12), [14, 20), [20, 23) of 24: gaps,
  different rates (tables of different lengths), weights, delays and
  activity windows."""
  pg = [bm.PoissonGenerator(rate=8000.0),
        bm.PoissonGenerator(rate=30000.0, start=1.0),
        bm.PoissonGenerator(rate=1000.0, stop=1.5),
        bm.PoissonGenerator(rate=60000.0, origin=0.5, start=0.2)]
  ranges = [(2, 7), (7, 12), (14, 20), (20, 23)]
  weights, delays = [1.0, -2.5, 0.75, 3.0], [1, 4, 2, 15]
  return [Stimulus(g, r, w, d, 0, k) for k, (g, r, w, d) in
          enumerate(zip(pg, ranges, weights, delays))]


@pytest.mark.parametrize('devices', [1, 4])
def test_one_pass_adds_what_the_connections_add(devices):
  stims = connections()
  (fused,) = passes(stims, 0.1)
  assert isinstance(fused, PoissonPass) and len(fused.stims) == 4
  mesh = make_mesh((devices,), ('x',))
  n_local = N // devices

  def per_shard(t, todo):
    ids = jax.lax.axis_index('x') * n_local + jnp.arange(n_local)
    x = (jnp.full((1, n_local), 0.5), jnp.zeros(n_local))
    for s in todo:
      x = s.add(*x, t, ids, 4, 0.1, jnp.float32, devices)
    return x[0][0]

  run = lambda todo: bs.shard_map(  # noqa: E731
      lambda t: per_shard(t, todo), mesh=mesh, in_specs=P(),
      out_specs=P('x'))
  one, each = run([fused]), run(stims)
  seen = []
  for t in (0, 3, 9, 12, 16, 20, 25, 40):
    got, want = one(jnp.int32(t)), each(jnp.int32(t))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    seen.append(np.asarray(got))
  seen = np.array(seen)
  assert (seen[:, [0, 1, 12, 13, 23]] == 0.5).all()  # no connection there
  for s in stims:  # every connection draws
    assert (seen[:, s.ids[0]:s.ids[1]] != 0.5).any(), s.ids


def test_passes_fuse_runs_of_disjoint_connections_into_one_receptor():
  a, b, c, d = connections()
  dc = Stimulus(bm.DcGenerator(amplitude=1.0), (0, 3), 1.0, 1, 0, 9)
  slow = Stimulus(bm.PoissonGenerator(rate=5.0), (12, 14), 1.0, 1, 0, 8)
  overlap = b._replace(ids=(10, 15), number=10)
  other = c._replace(receptor=1, number=11)
  kinds = lambda out: [len(p.stims) if isinstance(p, PoissonPass)  # noqa: E731
                       else p.number for p in out]
  assert kinds(passes([a, b, c, d], 0.1)) == [4]
  # a device that is not a table-drawn Poisson generator ends a run: the
  # order of the additions stays the connections' order
  assert kinds(passes([a, b, dc, c, d], 0.1)) == [2, 9, 2]
  assert kinds(passes([a, slow, b], 0.1)) == [0, 8, 1]
  assert kinds(passes([a, b, overlap, d], 0.1)) == [2, 2]
  assert kinds(passes([a, other, b], 0.1)) == [0, 11, 1]
  # sorted by first target within a pass
  (p,) = passes([d, c, b, a], 0.1)
  assert [s.number for s in p.stims] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_network_of_fused_generators_spikes_alike_on_1_and_8_devices():
  def spikes(devices):
    net = bm.Network(dt=0.1, seed=5, mesh=make_mesh((devices,), ('x',)))
    pops = [net.create('iaf_psc_exp', n, {'I_e': 300.0}) for n in (13, 9, 19)]
    for k, pop in enumerate(pops):
      pg = net.create('poisson_generator', {'rate': 20000.0 + 5000.0 * k})
      net.connect(pg, pop, syn_spec={'weight': 40.0, 'delay': 0.5})
    net.connect(pops[0], pops[1] + pops[2],
                {'rule': 'fixed_indegree', 'indegree': 3},
                {'weight': -30.0, 'delay': 1.0})
    sr = net.create('spike_recorder')
    net.connect(pops[0] + pops[1] + pops[2], sr)
    net.simulate(40.0)
    assert any(isinstance(p, PoissonPass) for p in net._passes)
    return sr.spikes
  one, eight = spikes(1), spikes(8)
  assert len(one.steps) > 20
  np.testing.assert_array_equal(one.steps, eight.steps)
  np.testing.assert_array_equal(one.neurons, eight.neurons)
