"""bs.Runner: a chunked run equals one bs.for_loop bit for bit (States and
records), on 1 and 8 devices; Ctrl-C stops at a chunk boundary and the run
continues; at most two compiles; overflow; disk store; checkpoints."""

import contextlib
import io
import logging
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard._scaleout.checkpoint import checkpoint
from brainshard._simulation.monitors import spikes as _spikes
from brainshard._simulation.runner.progress import ChunkBar

IDX = [0, 5, 63]


def make_net(n=64, mesh=None, noise=False):
  """Leaky neurons with a constant drive (and optional noise): v, step."""
  put = ((lambda x: jax.device_put(x, NamedSharding(mesh, P("x"))))
         if mesh is not None else (lambda x: x))
  spec = P("x") if mesh is not None else None
  v = bs.State(put(jnp.linspace(0.0, 0.9, n)), name="v", spec=spec)
  drive = bs.ParamState(put(0.02 + 0.1 * jnp.arange(n) / n), name="drive",
                        spec=spec)
  rng = bs.RandomState(0) if noise else None

  def local():
    x = v.value * 0.97 + drive.value
    if rng is not None:
      x = x + bs.random.uniform(0.0, 0.02, size=x.shape, key=rng)
    spikes = x > 1.0
    v.value = jnp.where(spikes, 0.0, x)
    return spikes

  if mesh is None:
    return v, local, rng
  return v, bs.shard_map(local, mesh=mesh, in_specs=(), out_specs=P("x")), rng


def picked(x, mesh):
  if mesh is None:
    return x[jnp.asarray(IDX)]
  return x.at[jnp.asarray(IDX)].get(out_sharding=NamedSharding(mesh, P()))


def reference(n_steps, mesh=None, noise=False):
  """One bs.for_loop of n_steps on a fresh network: final v, raster,
  traces of IDX, mean v per step, and the key (if any)."""
  v, step, rng = make_net(mesh=mesh, noise=noise)

  def ref():
    s = step()
    return s, picked(v.value, mesh), v.value.mean()
  if n_steps == 0:
    return np.asarray(v.value), np.zeros((0, 64), bool), None, None, rng
  spikes, traces, means = bs.jit(lambda: bs.for_loop(ref, length=n_steps))()
  return (np.asarray(v.value), np.asarray(spikes), np.asarray(traces),
          np.asarray(means), rng)


def monitors(v):
  return {"spikes": bs.SpikeMonitor(), "rate": bs.RateMonitor(),
          "v": bs.StateMonitor(v, index=IDX),
          "mean": bs.StateMonitor(lambda: v.value.mean(), every=7)}


def assert_matches_reference(res, v, n_steps, mesh=None, noise=False, rng=None):
  v_ref, raster, traces, means, rng_ref = reference(n_steps, mesh, noise)
  np.testing.assert_array_equal(np.asarray(v.value), v_ref)
  if rng is not None:
    np.testing.assert_array_equal(jax.random.key_data(rng.value),
                                  jax.random.key_data(rng_ref.value))
  steps, neurons = np.nonzero(raster)
  np.testing.assert_array_equal(res.spikes.steps, steps)
  np.testing.assert_array_equal(res.spikes.neurons, neurons)
  np.testing.assert_array_equal(res.rate.counts, raster.sum(1))
  if n_steps:
    np.testing.assert_array_equal(res.v.values, traces)
    np.testing.assert_array_equal(res.v.steps, np.arange(n_steps))
    np.testing.assert_array_equal(res.mean.values, means[6::7])
    np.testing.assert_array_equal(res.mean.steps, np.arange(6, n_steps, 7))


@pytest.mark.slow
@pytest.mark.parametrize("noise", [False, True], ids=["drive", "noise"])
def test_chunked_run_equals_one_for_loop_on_one_device(noise):
  v, step, rng = make_net(noise=noise)
  runner = bs.Runner(step, monitors(v), dt=0.1, chunk=64, progress=False)
  res = runner.run(300)  # 4 chunks of 64 and one of 44
  assert res.steps == 300 and len(res.spikes) > 500
  assert_matches_reference(res, v, 300, noise=noise, rng=rng)


