"""What every example's command line shares: ``--devices N`` (on a CPU, N
faked devices, set before JAX starts its backends), outputs in the
repository's ``results/`` folder, and a missing optional package named
with the command that installs it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def add_devices(parser: argparse.ArgumentParser, default: int | None) -> None:
  """Adds ``--devices N``."""
  shown = "every device JAX has" if default is None else default
  parser.add_argument(
      "--devices", type=int, default=default, metavar="N",
      help="devices of the mesh; on a CPU the example fakes N devices itself "
           f"(no XLA_FLAGS needed; default: {shown})")


def fake_devices(n: int | None) -> None:
  """Asks JAX for ``n`` CPU devices (none if None). Possible only before
  JAX starts its backends, so a caller that already started JAX (a test, a
  notebook) keeps the devices it has."""
  import jax
  if n and jax.config.jax_platforms in (None, "", "cpu"):
    try:
      jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:  # JAX has started: its device count is fixed
      pass


def use_devices(n: int | None, prog: str) -> list:
  """The first ``n`` devices (all if None), faked first on a CPU."""
  import jax
  fake_devices(n)
  devices = jax.devices()
  n = len(devices) if n is None else n
  if n < 1 or n > len(devices):
    sys.exit(f"{prog}: --devices {n}, but JAX has {len(devices)} "
             f"{devices[0].platform} device(s)")
  return devices[:n]


def output_path(path: str | Path) -> Path:
  """Where an output file goes: a bare file name into ``results/``, any
  other path as given; its folder is made if needed."""
  path = Path(path)
  if path.parent == Path("."):
    path = RESULTS / path
  path.parent.mkdir(parents=True, exist_ok=True)
  return path


def require(module: str, pip: str, prog: str):
  """Imports ``module`` or exits saying what to install."""
  try:
    return importlib.import_module(module)
  except ImportError as err:
    sys.exit(f"{prog} needs {module} ({err}): pip install \"{pip}\"")


def pyplot(prog: str):
  """matplotlib's pyplot drawing to files (Agg), or None with a note."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print(f"{prog}: matplotlib is not installed, no plot saved "
          "(pip install \".[examples]\").")
    return None
  return plt


_IMPORTED = time.perf_counter()


def seconds_since_start() -> float:
  """Seconds since this process started (Linux: the kernel's start time,
  so Python's and JAX's imports count; elsewhere: since this module was
  imported). Ten-millisecond resolution.

  >>> 0 < seconds_since_start() < 1e6
  True
  """
  try:
    with open("/proc/self/stat") as f:
      ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
      up = float(f.read().split()[0])
    return up - ticks / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError, AttributeError):
    return time.perf_counter() - _IMPORTED
