"""Faked CPU devices, for this process or for a child: XLA's
``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``, which JAX reads
when it starts its CPU backend (not when it is imported). The examples fake
theirs through ``jax_num_cpu_devices`` instead (examples/_cli.py), which a
child does not inherit.

  >>> with_devices(8, with_devices(2, "--xla_cpu_foo=1")).split()
  ['--xla_cpu_foo=1', '--xla_force_host_platform_device_count=8']
  >>> with_devices(None, with_devices(8))
  ''
"""

from __future__ import annotations

import os

FLAG = "--xla_force_host_platform_device_count"


def with_devices(n: int | None, flags: str = "") -> str:
  """``flags`` (an ``XLA_FLAGS`` value) asking for ``n`` CPU devices: any
  device count in it replaced; with ``n`` None, removed (JAX's own count)."""
  kept = [f for f in flags.split() if not f.startswith(FLAG)]
  return " ".join(kept + ([f"{FLAG}={n}"] if n else []))


def fake_devices(n: int | None) -> None:
  """``n`` faked CPU devices for this process and the children it starts.
  Call it before JAX starts its backends: after, this process keeps the
  devices it has."""
  os.environ["XLA_FLAGS"] = with_devices(n, os.environ.get("XLA_FLAGS", ""))


def device_env(n: int | None, env: dict | None = None) -> dict:
  """A copy of ``env`` (default: this process's) for a child with ``n``
  faked CPU devices (None: JAX's own count)."""
  env = dict(os.environ if env is None else env)
  env["XLA_FLAGS"] = with_devices(n, env.get("XLA_FLAGS", ""))
  return env