@pytest.mark.slow
def test_chunked_run_equals_one_for_loop_on_eight_devices(monkeypatch,
                                                          axis_type):
  mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
  shards = []
  compact = _spikes.compact

  def spy(buf, capacity):
    out = compact(buf, capacity)
    shards.append(out.shards)
    return out
  monkeypatch.setattr(_spikes, "compact", spy)
  monkeypatch.setattr(_spikes, "HOST_WORDS", 0)  # compacted, however small
  v, step, _ = make_net(mesh=mesh)
  res = bs.Runner(step, monitors(v), dt=0.1, chunk=64, progress=False).run(300)
  assert v.value.sharding.spec == P("x")
  assert shards and set(shards) == {8}  # compacted per shard
  assert_matches_reference(res, v, 300, mesh=mesh)


def test_compaction_gathers_no_whole_raster():
  mesh = jax.make_mesh((8,), ("x",))
  buf = jax.device_put(jnp.zeros((4, 64), jnp.uint32),
                       NamedSharding(mesh, P(None, "x")))
  hlo = _spikes._compactor(mesh, "x", 16).lower(buf).as_text()
  assert "all-gather" not in hlo and "all_gather" not in hlo


@contextlib.contextmanager
def compile_log():
  """Names of the programs XLA compiles inside the block."""
  names = []

  class Handler(logging.Handler):
    def emit(self, record):
      msg = record.getMessage()
      if msg.startswith("Compiling "):
        names.append(msg.split()[1])
  handler = Handler()
  logging.getLogger("jax").addHandler(handler)
  try:
    with jax.log_compiles():
      yield names
  finally:
    logging.getLogger("jax").removeHandler(handler)


@pytest.mark.slow
def test_a_run_compiles_at_most_two_chunk_programs():
  v, step, _ = make_net()
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False)
  with compile_log() as names:
    runner.run(100)
  chunks = [n for n in names if "chunk" in n]
  assert sorted(chunks) == ["jit(chunk32_local)", "jit(chunk4_local)"]
  assert runner.loop.compiles == 2
  with compile_log() as names:
    runner.run(100)  # the same lengths again: nothing new
  assert not names
  assert runner.result.steps == 200


def _press_ctrl_c_after(runner, chunks):
  """Sends a real SIGINT to this process once ``chunks`` chunks are recorded,
  from the main thread while the run is in progress (a thread pressing it
  could be scheduled only after a fast run ended, and interrupt pytest)."""

  record = runner._record

  def record_then_press(*args):
    record(*args)
    if runner.chunks_done == chunks:
      os.kill(os.getpid(), signal.SIGINT)
  runner._record = record_then_press


@pytest.mark.slow
def test_sigint_stops_at_a_chunk_boundary_and_the_run_continues(capsys):
  v, step, rng = make_net(noise=True)
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False)
  n = 32 * 120 + 5
  before = signal.getsignal(signal.SIGINT)
  _press_ctrl_c_after(runner, 2)
  res = runner.run(n)
  assert signal.getsignal(signal.SIGINT) is before  # handler put back
  assert res.interrupted and "runner.run() continues" in capsys.readouterr().err
  done = runner.step_count
  assert 64 <= done < n and done % 32 == 0 and res.steps == done
  assert_matches_reference(res, v, done, noise=True, rng=rng)
  res = runner.run()  # continue
  assert not res.interrupted and res.steps == n
  assert_matches_reference(res, v, n, noise=True, rng=rng)


def test_sigint_can_raise_instead():
  v, step, _ = make_net()
  runner = bs.Runner(step, {}, chunk=32, progress=False, on_interrupt="raise")
  _press_ctrl_c_after(runner, 1)
  with pytest.raises(KeyboardInterrupt, match="interrupted after step"):
    runner.run(32 * 120)
  np.testing.assert_array_equal(np.asarray(v.value),
                                reference(runner.step_count)[0])


@pytest.mark.slow
def test_overflow_grows_the_buffer_and_loses_nothing():
  v, step, _ = make_net()
  runner = bs.Runner(step, {"spikes": bs.SpikeMonitor(capacity=1)},
                     chunk=64, progress=False)
  res = runner.run(200)
  steps, neurons = np.nonzero(reference(200)[1])
  np.testing.assert_array_equal(res.spikes.steps, steps)
  np.testing.assert_array_equal(res.spikes.neurons, neurons)
  assert runner.recorder.capacity[0] > 1


