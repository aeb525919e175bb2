"""Find brainstate 0.5.4's test files: the installed wheel, else a cached one.

brainstate ships its tests inside its wheel (``brainstate/**/_*_test.py``).
:func:`find` looks in the installed package when its version is 0.5.4, then
in the cache folder; with ``download=True`` it fetches the wheel there with
``pip download`` and unpacks it (the only network use). ``None`` when none
can be had.

Example:
  >>> from benchmarks.brainstate_suite import locate
  >>> locate.VERSION
  '0.5.4'
"""

import importlib.metadata
import os
import subprocess
import sys
import zipfile

VERSION = "0.5.4"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "brainshard",
                     f"brainstate-{VERSION}")


def _installed():
  try:
    dist = importlib.metadata.distribution("brainstate")
  except importlib.metadata.PackageNotFoundError:
    return None
  if dist.version != VERSION:
    return None
  root = str(dist.locate_file("brainstate"))
  return root if os.path.isdir(root) else None


def _cached():
  root = os.path.join(CACHE, "brainstate")
  return root if os.path.isdir(root) else None


def _download(timeout=300):
  os.makedirs(CACHE, exist_ok=True)
  try:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                    "--only-binary=:all:", "-d", CACHE,
                    f"brainstate=={VERSION}"],
                   check=True, capture_output=True, timeout=timeout)
  except (subprocess.SubprocessError, OSError):
    return None
  wheels = [f for f in os.listdir(CACHE) if f.endswith(".whl")]
  if not wheels:
    return None
  with zipfile.ZipFile(os.path.join(CACHE, wheels[0])) as wheel:
    wheel.extractall(CACHE)
  return _cached()


def find(download=False):
  """The folder of brainstate 0.5.4's package (with its tests), or None."""
  return _installed() or _cached() or (_download() if download else None)
