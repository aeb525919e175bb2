"""bs.models.Network: a network in NEST's terms on any mesh.

References: the same network stepped by hand in NumPy from the built
synapse table (every spike added into a ring buffer at its delay, the
model's own update per step), in float64; the 1-device run for 8 devices
(bit for bit); and the errors a NEST user's mistakes must give.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard import models as bm

from conftest import make_mesh


def small_network(mesh, dtype=jnp.float32, **kw):
  """E (iaf_psc_exp, driven) and I (iaf_psc_delta) with delays of 0.1-2 ms,
  both signs, two models on one mesh."""
  net = bm.Network(dt=0.1, seed=3, mesh=mesh, dtype=dtype, **kw)
  E = net.create('iaf_psc_exp', 24, {'I_e': np.linspace(420.0, 520.0, 24),
                                     'tau_syn_in': 5.0})
  I = net.create('iaf_psc_delta', 9, {'I_e': 500.0, 't_ref': 1.0})
  net.connect(E, E, {'rule': 'fixed_indegree', 'indegree': 5},
              {'weight': bm.Normal(60.0, 40.0), 'delay': 0.8})
  net.connect(E, I, {'rule': 'pairwise_bernoulli', 'p': 0.3},
              {'weight': 1.5, 'delay': bm.Uniform(0.5, 2.0)})
  net.connect(I, E, {'rule': 'fixed_outdegree', 'outdegree': 6},
              {'weight': -150.0, 'delay': 1.2})
  sr = net.create('spike_recorder')
  net.connect(E + I, sr)
  mm = net.create('multimeter', {'record_from': ['V_m', 'I_syn_in'],
                                 'interval': 0.5})
  net.connect(mm, E[:4])
  return net, E, I, sr, mm


def reference(net, steps):
  """``net`` stepped by hand: spikes (step, neuron) and each group's V_m
  after every step, from the built index's synapse table."""
  table = bm.synapses(net.delivery.index.value)
  n, dtype = net.layout.n_padded, net.dtype
  length = int(table['delay'].max()) + 1
  r = net.delivery.index.value.n_receptors
  buf = np.zeros((r, length, n), np.float64)
  states = [{k: np.asarray(s.value) for k, s in g.states.items()}
            for g in net.groups]
  consts = [{**g.fixed, **{k: np.asarray(v) for k, v in
                           g.constants.value.items()}} for g in net.groups]
  ids = np.arange(n)
  # one jitted update per group (a bound method made anew each step would
  # be a new function to jax.jit: a compile per step)
  updates = [jax.jit(g.model.update) for g in net.groups]
  spikes_out, v_out = [], []
  for t in range(steps):
    inputs = buf[:, t % length].copy()
    buf[:, t % length] = 0
    fired = np.zeros(n, bool)
    for g, update, state, c in zip(net.groups, updates, states, consts):
      k = g.model.n_receptors
      x = np.concatenate([inputs, np.zeros((max(0, k - r), n))])[:k]
      new, s = update(c, state, x.astype(dtype), np.zeros(n, dtype))
      inside = np.asarray(g.mask(jnp.asarray(ids)) if g.mask(
          jnp.asarray(ids)) is not None else np.ones(n, bool))
      for key in state:
        state[key] = np.where(inside, np.asarray(new[key]), state[key])
      fired |= np.asarray(s) & inside
    fired &= ids < net.layout.n
    for j in np.flatnonzero(fired):  # global presynaptic order
      for s in np.flatnonzero(table['pre'] == j):
        buf[table['receptor'][s], (t + table['delay'][s]) % length,
            table['post'][s]] += table['weight'][s]
    spikes_out += [(t, j) for j in np.flatnonzero(fired)]
    v_out.append(np.concatenate([st['V_m'] for st in states]))
  return spikes_out, v_out


@pytest.mark.slow
def test_spikes_and_traces_equal_a_hand_stepped_reference():
  with jax.enable_x64(True):
    net, E, I, sr, mm = small_network(make_mesh((2,), ('x',)),
                                      dtype=jnp.float64)
    net.build()
    steps = 400
    want, _ = reference(net, steps)
    net.simulate(steps * net.dt)
  got = sr.spikes
  assert len(want) > 30  # both populations fire, inputs matter
  assert {j for _, j in want} & set(range(24, 33))
  assert list(zip(got.steps.tolist(), got.neurons.tolist())) == want
  np.testing.assert_array_equal(sr.events['times'],
                                (got.steps + 1) * 0.1)