def test_overflow_can_raise_and_leaves_states_and_records_consistent():
  v, step, _ = make_net()
  runner = bs.Runner(step, {"spikes": bs.SpikeMonitor(capacity=1,
                                                      on_overflow="raise")},
                     chunk=64, progress=False)
  v0 = np.asarray(v.value)
  with pytest.raises(RuntimeError,
                     match=r"spike monitor \['spikes'\].*capacity 1"):
    runner.run(200)
  np.testing.assert_array_equal(np.asarray(v.value), v0)  # rolled back
  assert runner.step_count == 0 and len(runner.result.spikes) == 0


@pytest.mark.slow
def test_records_stream_to_disk(tmp_path):
  v, step, _ = make_net()
  res = bs.Runner(step, monitors(v), chunk=64, progress=False,
                  store=tmp_path).run(150)
  assert isinstance(res.spikes.steps, np.memmap)
  assert_matches_reference(res, v, 150)
  assert any(p.name.startswith("spikes.") for p in tmp_path.iterdir())


def test_chunked_loop_undoes_chunks_dispatched_ahead():
  v, step, _ = make_net()
  loop = bs.ChunkedLoop(step, chunk=16)
  for chunk in loop.iterate(160):
    if chunk.index == 2:
      break  # the 4th chunk was already dispatched: it is undone
  np.testing.assert_array_equal(np.asarray(v.value), reference(48)[0])


def test_chunk_size_from_time_and_memory():
  v, step, _ = make_net()
  runner = bs.Runner(step, monitors(v), chunk_seconds=0.05,
                     max_chunk_bytes=1 << 30, progress=False)
  k = runner.loop.chunk
  assert k % 32 == 0 and k >= 32
  v0 = np.asarray(v.value)
  np.testing.assert_array_equal(v0, reference(0)[0])  # timing left no trace
  small = bs.Runner(step, monitors(v), max_chunk_bytes=10_000,
                    progress=False)
  per_step = 64 / 8 + 3 * 4 + 4 / 7  # spike bits, 3 traces, a mean every 7
  assert 10_000 / per_step / 2 <= small.loop.chunk <= 10_000 / per_step


def test_progress_bar_shows_rate_simulated_time_and_eta():
  out = io.StringIO()
  bar = ChunkBar(1000, dt=0.1, desc="net", file=out, use_tqdm=False)
  time.sleep(0.01)
  bar.update(400)
  bar.close()
  text = out.getvalue()
  assert "net:  40% 400/1000 steps" in text and "steps/s" in text
  assert "ETA" in text and "s sim/s" in text
  pytest.importorskip("tqdm")
  out = io.StringIO()
  bar = ChunkBar(1000, dt=0.1, file=out)
  bar.update(500)
  bar.close()
  assert "500/1000" in out.getvalue() and "sim/s" in out.getvalue()


def test_runner_shows_one_bar(capsys):
  v, step, _ = make_net()
  bs.Runner(step, {}, dt=0.1, chunk=50, progress="lif net").run(200)
  err = capsys.readouterr().err
  assert "lif net" in err and "200/200" in err and "sim/s" in err


@pytest.mark.slow
def test_plots_draw_what_was_recorded():
  pytest.importorskip("matplotlib")
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  v, step, _ = make_net()
  res = bs.Runner(step, monitors(v), dt=0.1, chunk=64, progress=False).run(200)
  ax = res.plot_raster()
  assert len(ax.collections[0].get_offsets()) == len(res.spikes)
  ax = res.plot_rate(bin_ms=1.0)
  assert len(ax.lines[0].get_xdata()) == 20  # 200 steps / 10 per bin
  ax = res.plot_traces("v")
  assert len(ax.lines) == len(IDX)
  fig = res.plot(title="net")
  assert len(fig.axes) == 3
  plt.close("all")


def _fake_checkpoints(monkeypatch):
  saved = {}

  def save_states(path, states, *, overwrite=False, metadata=None, block=True):
    saved[path] = ({k: np.asarray(s.value) for k, s in states.items()},
                   dict(metadata))

  def restore_states(path, states, *, strict=True):
    values, meta = saved[path]
    for k, s in states.items():
      s.value = jnp.asarray(values[k])
    return meta
  monkeypatch.setattr(checkpoint, "save_states", save_states)
  monkeypatch.setattr(checkpoint, "restore_states", restore_states)
  return saved


