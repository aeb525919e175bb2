"""bs.Runner(record_to=path): records appended to a zarr group chunk by chunk
equal the in-memory records of the same run; a continued or resumed run
appends; a reader trusts only committed rows, so a run killed with SIGKILL
leaves a readable prefix of its records; memory stays flat."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import brainshard as bs

zarr = pytest.importorskip("zarr", minversion="3")

from brainshard._simulation.monitors.zarr_store import KEY, ZarrStore  # noqa: E402
import record_worker as worker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "record_worker.py")


def net():
  return worker.make_net(bs, jnp)


def monitors(v):
  return worker.monitors(bs, v)


_REFERENCE = {}


def memory_run(steps):
  """The in-memory records of ``steps`` steps of a fresh network (made
  once per length: each fresh network compiles its chunk programs)."""
  if steps not in _REFERENCE:
    v, step = net()
    _REFERENCE[steps] = bs.Runner(step, monitors(v), chunk=32,
                                  progress=False).run(steps)
  return _REFERENCE[steps]


def advanced(steps):
  """A fresh network advanced ``steps`` steps, recording nothing: the
  States a checkpoint of that step would restore."""
  v, step = net()
  if steps:
    bs.Runner(step, {}, chunk=32, progress=False).run(steps)
  return v, step


def assert_same(res, ref):
  assert (res.start, res.steps) == (ref.start, ref.steps)
  assert res.keys() == ref.keys()
  for name in ref.keys():
    for a, b in zip(res[name], ref[name]):
      if isinstance(b, np.ndarray):
        np.testing.assert_array_equal(np.asarray(a), b, err_msg=name)
        assert np.asarray(a).dtype == b.dtype, name
      else:
        assert a == b, name


@pytest.mark.slow
def test_disk_records_equal_memory_records(tmp_path):
  path = tmp_path / "run.zarr"
  v, step = net()
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False,
                     record_to=path)
  res = runner.run(150)
  ref = memory_run(150)
  assert len(ref.spikes) > 20 and ref.v.values.shape == (150, 3)
  assert_same(res, ref)                       # the live runner's result
  loaded = bs.load_records(path)
  assert_same(loaded, ref)                    # read back in a new Result
  assert not loaded.interrupted
  assert repr(loaded) == repr(ref)
  # A plain zarr reader sees the same arrays, with dimension names.
  group = zarr.open_group(path, mode="r")
  np.testing.assert_array_equal(group["spikes/steps"][:], ref.spikes.steps)
  assert group["v/values"].metadata.dimension_names == ("time", "neuron")
  assert group["spikes"].attrs["n"] == 64 and group["spikes"].attrs["dt"] == 1.0


@pytest.mark.slow
def test_chunks_are_appended_and_readable_as_the_run_goes(tmp_path):
  path = tmp_path / "run.zarr"
  v, step = net()
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False,
                     record_to=path)
  seen = []
  append = ZarrStore.commit

  def commit(self, steps, start=None):
    append(self, steps, start)
    seen.append(bs.load_records(path).steps)   # a reader during the run
  ZarrStore.commit = commit
  try:
    runner.run(100)
  finally:
    ZarrStore.commit = append
  assert seen[-4:] == [32, 64, 96, 100]
  runner.run(60)                              # continued: appended
  assert_same(bs.load_records(path), memory_run(160))


@pytest.mark.slow
def test_trace_of_a_dict_and_a_reset(tmp_path):
  path = tmp_path / "run.zarr"
  v, step = net()
  mons = {"both": bs.StateMonitor(lambda: {"v": v.value[:2],
                                          "n": (v.value > 0.5).sum()},
                                  every=3)}
  runner = bs.Runner(step, mons, chunk=16, progress=False, record_to=path)
  runner.run(20)
  runner.reset_records()
  res = runner.run(40)
  loaded = bs.load_records(path)
  assert (loaded.start, loaded.steps) == (20, 40)
  assert loaded.both.steps.tolist() == [s for s in range(20, 60)
                                        if (s + 1) % 3 == 0]
  np.testing.assert_array_equal(loaded.both.values["v"], res.both.values["v"])
  assert loaded.both.values["n"].dtype == res.both.values["n"].dtype


@pytest.mark.slow
def test_a_new_runner_continues_the_record(tmp_path, capsys):
  """A run continued in a new process (States restored, start_step set)
  appends after the records it keeps; from an earlier step, the later
  records are dropped first."""
  path = tmp_path / "run.zarr"
  v, step = advanced(0)
  bs.Runner(step, monitors(v), chunk=32, progress=False,
            record_to=path).run(96)
  v, step = advanced(96)
  bs.Runner(step, monitors(v), chunk=32, progress=False, record_to=path,
            start_step=96).run(64)
  assert_same(bs.load_records(path), memory_run(160))
  v, step = advanced(48)                      # a checkpoint of step 48
  bs.Runner(step, monitors(v), chunk=32, progress=False, record_to=path,
            start_step=48).run(112)
  assert "steps [48, 160) are dropped" in capsys.readouterr().err
  assert_same(bs.load_records(path), memory_run(160))
  with pytest.raises(ValueError, match="would leave a gap"):
    bs.Runner(step, monitors(v), progress=False, record_to=path,
              start_step=200).run(1)
  assert bs.load_records(path).steps == 160


@pytest.mark.slow
def test_restoring_a_checkpoint_rewinds_the_record(tmp_path):
  """A run killed after its checkpoint of step 128 and resumed from it in
  a new runner leaves one record, equal to the uninterrupted run's."""
  pytest.importorskip("orbax.checkpoint")
  path, ckpt = tmp_path / "run.zarr", tmp_path / "ckpt"
  v, step = net()
  bs.Runner(step, monitors(v), chunk=32, progress=False, record_to=path,
            checkpoint_every=2, checkpoint_dir=ckpt).run(160)
  v, step = net()                           # a new process, as it were
  again = bs.Runner(step, monitors(v), chunk=32, progress=False,
                    record_to=path, checkpoint_dir=ckpt)
  assert again.restore()["step"] == 128
  assert (again.result.start, again.result.steps) == (0, 128)
  again.run(64)
  assert_same(bs.load_records(path), memory_run(192))