@pytest.mark.slow
def test_same_spikes_and_traces_on_1_and_8_devices():
  out = []
  for d in (1, 8):
    net, E, I, sr, mm = small_network(make_mesh((d,), ('x',)))
    sr_i = net.create('spike_recorder')  # one population: its slice only
    net.connect(I, sr_i)
    net.simulate(20.0)
    net.simulate(20.0)  # continues
    out.append((sr.events, mm.traces))
    mine = sr.events['senders'] >= 24
    for k in ('senders', 'times'):
      np.testing.assert_array_equal(sr_i.events[k], sr.events[k][mine])
  (ev1, tr1), (ev8, tr8) = out
  assert len(ev1['times']) > 30
  for k in ev1:
    np.testing.assert_array_equal(ev1[k], ev8[k])
  for k in tr1:
    np.testing.assert_array_equal(tr1[k], tr8[k])
  # NEST's multimeter samples at interval, 2 interval, ...: 40 ms / 0.5
  np.testing.assert_allclose(tr1['times'], 0.5 * np.arange(1, 81))
  assert tr1['V_m'].shape == (80, 4) and tr1['I_syn_in'].min() < 0


def test_a_doubled_simulate_continues():
  mesh = make_mesh((1,), ('x',))
  net = bm.Network(dt=0.1, mesh=mesh)
  E = net.create('iaf_psc_delta', 3, {'I_e': 500.0})
  sr = net.create('spike_recorder')
  net.connect(E, sr)
  net.simulate(15.0)
  net.simulate(15.0)
  assert net.time == 30.0
  # 500 pA reaches threshold after 13.86 ms and again 2 + 13.86 ms later
  np.testing.assert_allclose(sr.events['times'], [13.9] * 3 + [29.8] * 3)


@pytest.mark.slow
def test_nest_s_brunel_durations_run():
  """NEST's Brunel example simulates 1000 ms with 1.5 ms delays: the
  network exchanges spikes every 5 steps instead of refusing, and gives
  the spikes of exchanging every step."""
  def run(**kw):
    net = bm.Network(dt=0.1, seed=2, mesh=make_mesh((1,), ('x',)), **kw)
    E = net.create('iaf_psc_delta', 20, {'I_e': 400.0, 'V_m': 0.0})
    net.connect(E, E, {'rule': 'fixed_indegree', 'indegree': 5},
                {'weight': 4.0, 'delay': 1.5})
    sr = net.create('spike_recorder')
    net.connect(E, sr)
    net.simulate(100.0)
    return net, sr.events
  net, events = run()
  assert net.exchange_every == 5 and len(events['times']) > 20
  _, every_step = run(exchange_every=1)
  for key in ('times', 'senders'):
    np.testing.assert_array_equal(events[key], every_step[key])


@pytest.mark.slow
def test_records_to_disk(tmp_path):
  """``Network(record_to=path)``: the recorders' records in a zarr store,
  equal to those kept in memory."""
  pytest.importorskip("zarr", reason="needs zarr (brainshard[record])")

  def run(**kw):
    net = bm.Network(dt=0.1, seed=1, mesh=make_mesh((1,), ('x',)), **kw)
    E = net.create('iaf_psc_delta', 5, {'I_e': np.linspace(400, 600, 5)})
    sr = net.create('spike_recorder')
    net.connect(E[1:], sr)
    net.simulate(40.0)
    return sr.events
  on_disk = run(record_to=tmp_path / 'run.zarr')
  in_memory = run()
  assert (tmp_path / 'run.zarr').is_dir() and len(in_memory['times']) > 4
  for key in ('times', 'senders'):
    np.testing.assert_array_equal(on_disk[key], in_memory[key])