@pytest.mark.slow
def test_checkpoint_hook_calls_save_and_restore(monkeypatch, tmp_path):
  saved = _fake_checkpoints(monkeypatch)
  v, step, _ = make_net()
  runner = bs.Runner(step, {}, dt=0.1, chunk=32, progress=False,
                     checkpoint_every=2, checkpoint_dir=tmp_path)
  runner.run(200)  # chunks end at 32, 64, ..., 192, 200
  steps = sorted(meta["step"] for _, meta in saved.values())
  assert steps == [64, 128, 192]
  values, meta = saved[os.path.join(tmp_path, "step_000000000128")]
  np.testing.assert_array_equal(values["v"], reference(128)[0])
  assert meta["time"] == pytest.approx(12.8)
  os.makedirs(tmp_path / "step_000000000128")
  os.makedirs(tmp_path / "step_000000000192")
  assert runner.restore()["step"] == 192
  runner.run(8)
  np.testing.assert_array_equal(np.asarray(v.value), reference(200)[0])


@pytest.mark.skipif(not hasattr(bs, "save_states"),
                    reason="bs.save_states (issue 13) is not merged yet")
@pytest.mark.slow
def test_checkpoint_resume_with_the_real_checkpoints(tmp_path):
  v, step, rng = make_net(noise=True)
  runner = bs.Runner(step, monitors(v), dt=0.1, chunk=32, progress=False,
                     checkpoint_every=1, checkpoint_dir=tmp_path)
  runner.run(96)
  v2, step2, rng2 = make_net(noise=True)
  again = bs.Runner(step2, monitors(v2), dt=0.1, chunk=32, progress=False,
                    checkpoint_dir=tmp_path)
  meta = again.restore(tmp_path / "step_000000000064")
  assert meta["step"] == 64
  res = again.run(32)
  np.testing.assert_array_equal(np.asarray(v2.value), np.asarray(v.value))
  steps, _ = np.nonzero(reference(96, noise=True)[1])
  np.testing.assert_array_equal(res.spikes.steps, steps[steps >= 64])


@pytest.mark.slow
def test_a_second_sigint_raises_with_states_and_records_consistent():
  """Ctrl-C twice while a chunk's records are being copied: the run stops
  at once, with the States and records of the chunks recorded before."""
  v, step, rng = make_net(noise=True)
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False)
  collect = runner.recorder.collect

  def collect_and_press(*args):
    if runner.chunks_done == 2:
      os.kill(os.getpid(), signal.SIGINT)  # stop at the next boundary
      time.sleep(0.01)
      os.kill(os.getpid(), signal.SIGINT)  # stop now
      time.sleep(0.01)
    return collect(*args)
  runner.recorder.collect = collect_and_press
  with pytest.raises(KeyboardInterrupt):
    runner.run(32 * 120)
  assert runner.step_count == 64 and runner.result.steps == 64
  assert_matches_reference(runner.result, v, 64, noise=True, rng=rng)


@pytest.mark.slow
def test_step_with_the_global_step_index():
  """index=True: step(i) gets the global step index, across chunks."""
  v = bs.State(jnp.zeros(8), name="v")

  def step(i):
    v.value = v.value * 0.5 + (i % 3).astype(jnp.float32) + jnp.arange(8.0)
    return v.value > 4.0
  runner = bs.Runner(step, {"s": bs.SpikeMonitor(), "i": bs.StateMonitor(
      lambda out: out.sum(), every=5)}, chunk=16, index=True, progress=False)
  res = runner.run(50)
  got = np.asarray(v.value)
  v.value = jnp.zeros(8)
  raster = np.asarray(bs.jit(lambda: bs.for_loop(step, jnp.arange(50)))())
  np.testing.assert_array_equal(got, np.asarray(v.value))
  np.testing.assert_array_equal(res.s.steps, np.nonzero(raster)[0])
  np.testing.assert_array_equal(res.i.values, raster.sum(1)[4::5])


def _press_twice_during_dispatch(runner, chunks):
  """Ctrl-C twice while the runner dispatches the chunk after ``chunks``
  recorded ones (inside its compaction queueing): the second signal lands
  while a chunk is being handed out."""
  dispatch = runner.recorder.dispatch

  def dispatch_and_press(out):
    if runner.chunks_done == chunks:
      os.kill(os.getpid(), signal.SIGINT)
      os.kill(os.getpid(), signal.SIGINT)
    return dispatch(out)
  runner.recorder.dispatch = dispatch_and_press


