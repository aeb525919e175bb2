"""bs.save_states / bs.restore_states: sharded checkpoints on orbax.

Fresh processes (tests/checkpoint_worker.py) cover what one process cannot:
another device count, resuming after the process that saved is gone, a save
killed half-way, and a multi-process save.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard._scaleout.checkpoint import store
from _util import mesh as cached_mesh

import checkpoint_worker as worker

pytest.importorskip("orbax.checkpoint")

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "checkpoint_worker.py")


def _env(devices):
  env = dict(os.environ)
  env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  env["JAX_PLATFORMS"] = "cpu"
  return env


def _worker(*args, devices=8, timeout=120):
  r = subprocess.run([sys.executable, WORKER, *map(str, args)],
                     env=_env(devices), capture_output=True, text=True,
                     timeout=timeout)
  assert r.returncode == 0, r.stderr[-4000:]
  return r


def mesh(n, names=("x",)):
  """A mesh over the first devices (n: a size, or a shape with ``names``)."""
  return cached_mesh((n,) if len(names) == 1 else n, names)


def host(state):
  """The State's leaves as NumPy (keys as their data), to compare bits."""
  return [np.asarray(jax.random.key_data(x)) if jnp.issubdtype(
      x.dtype, jax.dtypes.prng_key) else np.asarray(x)
          for x in jax.tree.leaves(state.value)]


def assert_same(state, expected):
  got = host(state)
  assert len(got) == len(expected)
  for g, e in zip(got, expected):
    assert g.dtype == e.dtype and g.shape == e.shape
    np.testing.assert_array_equal(g, e)


def make_states(m8):
  """Pytree-valued, sharded, integer, bool and key States on mesh ``m8``."""
  put = lambda x, spec: jax.device_put(x, NamedSharding(m8, spec))  # noqa
  return {
      "w": bs.ParamState({"a": put(jnp.arange(128.0).reshape(16, 8), P("x")),
                          "b": (put(jnp.arange(8, dtype=jnp.int32), P()),
                                put(jnp.arange(16) % 3 == 0, P("x")))},
                         "w", spec=P("x")),
      "v": bs.State(put(jnp.linspace(0, 1, 64).astype(jnp.bfloat16), P("x")),
                    "v", spec=P("x")),
      "rng": bs.RandomState(3, "rng"),
  }


def clobber(states):
  """Other values of the same shapes, dtypes and shardings."""
  for s in states.values():
    s.value = jax.tree.map(
        lambda x: jax.random.fold_in(x, 1) if jnp.issubdtype(
            x.dtype, jax.dtypes.prng_key) else jnp.zeros_like(x), s.value)


# ----------------------------------------------------------------------------
# Round trips and other meshes


@pytest.mark.slow
def test_round_trip_keeps_values_and_shardings(tmp_path):
  m8 = mesh(8)
  states = make_states(m8)
  before = {k: host(s) for k, s in states.items()}
  shardings = {k: s.sharding for k, s in states.items()}
  handle = bs.save_states(tmp_path / "c", states, metadata={"step": 5})
  assert handle.done()
  clobber(states)
  assert bs.restore_states(tmp_path / "c", states) == {"step": 5}
  for k, s in states.items():
    assert_same(s, before[k])
    assert s.sharding == shardings[k]
  assert sorted(os.listdir(tmp_path / "c")) == ["CURRENT", "v00000001"]


@pytest.mark.slow
def test_restore_eight_devices_onto_one_and_onto_a_2d_mesh(tmp_path):
  states = make_states(mesh(8))
  before = {k: host(s) for k, s in states.items()}
  bs.save_states(tmp_path / "c", states)
  # Onto 1 device: the States' current values live on a mesh of 1.
  m1 = mesh(1)
  one = make_states(m1)
  clobber(one)
  bs.restore_states(tmp_path / "c", one)
  for k, s in one.items():
    assert_same(s, before[k])
    for leaf in jax.tree.leaves(s.value):
      if k == "rng":  # never placed: stays unplaced
        assert not leaf.committed
      else:
        assert leaf.sharding.mesh == m1 and len(leaf.devices()) == 1
  # Onto a 2 x 4 mesh from the States' specs (values unplaced).
  m24 = mesh((2, 4), ("a", "x"))
  fresh = {k: type(s)(jax.tree.map(np.asarray, s.value), k, spec=s.spec)
           if k != "rng" else bs.RandomState(0, "rng")
           for k, s in states.items()}
  with jax.set_mesh(m24):
    bs.restore_states(tmp_path / "c", fresh)
    created_here = bs.RandomState(0).value.sharding
  for k, s in fresh.items():
    assert_same(s, before[k])
  assert fresh["v"].sharding == NamedSharding(m24, P("x"))
  assert fresh["w"].value["a"].addressable_shards[0].data.shape == (4, 8)
  # No spec: what a State created under this mesh would hold.
  assert fresh["rng"].value.sharding == created_here


