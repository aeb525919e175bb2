"""Fakes 8 CPU devices for every test and doctest, before JAX starts, and
marks the slow docstring examples ``slow``."""

import importlib.util
import os
import shutil
import tempfile

import pytest

# Never the user's own compilation cache (a test of it turns it on in a child
# process of its own), but one of the run's: a program that one test compiled
# (the same network on the same mesh) is loaded by the next, in any worker or
# child process. Counting tests switch it off around what they count
# (tests/_util.py, count_compiles): a hit fires no compile event.
os.environ.setdefault("BRAINSHARD_COMPILATION_CACHE", "0")
_RUN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _RUN_CACHE = tempfile.mkdtemp(prefix="brainshard-tests-jax-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _RUN_CACHE  # workers inherit it
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")


def pytest_unconfigure(config):
  if _RUN_CACHE is not None:  # the process that made it (xdist's controller)
    shutil.rmtree(_RUN_CACHE, ignore_errors=True)

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()


# The brainstate example imports brainstate at the top (it is the peer the
# migration guide ports from); the test extra installs it, a bare JAX
# machine may not: there its docstrings are not collected (the tests that
# run it skip with importorskip).
collect_ignore = ([] if importlib.util.find_spec("brainstate") else
                  ["examples/ei_brainstate.py"])
# The native delivery kernel's numba side imports numba at the top (the
# `native` extra); without it the XLA kernel runs and the module is unused.
if not importlib.util.find_spec("numba"):
  collect_ignore.append("brainshard/_models/delivery/native_loop.py")


# Docstring examples that build and run a network or draw large samples
# (each over ~0.8 s on 2 quiet cores): with the slow tests, out of the quick
# tier (-m "not slow"); the full suite runs them.
SLOW_DOCTESTS = frozenset({
    "benchmarks.bench_brian2",
    "benchmarks.bench_scale",
    "brainshard._models.connectivity.connect",
    "brainshard._models.connectivity.connect.synapses",
    "brainshard._models.connectivity.counter",
    "brainshard._models.delivery.counts",
    "brainshard._models.delivery.push",
    "brainshard._models.connectivity.parameters",
    "brainshard._models.delivery.events",
    "brainshard._models.delivery.delivery",
    "brainshard._scaleout.place.sharded_init",
    "brainshard._simulation.random.discrete.multinomial",
    "brainshard._simulation.random.discrete.negative_binomial",
    "brainshard._simulation.random.samplers.beta",
    "brainshard._simulation.random.samplers.chisquare",
    "brainshard._simulation.random.samplers.dirichlet",
    "brainshard._simulation.random.samplers.gamma",
    "brainshard._simulation.random.samplers.standard_gamma",
    "brainshard._simulation.random.samplers.standard_t",
    "brainshard._simulation.random.samplers.truncated_normal",
    "brainshard._simulation.runner.runner.Runner",
    "brainshard._simulation.monitors.zarr_store.load_records",
    "brainshard.models",
    "brainshard.random",
    "examples.brunel.model",
})


# Docstring examples that write zarr (the record extra): skipped without it.
NEEDS_ZARR = "brainshard._simulation.monitors.zarr_store"
_NO_ZARR = pytest.mark.skip(reason="needs zarr >= 3 (brainshard[record])")


def pytest_collection_modifyitems(config, items):
  has_zarr = importlib.util.find_spec("zarr") is not None
  for item in items:
    if type(item).__name__ != "DoctestItem":
      continue
    if item.name in SLOW_DOCTESTS:
      item.add_marker(pytest.mark.slow)
    if not has_zarr and item.name.startswith(NEEDS_ZARR):
      item.add_marker(_NO_ZARR)