@pytest.mark.slow
def test_a_second_sigint_during_dispatch_rolls_the_states_back():
  v, step, rng = make_net(noise=True)
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False)
  _press_twice_during_dispatch(runner, 2)
  with pytest.raises(KeyboardInterrupt):
    runner.run(32 * 120)
  done = runner.step_count
  assert done == runner.result.steps and done in (64, 96)
  assert_matches_reference(runner.result, v, done, noise=True, rng=rng)


@pytest.mark.slow
def test_two_sigints_at_any_moment_leave_states_and_records_consistent():
  """Two Ctrl-Cs land at seeded random moments of a run (counted in Python
  calls, so every trial is reproducible): whatever they cut, the States end
  as after the steps the records cover."""
  v, step, rng = make_net(noise=True)
  n = 32 * 6
  v0, key0 = v.value, rng.value

  def ref():
    s = step()
    return s, v.value, jax.random.key_data(rng.value)
  raster, vs, keys = map(np.asarray, bs.jit(
      lambda: bs.for_loop(ref, length=n))())
  v.value, rng.value = v0, key0
  runner = bs.Runner(step, {"spikes": bs.SpikeMonitor(),
                            "v": bs.StateMonitor(v, index=IDX)},
                     chunk=32, progress=False)
  runner.run(n)  # compiles
  calls = [0]

  def count(frame, event, arg):
    calls[0] += 1
  sys.setprofile(count)
  try:
    runner.run(n)  # how many calls a compiled run makes
  finally:
    sys.setprofile(None)
  total = calls[0]
  draw = np.random.default_rng(0)
  previous = signal.signal(signal.SIGINT, lambda *a: None)  # stray presses
  try:
    for _ in range(16):
      v.value, rng.value = v0, key0
      runner.step_count, runner.target = 0, None
      runner.reset_records()
      # The second press mostly soon after the first: a press stops new
      # dispatches, so the moments that matter follow it closely.
      first = int(draw.integers(0, total))
      second = first + int(draw.choice([draw.integers(1, 300),
                                        draw.integers(1, total)]))
      calls[0] = 0

      def press(frame, event, arg, first=first, second=second):
        calls[0] += 1
        if calls[0] in (first, second):
          os.kill(os.getpid(), signal.SIGINT)
      sys.setprofile(press)
      try:
        runner.run(n)
      except KeyboardInterrupt:
        pass
      finally:
        sys.setprofile(None)
      done = runner.step_count
      assert done == runner.result.steps and done % 32 == 0
      want_v = vs[done - 1] if done else np.asarray(v0)
      np.testing.assert_array_equal(np.asarray(v.value), want_v)
      want_key = keys[done - 1] if done else jax.random.key_data(key0)
      np.testing.assert_array_equal(jax.random.key_data(rng.value), want_key)
      steps, neurons = np.nonzero(raster[:done])
      np.testing.assert_array_equal(runner.result.spikes.steps, steps)
      np.testing.assert_array_equal(runner.result.spikes.neurons, neurons)
      np.testing.assert_array_equal(runner.result.v.values,
                                    vs[:done][:, IDX])
  finally:
    signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_a_new_runner_on_restored_states_continues_the_step_count(
    tmp_path, capsys):
  """States restored with bs.restore_states, then a new Runner with
  start_step=meta['step']: its records carry on the global steps and times
  (and every-M traces keep their phase), equal to the straight run's."""
  v, step, rng = make_net(noise=True)
  runner = bs.Runner(step, {}, dt=0.1, chunk=32, progress=False,
                     checkpoint_every=2, checkpoint_dir=tmp_path,
                     checkpoint_states={"v": v, "rng": rng})
  runner.run(64)
  v2, step2, rng2 = make_net(noise=True)
  meta = bs.restore_states(tmp_path / "step_000000000064",
                           {"v": v2, "rng": rng2})
  again = bs.Runner(step2, monitors(v2), dt=0.1, chunk=32, progress=False,
                    start_step=meta["step"])
  assert "step 64, t = 6.4 ms" in repr(again)
  res = again.run(40)
  assert again.step_count == 104 and res.start == 64 and res.steps == 40
  assert "(from step 64)" in repr(res)
  _, raster, traces, means, _ = reference(104, noise=True)
  steps, neurons = np.nonzero(raster)
  np.testing.assert_array_equal(res.spikes.steps, steps[steps >= 64])
  np.testing.assert_array_equal(res.spikes.neurons, neurons[steps >= 64])
  np.testing.assert_allclose(res.spikes.times, steps[steps >= 64] * 0.1)
  np.testing.assert_array_equal(res.rate.steps, np.arange(64, 104))
  np.testing.assert_array_equal(res.rate.counts, raster[64:].sum(1))
  np.testing.assert_array_equal(res.v.steps, np.arange(64, 104))
  np.testing.assert_array_equal(res.v.values, traces[64:])
  np.testing.assert_array_equal(res.mean.steps, np.arange(69, 104, 7))
  np.testing.assert_array_equal(res.mean.values, means[69::7])
  # Runner.restore does the same itself, and says where the run continues.
  third = bs.Runner(step2, {}, dt=0.1, chunk=32, progress=False,
                    checkpoint_dir=tmp_path,
                    checkpoint_states={"v": v2, "rng": rng2})
  assert third.restore()["step"] == 64
  assert "continues at step 64 (t = 6.4 ms)" in capsys.readouterr().err
  with pytest.raises(ValueError, match="start_step must be a non-negative"):
    bs.Runner(step2, {}, start_step=-1)