def test_restore_onto_logical_axes_on_the_current_mesh(tmp_path):
  w = bs.ParamState(jnp.arange(32.0).reshape(8, 4), "w")
  bs.save_states(tmp_path / "c", [w])
  m8 = mesh(8)
  w2 = bs.ParamState(jnp.zeros((8, 4)), "w", axes=(None, "hidden"))
  before = w2.value
  # 4 columns do not split over 8 devices: an error, and nothing restored.
  with jax.set_mesh(m8), bs.axis_rules({"hidden": "x"}):
    with pytest.raises(ValueError, match="'w' cannot take its spec.*"
                       "not divisible by the 8 shards"):
      bs.restore_states(tmp_path / "c", [w2])
  assert w2.value is before
  m4 = mesh(4)
  with jax.set_mesh(m4), bs.axis_rules({"hidden": "x"}):
    bs.restore_states(tmp_path / "c", [w2])
  np.testing.assert_array_equal(np.asarray(w2.value), np.asarray(w.value))
  assert w2.sharding == NamedSharding(m4, P(None, "x"))


def test_restore_one_device_onto_eight(tmp_path):
  v = bs.State(jnp.arange(32.0).reshape(8, 4), "v")  # unplaced
  k = bs.RandomState(jax.random.key(5, impl="rbg"), "k")
  bs.save_states(tmp_path / "c", [v, k])
  expected = [host(v), host(k)]
  m8 = mesh(8)
  v8 = bs.State(jax.device_put(jnp.zeros((8, 4)), NamedSharding(m8, P("x"))),
                "v")
  k8 = bs.RandomState(jax.device_put(jax.random.key(0, impl="rbg"),
                                     NamedSharding(m8, P())), "k")
  bs.restore_states(tmp_path / "c", [v8, k8])
  assert_same(v8, expected[0])
  assert_same(k8, expected[1])
  assert v8.sharding == NamedSharding(m8, P("x"))
  assert [s.data.shape for s in v8.value.addressable_shards] == [(1, 4)] * 8
  assert str(jax.random.key_impl(k8.value)) == "rbg"
  assert k8.sharding == NamedSharding(m8, P())


def test_restore_reads_each_shard_never_the_whole_array(tmp_path, monkeypatch):
  m8 = mesh(8)
  v = bs.State(jax.device_put(jnp.arange(64.0).reshape(16, 4),
                              NamedSharding(m8, P("x"))), "v")
  bs.save_states(tmp_path / "c", [v])
  put = []
  device_put = jax.device_put
  def spy(x, *args, **kwargs):
    put.append(np.shape(x))
    return device_put(x, *args, **kwargs)
  monkeypatch.setattr(jax, "device_put", spy)
  bs.restore_states(tmp_path / "c", [v])
  assert put == [(2, 4)] * 8  # one shard per device, read on its own


def test_unplaced_state_restores_unplaced_and_runs_with_placed_ones(tmp_path):
  m8 = mesh(8)
  w = bs.State(jax.device_put(jnp.ones(8), NamedSharding(m8, P("x"))), "w")
  b = bs.State(jnp.full(8, 2.0), "b")
  bs.save_states(tmp_path / "c", [w, b])
  b.value = jnp.zeros(8)
  bs.restore_states(tmp_path / "c", [w, b])
  assert not b.value.committed
  out = bs.jit(lambda: w.value + b.value)()  # would fail if pinned to dev 0
  np.testing.assert_array_equal(np.asarray(out), np.full(8, 3.0))


