"""A process's resident memory, from the kernel's own accounting.

The peak is ``VmHWM`` of ``/proc/self/status``, never ``getrusage``'s
``ru_maxrss``: that one survives ``exec``, so a child started by a larger
process reports its parent's peak when it is higher (the microcircuit
launched from pytest printed 801 MB against a true ~620 MiB). A child
process reads its own figure before it exits and prints it; its parent
never reads ``RUSAGE_CHILDREN`` for memory.

  >>> 0 < rss_mib() <= peak_rss_mib()
  True
"""

from __future__ import annotations

import resource
import sys

_STATUS = "/proc/self/status"


def _status_mib(field: str) -> float | None:
  """``field`` of /proc/self/status in MiB (the kernel writes KiB); None
  where there is no /proc (not Linux)."""
  try:
    with open(_STATUS) as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) / 1024
  except OSError:
    return None
  raise RuntimeError(f"no {field} in {_STATUS}")


def peak_rss_mib() -> float:
  """This process's peak resident memory (MiB): ``VmHWM``. Without /proc,
  ``ru_maxrss`` (KiB on Linux, bytes on macOS), which may be a parent's."""
  peak = _status_mib("VmHWM")
  if peak is not None:
    return peak
  maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def rss_mib() -> float:
  """This process's resident memory now (MiB): ``VmRSS`` (Linux only)."""
  now = _status_mib("VmRSS")
  if now is None:
    raise OSError(f"no {_STATUS}: the resident memory is read on Linux")
  return now


def reset_peak() -> bool:
  """Resets the kernel's peak mark to the resident memory now (Linux >= 4.0),
  so that the peak read later belongs to what runs after; False where it
  cannot."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False