@pytest.mark.slow
@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_records_that_fail_to_be_written_leave_a_consistent_run(
    tmp_path, monkeypatch, on_disk):
  """The disk fills up while the third chunk's records are written (after
  some monitors' were): none of that chunk is kept, and the States, step
  count and every monitor's records are those of the first two chunks."""
  from brainshard._simulation.monitors.records import Store
  v, step, rng = make_net(noise=True)
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False,
                     store=tmp_path if on_disk else None)
  append, calls = Store.append, []

  def append_until_full(self, name, field, value):
    calls.append(name)
    if runner.chunks_done == 2 and name == "v":
      raise OSError(28, "No space left on device")
    return append(self, name, field, value)
  monkeypatch.setattr(Store, "append", append_until_full)
  with pytest.raises(OSError, match="No space left"):
    runner.run(32 * 5)
  assert calls.count("spikes") == 2 * 3  # the third chunk's were appended
  assert runner.step_count == 64 and runner.result.steps == 64
  assert_matches_reference(runner.result, v, 64, noise=True, rng=rng)
  monkeypatch.setattr(Store, "append", append)
  res = runner.run(32 * 3)  # and the run goes on from there
  assert res.steps == 160
  assert_matches_reference(res, v, 160, noise=True, rng=rng)
# -- placement sticks; ahead-of-time compile (issue 21, item 2) --------------


def counter_net(mesh=None):
  """v (split over 'x' on a mesh), a lookup table and a step counter made
  from plain arrays (one device); the step and a list of its traces."""
  put = ((lambda x: jax.device_put(x, NamedSharding(mesh, P("x"))))
         if mesh is not None else (lambda x: x))
  v = bs.State(put(jnp.linspace(0.0, 0.9, 64)), name="v",
               spec=None if mesh is None else P("x"))
  table = bs.State(jnp.linspace(0.0, 0.2, 8), name="table")
  count = bs.State(jnp.zeros((), jnp.int32), name="count")
  traces = []

  def local():
    traces.append(1)
    count.value = count.value + 1
    x = v.value * 0.9 + table.value[count.value % 8]
    spikes = x > 1.0
    v.value = jnp.where(spikes, 0.0, x)
    return spikes

  step = local if mesh is None else bs.shard_map(
      local, mesh=mesh, in_specs=(), out_specs=P("x"))
  return v, table, count, step, traces


@pytest.mark.slow
def test_a_continued_run_compiles_and_traces_nothing(axis_type):
  """States made from plain arrays are placed by the first chunk and stay:
  the second run compiles nothing and runs no Python; numbers equal the
  unsharded run's."""
  mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
  v, table, count, step, traces = counter_net(mesh)
  runner = bs.Runner(step, {"s": bs.SpikeMonitor()}, chunk=16,
                     progress=False)
  with compile_log() as names:
    runner.run(16)  # one chunk
  assert names.count("jit(chunk16_local)") == 1
  for s in (table, count):
    assert s.sharding.mesh == mesh and s.sharding.spec in (P(), P(None))
  n_traces = len(traces)
  with compile_log() as names:
    res = runner.run(64)
  assert names == [] and len(traces) == n_traces
  v1, _, count1, step1, _ = counter_net()
  ref = bs.Runner(step1, {"s": bs.SpikeMonitor()}, chunk=80, progress=False)
  want = ref.run(80)
  np.testing.assert_array_equal(np.asarray(v.value), np.asarray(v1.value))
  assert int(count.value) == int(count1.value) == 80
  np.testing.assert_array_equal(res.s.steps, want.s.steps)
  np.testing.assert_array_equal(res.s.neurons, want.s.neurons)