@pytest.mark.slow
def test_one_device_process_restores_what_eight_devices_saved(tmp_path):
  states, run = worker.network(bs, jax, mesh(8))
  bs.place(list(states.values()), mesh(8))
  run(5)
  bs.save_states(tmp_path / "c", states, metadata={"step": 5})
  _worker("one_device", tmp_path / "c", tmp_path / "out.npz", devices=1)
  got = np.load(tmp_path / "out.npz")
  assert got["step"] == 5
  for name, value in worker.values(bs, states).items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)


# ----------------------------------------------------------------------------
# Resume


@pytest.mark.slow
def test_resume_in_a_fresh_process_is_bit_identical(tmp_path):
  t = worker.STEPS
  m8 = mesh(8)
  ref, run_ref = worker.network(bs, jax, m8)
  bs.place(list(ref.values()), m8)
  run_ref(t)
  run_ref(t)
  states, run = worker.network(bs, jax, m8)
  bs.place(list(states.values()), m8)
  run(t)
  bs.save_states(tmp_path / "c", states)
  _worker("resume", tmp_path / "c", tmp_path / "out.npz", t)
  got = np.load(tmp_path / "out.npz")
  want = worker.values(bs, ref)
  assert any(np.any(want[k] != worker.values(bs, states)[k]) for k in want)
  assert sorted(got.files) == sorted(want)
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.slow
def test_random_state_round_trip_gives_the_same_next_draws(tmp_path):
  rng = bs.RandomState(11, "rng")
  rng.normal(size=3)
  default = bs.random.default_state()
  bs.random.seed(4)
  bs.save_states(tmp_path / "c", {"rng": rng, "default": default})
  a, d = rng.normal(size=5), bs.random.uniform(size=5)
  rng.normal(size=2), bs.random.uniform(size=2)
  bs.restore_states(tmp_path / "c", {"rng": rng, "default": default})
  np.testing.assert_array_equal(rng.normal(size=5), a)
  np.testing.assert_array_equal(bs.random.uniform(size=5), d)


# ----------------------------------------------------------------------------
# Asynchronous saves


def test_async_save_captures_values_at_the_call(tmp_path):
  m8 = mesh(8)
  v = bs.State(jax.device_put(jnp.arange(4096.0), NamedSharding(m8, P("x"))),
               "v")
  step = bs.jit(lambda: setattr(v, "value", v.value + 1.0))  # donates v
  before = host(v)
  handle = bs.save_states(tmp_path / "c", [v], block=False)
  for _ in range(3):
    step()
  handle.wait()
  assert handle.done()
  after = host(v)
  bs.restore_states(tmp_path / "c", [v])
  assert_same(v, before)
  np.testing.assert_array_equal(after[0], before[0] + 3)


def test_restore_waits_for_an_async_save_in_flight(tmp_path):
  v = bs.State(jnp.arange(8.0), "v")
  bs.save_states(tmp_path / "c", [v], block=False)  # no wait()
  v.value = jnp.zeros(8)
  bs.restore_states(tmp_path / "c", [v])
  np.testing.assert_array_equal(np.asarray(v.value), np.arange(8.0))


# ----------------------------------------------------------------------------
# Overwriting and interrupted saves


def test_overwrite(tmp_path):
  v = bs.State(jnp.arange(4.0), "v")
  path = tmp_path / "c"
  bs.save_states(path, [v], metadata={"n": 1})
  v.value = v.value + 10
  with pytest.raises(FileExistsError, match="overwrite=True"):
    bs.save_states(path, [v])
  assert bs.restore_states(path, [v]) == {"n": 1}
  np.testing.assert_array_equal(np.asarray(v.value), np.arange(4.0))
  v.value = v.value + 10
  bs.save_states(path, [v], overwrite=True, metadata={"n": 2})
  assert sorted(os.listdir(path)) == ["CURRENT", "v00000002"]
  v.value = jnp.zeros(4)
  assert bs.restore_states(path, [v]) == {"n": 2}
  np.testing.assert_array_equal(np.asarray(v.value), np.arange(4.0) + 10)
  (tmp_path / "file").write_text("not a checkpoint")
  with pytest.raises(FileExistsError, match="not a checkpoint directory"):
    bs.save_states(tmp_path / "file", [v], overwrite=True)
  with pytest.raises(FileExistsError):
    bs.save_states(tmp_path / "file", [v])


