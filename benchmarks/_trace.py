"""When each device was busy, read from a ``jax.profiler`` trace.

Proof that work on disjoint devices ran at the same time has to come from
the devices, not from the host: a ``jax.debug.callback`` inside a program
makes XLA:CPU run that program synchronously (its dispatch returns only when
it is done), which serialises exactly what is being measured. The profiler
records what the runtime did without changing it:

- XLA:CPU: one ``ThunkExecutor::Execute`` event per device per program run,
  with the device's ordinal;
- GPU: one plane per device (``/device:GPU:<n>``) with its kernels.

Example (a program on device 0, traced):
  >>> import jax, jax.numpy as jnp
  >>> f = jax.jit(lambda x: jnp.tanh(x @ x))
  >>> x = jnp.ones((64, 64)); _ = f(x).block_until_ready()
  >>> busy = device_intervals(lambda: f(x).block_until_ready())
  >>> sorted(busy) == [jax.devices()[0].id] or busy == {}  # {} if untraced
  True
"""

from __future__ import annotations

import glob
import re
import tempfile
import warnings
from typing import Callable

import jax

_CPU_RUN = "ThunkExecutor::Execute"
_GPU_PLANE = re.compile(r"/device:GPU:(\d+)")


def device_intervals(fn: Callable[[], object]) -> dict[int, list[tuple]]:
  """Runs ``fn()`` under ``jax.profiler.trace``; returns, per device id,
  the ``(start_s, end_s)`` intervals during which that device ran a
  program (seconds on the profiler's clock; only differences mean
  anything). Empty if this JAX's trace has neither event kind."""
  with tempfile.TemporaryDirectory() as log_dir:
    with jax.profiler.trace(log_dir):
      fn()
    (path,) = glob.glob(f"{log_dir}/**/*.xplane.pb", recursive=True)
    data = jax.profiler.ProfileData.from_file(path)
  by_ordinal = {d.local_hardware_id: d.id for d in jax.local_devices()}
  busy: dict[int, list[tuple]] = {}
  for plane in data.planes:
    gpu = _GPU_PLANE.fullmatch(plane.name)
    for line in plane.lines:
      for ev in line.events:
        if gpu:
          dev = by_ordinal.get(int(gpu.group(1)), int(gpu.group(1)))
        elif ev.name.startswith(_CPU_RUN):
          ordinal = _stats(ev).get("device_ordinal")
          if ordinal is None:
            continue
          dev = by_ordinal.get(int(ordinal), int(ordinal))
        else:
          continue
        busy.setdefault(dev, []).append(
            (ev.start_ns * 1e-9, (ev.start_ns + ev.duration_ns) * 1e-9))
  return {d: _merged(iv) for d, iv in busy.items()}


def _stats(event) -> dict:
  # jaxlib builds the nanobind type of ``event.stats`` on first use without
  # a ``__module__``, which Python 3.12 reports as a DeprecationWarning (and
  # nanobind turns into a fatal error where warnings are errors): jaxlib's
  # to fix, not ours.
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "builtin type event_stats",
                            DeprecationWarning)
    return dict(event.stats)


def _merged(intervals: list[tuple]) -> list[tuple]:
  out: list[list] = []
  for a, b in sorted(intervals):
    if out and a <= out[-1][1]:
      out[-1][1] = max(out[-1][1], b)
    else:
      out.append([a, b])
  return [tuple(x) for x in out]


def span(busy: dict[int, list[tuple]], devices) -> tuple[float, float]:
  """First start and last end of any of ``devices`` (ids)."""
  ivs = [iv for d in devices for iv in busy.get(d, [])]
  return min(a for a, _ in ivs), max(b for _, b in ivs)


def overlap_fraction(busy: dict[int, list[tuple]], group_a, group_b) -> float:
  """The fraction of the shorter group's span (first start to last end of
  its devices) during which the other group's devices were also running:
  0 = one after the other, 1 = the shorter ran entirely inside the other."""
  (a0, a1), (b0, b1) = span(busy, group_a), span(busy, group_b)
  both = max(0.0, min(a1, b1) - max(a0, b0))
  return both / min(a1 - a0, b1 - b0)