@pytest.mark.slow
def test_the_step_python_runs_once_for_every_chunk_program():
  """The recorder's probe is the step's trace: both chunk programs (16
  and 8 steps) evaluate its jaxpr (their scans trace their bodies twice:
  5 traces before), still place the States as the step's shard_map says,
  and give the numbers of the unsharded run, whose chunk of 40 traces the
  step once. On the mesh the step is traced once more, as the first chunk
  places ``table`` and ``count`` (replicated over the mesh: another aval
  than on one device)."""
  mesh = jax.make_mesh((8,), ("x",))
  v, table, count, step, traces = counter_net(mesh)
  runner = bs.Runner(step, {"s": bs.SpikeMonitor()}, chunk=16,
                     progress=False)
  res = runner.run(40)
  assert len(traces) == 2
  assert table.sharding.mesh == mesh
  v1, _, _, step1, traces1 = counter_net()
  want = bs.Runner(step1, {"s": bs.SpikeMonitor()}, chunk=40,
                   progress=False).run(40)
  assert len(traces1) == 1
  np.testing.assert_array_equal(np.asarray(v.value), np.asarray(v1.value))
  np.testing.assert_array_equal(res.s.steps, want.s.steps)
  np.testing.assert_array_equal(res.s.neurons, want.s.neurons)
  table.value = jnp.linspace(0.0, 0.2, 16)  # a new shape: the step runs
  with pytest.warns(UserWarning, match="compiles again"):
    runner.run(16)
  assert len(traces) == 3 and int(count.value) == 56


def test_compile_ahead_of_time_then_the_run_compiles_nothing():
  mesh = jax.make_mesh((8,), ("x",))
  v, table, count, step, _ = counter_net(mesh)
  runner = bs.Runner(step, {"s": bs.SpikeMonitor()}, chunk=16,
                     progress=False)
  with compile_log() as names:
    seconds = runner.compile(40)  # 16, 16, 8: two programs
  assert sorted(n for n in names if "chunk" in n) == [
      "jit(chunk16_local)", "jit(chunk8_local)"]
  assert seconds > 0 and runner.step_count == 0 and int(count.value) == 0
  assert table.sharding.mesh == mesh  # placed on the way
  assert runner.compile(40) == 0.0
  with compile_log() as names:
    runner.run(40)
  assert not [n for n in names if "chunk" in n]
  assert int(count.value) == 40


def test_a_run_that_must_compile_again_warns_naming_the_state():
  v, table, count, step, _ = counter_net()
  runner = bs.Runner(step, {"s": bs.SpikeMonitor()}, chunk=16,
                     progress=False)
  runner.run(32)
  table.value = jnp.linspace(0.0, 0.2, 16)  # a new shape: must compile
  with pytest.warns(UserWarning, match=r"16-step chunk program compiles "
                    r"again.*State 'table' was float32\[8\].*now "
                    r"float32\[16\]"):
    with compile_log() as names:
      runner.run(32)
  assert "jit(chunk16_local)" in names


def test_a_duration_between_steps_and_a_bad_dt_are_errors():
  # 1000 ms at 1.5 ms a call would have run 1000.5 ms without a word
  v = bs.State(jnp.zeros(2), name='v_dur')

  def step():
    v.value = v.value + 1.0
    return v.value > 2

  runner = bs.Runner(step, {'s': bs.SpikeMonitor()}, dt=1.5, progress=False)
  with pytest.raises(ValueError, match=r"duration=1000.0\): not a whole "
                     r"number of steps of dt = 1.5 ms"):
    runner.run(duration=1000.0)
  runner.run(duration=3.0)
  assert runner.step_count == 2 and float(v.value[0]) == 2.0
  for dt in (0, -0.1, float('nan')):
    with pytest.raises(ValueError, match="dt must be a positive number"):
      bs.Runner(step, dt=dt)