@pytest.mark.slow
@pytest.mark.parametrize("where", ["writing", "pointer", "replace"])
def test_killed_save_leaves_the_previous_checkpoint(tmp_path, where):
  path = tmp_path / "c"
  x = bs.State(jnp.ones((256, 1024)), "x")
  bs.save_states(path, [x], metadata={"good": True})
  p = subprocess.Popen([sys.executable, WORKER, "slow_save", str(path), where],
                       env=_env(1), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
  try:
    line = p.stdout.readline()
    assert line.strip() == "READY", line + p.stderr.read()
    new = [e for e in os.listdir(path) if e.startswith("v00000002")]
    assert new, os.listdir(path)  # the new version was being written
    if where == "replace":  # killed as the new pointer file replaces CURRENT
      assert any(e.startswith(".CURRENT.tmp") for e in os.listdir(path))
  finally:
    p.kill()
    p.wait()
    p.stdout.close()
    p.stderr.close()
  x.value = jnp.zeros((256, 1024))
  assert bs.restore_states(path, [x]) == {"good": True}
  np.testing.assert_array_equal(np.asarray(x.value), np.ones((256, 1024)))
  # The next save cleans up what the killed one left.
  bs.save_states(path, [x], overwrite=True)
  assert sorted(os.listdir(path)) == ["CURRENT", "v00000003"]


def test_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
  path = tmp_path / "c"
  x = bs.State(jnp.arange(6.0), "x")
  bs.save_states(path, [x], metadata={"good": True})
  handler = store.orbax().PyTreeCheckpointHandler

  async def disk_full(self, *args, **kwargs):
    raise OSError(28, "No space left on device")

  with monkeypatch.context() as m:
    m.setattr(handler, "async_save", disk_full)
    with pytest.raises(OSError, match="No space left"):
      bs.save_states(path, {"x": bs.State(jnp.zeros(6))}, overwrite=True)
  assert bs.restore_states(path, [x]) == {"good": True}
  np.testing.assert_array_equal(np.asarray(x.value), np.arange(6.0))
  bs.save_states(path, [x], overwrite=True, metadata={"good": 2})
  assert bs.restore_states(path, [x]) == {"good": 2}


@pytest.mark.slow
def test_async_save_at_the_end_of_a_script(tmp_path):
  # The last line of a script starts a background save and the interpreter
  # exits. Before 3.12 the save is finished first; from 3.12 on Python
  # refuses the threads orbax needs at exit, so the save is reported as
  # failed with what to do, the exit status is 1, and the previous
  # checkpoint stays current.
  script = (
      "import jax.numpy as jnp, brainshard as bs, sys\n"
      "x = bs.State(jnp.arange(5.0), 'x')\n"
      "bs.save_states(sys.argv[1], [x])\n"
      "x.value = x.value * 3\n"
      "bs.save_states(sys.argv[1], [x], block=False, overwrite=True)\n")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
  done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "c")],
                        env=env, capture_output=True, text=True, timeout=120)
  assert done.returncode == (0 if sys.version_info < (3, 12) else 1), \
      done.stderr
  x = bs.State(jnp.zeros(5), "x")
  bs.restore_states(tmp_path / "c", [x])
  if sys.version_info < (3, 12):
    assert "failed" not in done.stderr, done.stderr
    np.testing.assert_array_equal(np.asarray(x.value), np.arange(5.0) * 3)
  else:
    assert "call handle.wait()" in done.stderr, done.stderr
    np.testing.assert_array_equal(np.asarray(x.value), np.arange(5.0))


def test_unwaited_failed_async_save_is_never_silent(tmp_path, monkeypatch):
  # A background save that fails (here: at the commit) warns at once, and
  # the next save or restore of the path raises its error: nothing is lost
  # without the user hearing of it, and the previous checkpoint stays.
  path = tmp_path / "c"
  x = bs.State(jnp.arange(6.0), "x")
  bs.save_states(path, [x], metadata={"good": 1})

  def disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device")

  with monkeypatch.context() as m:
    m.setattr(store, "_commit", disk_full)
    with pytest.warns(RuntimeWarning, match="asynchronous save .* failed"):
      handle = bs.save_states(path, [x], block=False, overwrite=True)
      handle._thread.join()
  assert "failed: OSError" in repr(handle)
  with pytest.raises(OSError, match="No space left"):
    bs.restore_states(path, [x])  # the failure is reported here, once
  assert bs.restore_states(path, [x]) == {"good": 1}
  bs.save_states(path, [x], overwrite=True, metadata={"good": 2})
  assert bs.restore_states(path, [x]) == {"good": 2}


