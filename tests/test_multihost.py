"""Multi-process runs: 2 processes x 4 CPU devices on 127.0.0.1 (gloo).

The scenarios themselves live in tests/multihost_worker.py and check their
results inside every process; here we launch them and check that both
processes finished every scenario. The launcher itself is tested with plain
Python processes (no JAX), which start in milliseconds. bs.gather, which
multi-process runs need, is also checked here in one process.
"""

import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard.launch import LaunchError, launch

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "multihost_worker.py")
ENV = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_processes_run_every_scenario():
  results = launch([WORKER, "all"], 2, local_devices=4, timeout=100, env=ENV)
  scenarios = ["psum_step", "simulation", "for_loop_simulation",
               "process_local", "replicated_key", "submesh_tasks"]
  for r in results:
    assert r.returncode == 0
    for name in scenarios:
      assert f"OK {name}" in r.stdout, (r.process_id, r.stdout, r.stderr)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_failure_in_one_process_ends_the_run_with_its_error():
  # Process 1 raises while process 0 waits for it in a collective. Without
  # the launcher killing process 0, the run would hang until JAX's own
  # timeouts (minutes) and the launcher would report a timeout instead.
  with pytest.raises(LaunchError) as info:
    launch([WORKER, "fail"], 2, local_devices=4, timeout=40, env=ENV)
  message = str(info.value)
  assert message.startswith("process 1 of 2 exited with code 1"), message
  assert "ValueError: deliberate failure in process 1" in message
  assert "timed out" not in message
  p0, p1 = info.value.results
  assert p1.returncode == 1
  assert p0.returncode != 0  # killed (None) or failed: never hangs


def _py(code):
  return ["-c", code]


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_launcher_passes_rank_and_coordinator():
  code = ("import os; print(os.environ['BRAINSHARD_PROCESS_ID'], "
          "os.environ['BRAINSHARD_NUM_PROCESSES'], "
          "os.environ['BRAINSHARD_COORDINATOR'].startswith('127.0.0.1:'), "
          "os.environ['XLA_FLAGS'])")
  results = launch(_py(code), 3, local_devices=2, timeout=20)
  for i, r in enumerate(results):
    pid, n, local, flags = r.stdout.split()
    assert (pid, n, local) == (str(i), "3", "True")
    assert flags == "--xla_force_host_platform_device_count=2"


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_launcher_kills_the_others_when_one_fails():
  code = ("import os, sys, time\n"
          "if os.environ['BRAINSHARD_PROCESS_ID'] == '1':\n"
          "  sys.exit('process one gives up')\n"
          "time.sleep(60)\n")
  with pytest.raises(LaunchError) as info:
    launch(_py(code), 2, timeout=25, grace=0.1)
  p0, p1 = info.value.results
  assert p0.returncode is None  # killed, it never exited by itself
  assert p1.returncode == 1 and "process one gives up" in p1.stderr
  assert "process one gives up" in str(info.value)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_launcher_times_out_hanging_processes():
  with pytest.raises(LaunchError, match="timed out after 1 s"):
    launch(_py("import time; time.sleep(60)"), 2, timeout=1)


@pytest.mark.timeout(30)
def test_launcher_check_false_returns_results():
  results = launch(_py("import sys; sys.exit(3)"), 1, timeout=20,
                   check=False)
  assert [r.returncode for r in results] == [3]


def test_cli_reports_failure(capsys):
  from brainshard import launch as launch_mod
  code = launch_mod.main(["-n", "1", "--timeout", "20", "-c",
                          "import sys; print('hi'); sys.exit(2)"])
  out, err = capsys.readouterr()
  assert code == 1
  assert "[p0] hi" in out and "exited with code 2" in err


def test_init_distributed_is_a_no_op_in_a_single_process(monkeypatch):
  import brainshard as bs
  for var in ("BRAINSHARD_COORDINATOR", "SLURM_NTASKS",
              "OMPI_COMM_WORLD_SIZE"):
    monkeypatch.delenv(var, raising=False)
  hook = sys.excepthook
  assert bs.init_distributed() is False
  assert sys.excepthook is hook


# -- gather, in one process ------------------------------------------------------


@pytest.fixture
def mesh():
  return jax.make_mesh((8,), ("x",))


def test_gather_returns_host_values(mesh):
  s = bs.State(jnp.arange(8.0), "s", spec=P("x"))
  bs.place(s, mesh)
  got = bs.gather({"s": s, "raw": jnp.ones(2), "key": jax.random.key(1)})
  np.testing.assert_array_equal(got["key"],
                                jax.random.key_data(jax.random.key(1)))
  assert isinstance(got["s"], np.ndarray)
  np.testing.assert_array_equal(got["s"], np.arange(8.0))
  np.testing.assert_array_equal(got["raw"], np.ones(2))