def test_uncommitted_rows_are_not_records(tmp_path):
  """Rows appended after the last commit (a kill before the commit) are
  ignored by readers and cut off by the next writer."""
  path = str(tmp_path / "run.zarr")
  store = ZarrStore(path)
  store.begin({"s": {"kind": "spikes", "n": 4}}, dt=0.5, start=0, end=99)
  store.append("s", "steps", np.array([0, 2]))
  store.append("s", "neurons", np.array([1, 3], np.int32))
  store.commit(4)
  store.append("s", "steps", np.array([5, 6, 7]))   # then killed
  assert zarr.open_group(path)["s/steps"].shape == (5,)
  res = bs.load_records(path)
  assert (res.steps, res.s.steps.tolist()) == (4, [0, 2])
  assert res.interrupted and res.s.n == 4 and res.s.dt == 0.5
  ZarrStore(path)                                   # a writer reopens it
  assert zarr.open_group(path)["s/steps"].shape == (2,)


@pytest.mark.slow
def test_a_failed_chunk_leaves_nothing_on_disk(tmp_path, monkeypatch):
  path = tmp_path / "run.zarr"
  v, step = net()
  runner = bs.Runner(step, monitors(v), chunk=32, progress=False,
                     record_to=path)
  append = ZarrStore.append

  def append_until_full(self, name, field, value):
    if runner.chunks_done == 2 and name == "v":
      raise OSError(28, "No space left on device")
    return append(self, name, field, value)
  monkeypatch.setattr(ZarrStore, "append", append_until_full)
  with pytest.raises(OSError, match="No space left"):
    runner.run(32 * 5)
  assert zarr.open_group(path)["spikes/steps"].shape[0] == len(
      memory_run(64).spikes)
  monkeypatch.setattr(ZarrStore, "append", append)
  runner.run(32 * 3)
  assert_same(bs.load_records(path), memory_run(160))


@pytest.mark.slow
def test_bad_paths_and_mismatched_records(tmp_path):
  v, step = net()
  with pytest.raises(ValueError, match="not both"):
    bs.Runner(step, {}, record_to=tmp_path / "a.zarr", store=tmp_path)
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "notes.txt").write_text("mine")
  with pytest.raises(ValueError, match="holds something else"):
    bs.Runner(step, {}, record_to=tmp_path / "other")
  path = tmp_path / "run.zarr"
  bs.Runner(step, monitors(v), chunk=32, progress=False,
            record_to=path).run(32)
  with pytest.raises(ValueError, match="holds the records of monitors"):
    bs.Runner(step, {"spikes": bs.SpikeMonitor()}, record_to=path)
  with pytest.raises(ValueError, match="recorded with dt=1.0"):
    bs.Runner(step, monitors(v), record_to=path, dt=0.1)
  assert bs.load_records(path).steps == 32    # left as it was
  with pytest.raises(FileNotFoundError):
    bs.load_records(tmp_path / "missing.zarr")


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
  env["JAX_PLATFORMS"] = "cpu"
  return env


def _committed_steps(path):
  try:
    return zarr.open_group(path, mode="r").attrs[KEY]["steps"]
  except Exception:  # not made yet
    return 0


@pytest.mark.slow
def test_a_run_killed_with_sigkill_leaves_a_readable_prefix(tmp_path):
  """A child records to disk; after 8 chunks the test reads the record while
  it runs, kills the child with SIGKILL wherever it is, reads it again (a
  prefix of the uninterrupted run's records) and continues it."""
  path = str(tmp_path / "run.zarr")
  child = subprocess.Popen([sys.executable, WORKER, "forever", path],
                           env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 60
    while _committed_steps(path) < 32 * 8:
      assert child.poll() is None, child.communicate()[1][-3000:]
      assert time.monotonic() < deadline, "the child recorded nothing"
      time.sleep(0.02)
    during = bs.load_records(path)          # read while the run goes on
    os.kill(child.pid, signal.SIGKILL)
  finally:
    child.kill()
    child.wait()
  assert child.returncode == -signal.SIGKILL
  after = bs.load_records(path)
  assert after.interrupted and after.steps >= during.steps >= 32 * 8
  assert after.steps % 32 == 0               # whole chunks only
  for res in (during, after):
    assert_same(res, memory_run(res.steps))
  v, step = advanced(after.steps)            # resumed: appends to it
  bs.Runner(step, monitors(v), chunk=32, progress=False, record_to=path,
            start_step=after.steps).run(64)
  assert_same(bs.load_records(path), memory_run(after.steps + 64))


@pytest.mark.slow
def test_memory_stays_flat_while_recording_to_disk(tmp_path):
  """200 chunks of 2 MiB of records each go to disk: the child's peak
  resident memory over them grows by far less than what they hold."""
  r = subprocess.run([sys.executable, WORKER, "memory",
                      str(tmp_path / "run.zarr")], env=_env(),
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  words = r.stdout.split()
  rss, peak, recorded = float(words[1]), float(words[3]), int(words[5])
  assert recorded / 2**20 == 400
  assert peak - rss < 48, r.stdout   # MiB, against 400 MiB kept in memory