def _failing_async_save(path, x):
  """An asynchronous save of ``x`` to ``path`` that fails at its commit
  (the disk is full); returns once it has failed, unwaited."""
  def disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device")
  with pytest.MonkeyPatch.context() as m:
    m.setattr(store, "_commit", disk_full)
    with pytest.warns(RuntimeWarning, match="asynchronous save .* failed"):
      handle = bs.save_states(path, [x], block=False, overwrite=True)
      handle._thread.join()


def test_unwaited_failed_async_save_raises_at_the_next_save_of_any_path(
    tmp_path):
  # A run saving each checkpoint to a new path still hears of a failure:
  # the next save or restore, whatever its path, raises it and does nothing.
  x = bs.State(jnp.arange(6.0), "x")
  bs.save_states(tmp_path / "a", [x], metadata={"good": 1})
  _failing_async_save(tmp_path / "a", x)
  with pytest.raises(OSError, match="No space left") as e:
    bs.save_states(tmp_path / "b", [x], metadata={"b": 1})
  assert any(str(tmp_path / "a") in note and "did nothing" in note
             for note in e.value.__notes__)
  assert not (tmp_path / "b").exists()
  bs.save_states(tmp_path / "b", [x], metadata={"b": 1})  # reported once
  _failing_async_save(tmp_path / "a", x)
  x.value = jnp.zeros(6)
  with pytest.raises(OSError, match="No space left"):
    bs.restore_states(tmp_path / "b", [x])
  np.testing.assert_array_equal(np.asarray(x.value), np.zeros(6))
  assert bs.restore_states(tmp_path / "b", [x]) == {"b": 1}
  assert bs.restore_states(tmp_path / "a", [x]) == {"good": 1}
  np.testing.assert_array_equal(np.asarray(x.value), np.arange(6.0))


@pytest.mark.slow  # a fresh process: about 5 s
def test_unwaited_failed_async_save_is_reported_at_exit(tmp_path):
  # The script ends without waiting for a save that fails: the interpreter
  # says so on its way out, the exit status says it failed, and the
  # previous checkpoint stays current.
  script = (
      "import sys, jax.numpy as jnp, brainshard as bs\n"
      "from brainshard._scaleout.checkpoint import store\n"
      "x = bs.State(jnp.arange(5.0), 'x')\n"
      "bs.save_states(sys.argv[1], [x])\n"
      "def disk_full(*args, **kwargs):\n"
      "  raise OSError(28, 'No space left on device')\n"
      "store._commit = disk_full\n"
      "x.value = x.value * 3\n"
      "bs.save_states(sys.argv[1], [x], block=False, overwrite=True)\n")
  done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "c")],
                        env=_env(1), capture_output=True, text=True,
                        timeout=120)
  assert done.returncode == 1, done.stderr
  assert ("asynchronous save of " + repr(str(tmp_path / "c"))
          + " (v00000002) failed and was never waited for: "
          in done.stderr), done.stderr
  if sys.version_info < (3, 12):
    assert "No space left on device" in done.stderr, done.stderr
  else:  # the save fails earlier: no threads can start at exit
    assert "call handle.wait()" in done.stderr, done.stderr
  x = bs.State(jnp.zeros(5), "x")
  bs.restore_states(tmp_path / "c", [x])
  np.testing.assert_array_equal(np.asarray(x.value), np.arange(5.0))


def test_names_that_look_like_paths_stay_apart(tmp_path):
  full = lambda x: bs.State(jnp.full(2, x))  # noqa: E731
  states = {"a/b": full(1.0), "a.b": full(2.0), "a.1": full(5.0),
            "a": bs.State([jnp.full(2, 3.0), jnp.full(2, 4.0)]),
            "é x": full(6.0)}
  before = {k: host(s) for k, s in states.items()}
  bs.save_states(tmp_path / "c", states)
  clobber(states)
  bs.restore_states(tmp_path / "c", states)
  for k, s in states.items():
    assert_same(s, before[k])


# ----------------------------------------------------------------------------
# Errors: each names the State and changes nothing


@pytest.fixture
def saved(tmp_path):
  path = tmp_path / "c"
  states = {"v": bs.State(jnp.arange(4.0), "v"),
            "p": bs.State({"a": jnp.zeros((2, 3)), "b": jnp.ones(2)}, "p")}
  bs.save_states(path, states)
  return path