def test_nest_errors_name_what_to_change():
  mesh = make_mesh((1,), ('x',))
  net = bm.Network(dt=0.1, mesh=mesh)
  E = net.create('iaf_psc_exp', 4)
  D = net.create('iaf_psc_delta', 4)
  with pytest.raises(ValueError, match=r"receptor_type 2 does not exist on "
                     r"iaf_psc_exp, whose receptors are \['ex', 'in'\]"):
    net.connect(E, E, 'all_to_all', {'receptor_type': 2})
  with pytest.raises(ValueError, match="mix models that route by sign"):
    net.connect(E, E + D)
  with pytest.raises(ValueError, match=r"syn_spec takes .* not \['wieght'\]"):
    net.connect(E, E, 'all_to_all', {'wieght': 1.0})
  with pytest.raises(ValueError, match="unknown model 'iaf_psc_expp'"):
    net.create('iaf_psc_expp', 3)
  with pytest.raises(ValueError, match="unknown parameter"):
    net.create('iaf_psc_exp', 3, {'tau_syn': 2.0})
  with pytest.raises(ValueError, match="'I_e' has 2 values, not one or 3"):
    net.create('iaf_psc_exp', 3, {'I_e': [1.0, 2.0]})
  with pytest.raises(ValueError, match=r"projection 0 .*delay 0.04 ms rounds "
                     "to 0 steps"):
    net.connect(E, D, 'one_to_one', {'delay': 0.04})
  net.connect(E, E, 'one_to_one', {'weight': 5.0, 'delay': 1.5})
  with pytest.raises(ValueError, match=r"simulate\(duration=0.05\): not a "
                     r"whole number of steps of dt = 0.1 ms"):
    net.simulate(0.05)
  net.simulate(1.0)   # the first duration sets the interval: gcd(15, 10)
  assert net.exchange_every == 5
  with pytest.raises(ValueError, match=r"simulate\(0.3\): not a whole number "
                     r"of exchange intervals \(5 steps"):
    net.simulate(0.3)
  with pytest.raises(RuntimeError, match="create and connect everything "
                     "before"):
    net.create('iaf_psc_exp', 2)


def test_multimeter_errors():
  mesh = make_mesh((1,), ('x',))
  net = bm.Network(dt=0.1, mesh=mesh)
  E = net.create('iaf_psc_delta', 4)
  mm = net.create('multimeter', {'record_from': ['g_ex'], 'interval': 1.0})
  net.connect(mm, E)
  with pytest.raises(ValueError, match=r"\['g_ex'\] are not recordables of "
                     r"iaf_psc_delta; it has \['V_m'\]"):
    net.build()
  net = bm.Network(dt=0.1, mesh=mesh)
  E = net.create('iaf_psc_delta', 4)
  mm = net.create('multimeter', {'record_from': ['V_m'], 'interval': 0.25})
  net.connect(mm, E)
  with pytest.raises(ValueError, match="interval 0.25 ms is not a whole "
                     "number of steps"):
    net.build()


def test_a_float64_network_needs_x64():
  with pytest.raises(ValueError, match="jax_enable_x64"):
    bm.Network(dtype=jnp.float64)


@pytest.mark.parametrize('devices', [1, 4])
def test_a_device_draws_for_its_targets_only_with_the_whole_draws_counts(
    devices):
  # A poisson_generator into neurons [5, 19) of 24 (6 per shard on 4
  # devices): each target's count is the element of one draw over all 24
  # neurons that its global id picks, however the neurons are split.
  from brainshard._models.network.stimulus import Stimulus
  mesh = make_mesh((devices,), ('x',))
  pg, n = bm.PoissonGenerator(rate=20000.0), 24
  stim = Stimulus(pg, (5, 19), 2.0, 3, 0, 7)
  c = pg.constants(0.1)

  def per_shard(t):
    n_local = n // devices
    ids = jax.lax.axis_index('x') * n_local + jnp.arange(n_local)
    inputs, _ = stim.add(jnp.zeros((1, n_local)), jnp.zeros(n_local), t,
                         ids, seed=4, dt=0.1, dtype=jnp.float32)
    return inputs[0]

  got = bs.shard_map(per_shard, mesh=mesh, in_specs=P(), out_specs=P('x'))
  key = jax.random.fold_in(jax.random.key(4), 0x5EED + 7)
  for t in (10, 11):
    want = np.zeros(n, np.float32)
    want[5:19] = 2.0 * np.asarray(pg.emit(c, t - 3, n, key))[5:19]
    np.testing.assert_array_equal(np.asarray(got(jnp.int32(t))), want)
  assert want[5:19].std() > 0


@pytest.mark.slow
def test_record_to_writes_the_recorders_to_disk(tmp_path):
  mesh = make_mesh((1,), ('x',))
  net = bm.Network(dt=0.1, mesh=mesh, record_to=tmp_path / 'run.zarr')
  E = net.create('iaf_psc_delta', 3, {'I_e': 500.0})
  I = net.create('iaf_psc_delta', 2, {'I_e': 600.0})
  sr = net.create('spike_recorder', label='I_spikes')
  net.connect(I, sr)
  net.simulate(30.0)
  rec = bs.load_records(tmp_path / 'run.zarr')['I_spikes']
  assert len(rec.steps) == sr.n_events > 0
  # on one shard a population's recorder records its slice: ids from 3
  np.testing.assert_array_equal(rec.neurons + 3, sr.spikes.neurons)
  np.testing.assert_array_equal(rec.steps, sr.spikes.steps)
