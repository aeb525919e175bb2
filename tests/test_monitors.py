"""Monitors and their pieces: spike words across chunk boundaries that do
not fall on a word, per-shard compaction, pytree traces, the record store."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard._simulation.monitors import spikes as _spikes
from brainshard._simulation.monitors.records import Store


def _random_net(n=40, seed=0):
  rng = np.random.default_rng(seed)
  v = bs.State(jnp.asarray(rng.random(n), jnp.float32), name="v")
  rate = jnp.asarray(rng.random(n) * 0.3, jnp.float32)

  def step():
    x = v.value + rate
    fired = x > 1.0
    v.value = jnp.where(fired, x - 1.0, x)
    return fired
  return v, step


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [45, 7, 200])
def test_spike_events_across_unaligned_chunks(chunk):
  """Chunks that start inside a 32-step word share it with the previous
  chunk: each event is reported once, by the chunk it happened in."""
  v, step = _random_net()
  res = bs.Runner(step, {"s": bs.SpikeMonitor(), "r": bs.RateMonitor()},
                  chunk=chunk, progress=False).run(200)
  v2, step2 = _random_net()
  raster = np.asarray(bs.jit(lambda: bs.for_loop(step2, length=200))())
  steps, neurons = np.nonzero(raster)
  assert len(steps) > 100
  np.testing.assert_array_equal(res.s.steps, steps)
  np.testing.assert_array_equal(res.s.neurons, neurons)
  np.testing.assert_array_equal(res.r.counts, raster.sum(1))


@pytest.mark.slow
def test_compaction_per_shard_finds_every_word():
  mesh = jax.make_mesh((4,), ("x",))
  rng = np.random.default_rng(1)
  words = (rng.random((5, 64)) < 0.1) * rng.integers(1, 2**32, (5, 64))
  buf = jax.device_put(jnp.asarray(words, jnp.uint32),
                       NamedSharding(mesh, P(None, "x")))
  c = _spikes.compact(buf, capacity=16)
  assert (c.shards, c.n_local) == (4, 16)
  steps, neurons = _spikes.decode(c, start=0, length=5 * 32, base=0)
  bits = (words[:, None, :] >> np.arange(32)[None, :, None]) & 1
  ref_steps, ref_neurons = np.nonzero(bits.reshape(5 * 32, 64))
  np.testing.assert_array_equal(steps, ref_steps)
  np.testing.assert_array_equal(neurons, ref_neurons)
  with pytest.raises(_spikes.Overflow):
    _spikes.decode(_spikes.compact(buf, capacity=1), 0, 160, 0)
  whole = _spikes.dispatch(buf, capacity=1)  # small: copied whole, no program
  assert isinstance(whole, _spikes.Whole) and whole.n_local == 16
  steps, neurons = _spikes.decode(whole, start=0, length=5 * 32, base=0)
  np.testing.assert_array_equal(steps, ref_steps)
  np.testing.assert_array_equal(neurons, ref_neurons)
  np.testing.assert_array_equal(whole.spikes, np.asarray(c.spikes))


@pytest.mark.slow
def test_state_monitor_of_a_pytree_every_three_steps(tmp_path):
  v, step = _random_net()

  def both():
    return {"mean": v.value.mean(), "first": v.value[:2]}
  for store in (None, tmp_path):
    v.value = jnp.zeros(40)
    res = bs.Runner(step, {"m": bs.StateMonitor(both, every=3)}, chunk=10,
                    progress=False, store=store).run(31)
    assert res.m.steps.tolist() == list(range(2, 31, 3))
    assert res.m.values["first"].shape == (10, 2)
  v.value = jnp.zeros(40)

  def ref():
    step()
    return both()
  out = bs.jit(lambda: bs.for_loop(ref, length=31))()
  np.testing.assert_array_equal(res.m.values["mean"], out["mean"][2::3])
  np.testing.assert_array_equal(res.m.values["first"], out["first"][2::3])


def test_store_in_memory_and_on_disk_agree(tmp_path):
  for path in (None, tmp_path):
    store = Store(path)
    store.append("a", "x", np.arange(3))
    store.append("a", "x", np.arange(3, 5))
    store.append("a", "y", {"p": np.ones((2, 2)), "q": np.zeros(2, np.int8)})
    assert store.get("a", "x").tolist() == [0, 1, 2, 3, 4]
    assert store.get("a", "y")["p"].shape == (2, 2)
    assert store.get("a", "y")["q"].dtype == np.int8
    store.clear()
    assert store.get("a", "x") is None


def test_monitor_arguments_are_checked():
  v = bs.State(jnp.zeros(3), name="v")
  with pytest.raises(ValueError, match="on_overflow"):
    bs.SpikeMonitor(on_overflow="drop")
  with pytest.raises(ValueError, match="every"):
    bs.StateMonitor(v, every=0)
  with pytest.raises(TypeError, match="source"):
    bs.StateMonitor(None)
  with pytest.raises(TypeError, match="expected a SpikeMonitor"):
    bs.Runner(lambda: None, {"x": 3})
  with pytest.raises(ValueError, match="1-D"):
    runner = bs.Runner(lambda: v.value.reshape(1, 3) > 0,
                       {"s": bs.SpikeMonitor()}, chunk=4, progress=False)
    runner.run(4)


def _runs_nothing(runner, v, error, match):
  """run() raises ``error`` before any step: no step counted, v unchanged."""
  before = np.asarray(v.value)
  with pytest.raises(error, match=match):
    runner.run(8)
  assert runner.step_count == 0 and runner.result.steps == 0
  np.testing.assert_array_equal(np.asarray(v.value), before)


@pytest.mark.parametrize("returns, error, match", [
    (lambda v: None, TypeError, r"\['s', 'r'\] records the return value "
     r"of step step, which is None.*return v > th"),
    (lambda v: (v > 0.5, v), TypeError, r"\['s', 'r'\].*which is a tuple.*"
     r"source=lambda out: out\[0\]"),
    (lambda v: (v > 0.5).astype(jnp.float32), TypeError,
     r"\['s', 'r'\].*float32\[40\].*must be bool.*astype\(bool\)"),
    (lambda v: (v > 0.5).astype(jnp.int32), TypeError, r"int32\[40\]"),
], ids=["none", "tuple", "float", "int"])
def test_spike_monitor_needs_one_bool_vector_per_step(returns, error, match):
  v, net_step = _random_net()

  def step():
    net_step()
    return returns(v.value)
  runner = bs.Runner(step, {"s": bs.SpikeMonitor(), "r": bs.RateMonitor()},
                     chunk=8, progress=False)
  _runs_nothing(runner, v, error, match)


@pytest.mark.parametrize("source", [jnp.zeros(4, bool), 3, "v"])
def test_spike_sources_are_checked_at_construction(source):
  for monitor in (bs.SpikeMonitor, bs.RateMonitor):
    with pytest.raises(TypeError, match=rf"{monitor.__name__}: source must "
                       r"be None.*a State, or a callable"):
      monitor(source)


def test_state_monitor_index_out_of_range_is_an_error():
  mesh = jax.make_mesh((8,), ("x",))
  for put in (lambda x: x,  # whole, and sharded (each shard picks its own)
              lambda x: jax.device_put(x, NamedSharding(mesh, P("x")))):
    v = bs.State(put(jnp.arange(64.0)), name="v")

    def step():
      v.value = v.value + 1.0
    runner = bs.Runner(step, {"m": bs.StateMonitor(v, index=[3, 99])},
                       chunk=4, progress=False)
    _runs_nothing(runner, v, IndexError, r"monitor 'm'.*index \[99\] is out "
                  r"of range for v, which holds float32\[64\].*\[0, 64\)")
    ok = bs.Runner(step, {"m": bs.StateMonitor(v, index=[3, -1])}, chunk=4,
                   progress=False).run(4)
    np.testing.assert_array_equal(ok.m.values, [[4.0, 64.0], [5.0, 65.0],
                                                [6.0, 66.0], [7.0, 67.0]])
  with pytest.raises(TypeError, match="index must be integers"):
    bs.StateMonitor(v, index=[0.5])


def _steady_spiker(n=8):
  """Neuron 0 spikes on every step, the others never."""
  v = bs.State(jnp.zeros(n), name="v")

  def step():
    v.value = v.value + 1.0
    return jnp.arange(n) == 0
  return v, step


@pytest.mark.slow
@pytest.mark.parametrize("host_words", [0, None], ids=["compacted", "whole"])
def test_capacity_counts_spikes_not_words(monkeypatch, host_words):
  # 32 steps of neuron 0: 32 spikes, all in one 32-step word.
  if host_words is not None:
    monkeypatch.setattr(_spikes, "HOST_WORDS", host_words)
  v, step = _steady_spiker()
  runner = bs.Runner(step, {"s": bs.SpikeMonitor(capacity=31,
                                                 on_overflow="raise")},
                     chunk=32, progress=False)
  with pytest.raises(RuntimeError, match=r"\['s'\]: a shard recorded 32 "
                     r"spikes .*\[0, 32\), more than its capacity 31"):
    runner.run(32)
  assert runner.step_count == 0
  np.testing.assert_array_equal(np.asarray(v.value), np.zeros(8))
  for capacity in (32, 1):  # fits; grows (nothing lost)
    mode = "raise" if capacity == 32 else "grow"
    v, step = _steady_spiker()
    res = bs.Runner(step, {"s": bs.SpikeMonitor(
        capacity=capacity, on_overflow=mode)}, chunk=32,
        progress=False).run(64)
    assert res.s.steps.tolist() == list(range(64))
    assert res.s.neurons.tolist() == [0] * 64