def _unchanged(states, fn):
  values = {k: s.value for k, s in states.items()}
  fn()
  for k, s in states.items():
    assert s.value is values[k], k


@pytest.mark.parametrize("case, match", [
    ("shape", r"'v': saved as float32\[4\], but the State now holds "
              r"float32\[5\]"),
    ("dtype", r"'v': saved as float32\[4\], but the State now holds "
              r"int32\[4\]"),
    ("structure", r"'p': saved with pytree structure .*'a'.*'b'.* but the "
                  r"State now holds .*'a'.*'c'"),
    ("missing", r"'q' \(State 'q'\) is not in the checkpoint, which holds "
                r"\['p', 'v'\]"),
    ("extra", r"also holds \['p'\], which were not asked for"),
])
def test_mismatch_raises_naming_the_state_and_changes_nothing(saved, case,
                                                              match):
  ok = bs.State(jnp.full(4, 7.0), "v")  # fits: must not be restored either
  states = {
      "shape": {"p": bs.State({"a": jnp.zeros((2, 3)), "b": jnp.ones(2)}),
                "v": bs.State(jnp.zeros(5))},
      "dtype": {"p": bs.State({"a": jnp.zeros((2, 3)), "b": jnp.ones(2)}),
                "v": bs.State(jnp.zeros(4, jnp.int32))},
      "structure": {"v": ok, "p": bs.State({"a": jnp.zeros((2, 3)),
                                            "c": jnp.ones(2)})},
      "missing": {"v": ok, "q": bs.State(jnp.zeros(1), "q"),
                  "p": bs.State({"a": jnp.zeros((2, 3)), "b": jnp.ones(2)})},
      "extra": {"v": ok},
  }[case]
  def restore():
    with pytest.raises(ValueError, match=match) as info:
      bs.restore_states(saved, states)
    assert "no State was changed" in str(info.value)
  _unchanged(states, restore)


def test_strict_false_ignores_saved_states_not_asked_for(saved):
  v = bs.State(jnp.zeros(4), "v")
  bs.restore_states(saved, [v], strict=False)
  np.testing.assert_array_equal(np.asarray(v.value), np.arange(4.0))


def test_bad_states_arguments(tmp_path):
  named = bs.State(jnp.zeros(2), "a")
  with pytest.raises(ValueError, match="has no name.*pass a dict"):
    bs.save_states(tmp_path / "c", [named, bs.State(jnp.zeros(2))])
  with pytest.raises(ValueError, match="two States are named 'a'"):
    bs.save_states(tmp_path / "c", [named, bs.State(jnp.ones(2), "a")])
  with pytest.raises(ValueError, match="non-empty strings"):
    bs.save_states(tmp_path / "c", {"": named})
  with pytest.raises(TypeError,
                     match=r"states\['a'\] must be a State; got ndarray"):
    bs.save_states(tmp_path / "c", {"a": np.zeros(2)})
  with pytest.raises(ValueError, match="metadata must be JSON-able"):
    bs.save_states(tmp_path / "c", [named], metadata={"f": object()})
  assert not (tmp_path / "c").exists()
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    bs.restore_states(tmp_path / "c", [named])
  (tmp_path / "c").mkdir()
  with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
    bs.restore_states(tmp_path / "c", [named])


def test_inside_a_transform_is_an_error(tmp_path):
  v = bs.State(jnp.zeros(2), "v")

  @bs.jit
  def f():
    bs.save_states(tmp_path / "c", [v])

  with pytest.raises(bs.StateTraceError, match="outside every transform"):
    f()
  assert not (tmp_path / "c").exists()


# ----------------------------------------------------------------------------
# Several processes


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_processes_save_and_one_process_restores(tmp_path):
  from brainshard.launch import launch
  path = tmp_path / "c"
  env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get(
      "PYTHONPATH", "")}
  results = launch([WORKER, "multihost_save", str(path)], 2, local_devices=4,
                   timeout=200, env=env)
  assert all("OK multihost_save" in r.stdout for r in results)
  _worker("multihost_restore", path, tmp_path / "out.npz")
  got = np.load(tmp_path / "out.npz")
  want = np.load(str(path) + ".expected.npz")
  assert got["step"] == worker.STEPS
  for name in want.files:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)
