"""Run one script as several JAX processes on this machine.

    python -m brainshard.launch -n 2 --local-devices 4 script.py [args...]

starts ``script.py`` ``n`` times, as processes ``0 .. n-1`` of one
multi-controller JAX run coordinated on ``127.0.0.1`` (a free port). The
script calls :func:`brainshard.init_distributed` first, which joins the run
from the environment this launcher sets. With ``--local-devices K`` each
process gets ``K`` faked CPU devices (for testing multi-host code on one
machine; collectives use gloo).

When one process fails, the others are killed soon after: a dead peer would
otherwise leave them waiting in a collective forever. Every run is bounded by
``--timeout``. The same code is importable: :func:`launch`.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from typing import NamedTuple, Sequence, TextIO

from brainshard._scaleout.multihost import (
    ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID)

__all__ = ["launch", "ProcessResult", "LaunchError", "free_port"]

_DEVICE_FLAG = "--xla_force_host_platform_device_count"


class ProcessResult(NamedTuple):
  """How one launched process ended."""
  process_id: int
  returncode: int | None  # None: killed by the launcher (it never exited)
  stdout: str
  stderr: str


class LaunchError(RuntimeError):
  """A launched process failed or the run timed out; ``.results`` has all."""

  def __init__(self, message: str, results: list[ProcessResult]):
    super().__init__(message)
    self.results = results


def free_port() -> int:
  """A TCP port on 127.0.0.1 that is free right now."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _child_env(base: dict, process_id: int, num_processes: int, port: int,
               local_devices: int | None) -> dict:
  env = dict(base)
  env[ENV_COORDINATOR] = f"127.0.0.1:{port}"
  env[ENV_NUM_PROCESSES] = str(num_processes)
  env[ENV_PROCESS_ID] = str(process_id)
  env.setdefault("PYTHONUNBUFFERED", "1")
  if local_devices is not None:
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith(_DEVICE_FLAG)]
    env["XLA_FLAGS"] = " ".join(flags + [f"{_DEVICE_FLAG}={local_devices}"])
    env["JAX_PLATFORMS"] = "cpu"
  return env


def _pump(stream, sink: list[str], echo: TextIO | None, prefix: str) -> None:
  for line in iter(stream.readline, ""):
    sink.append(line)
    if echo is not None:
      echo.write(prefix + line)
      echo.flush()
  stream.close()


def _tail(text: str, limit: int = 4000) -> str:
  return text if len(text) <= limit else "...\n" + text[-limit:]


def launch(argv: Sequence[str], num_processes: int = 2, *,
           local_devices: int | None = None, timeout: float = 300.0,
           grace: float = 1.0, env: dict | None = None, check: bool = True,
           echo: bool = False, python: str = sys.executable
           ) -> list[ProcessResult]:
  """Runs ``python *argv`` as ``num_processes`` processes of one JAX run.

  Args:
    argv: the script and its arguments (or ``['-m', 'module', ...]``).
    num_processes: how many processes.
    local_devices: faked CPU devices per process (None: the real devices).
    timeout: seconds before every process still running is killed.
    grace: seconds the others get, after one process fails, to finish
      printing before they are killed.
    env: extra environment variables for the processes.
    check: raise :class:`LaunchError` unless every process exits with 0.
    echo: copy the processes' output to this process's, prefixed ``[pN]``.
    python: the interpreter.

  Returns:
    One :class:`ProcessResult` per process, in process order.
  """
  if num_processes < 1:
    raise ValueError(f"num_processes must be at least 1, got {num_processes}.")
  port = free_port()
  base = {**os.environ, **(env or {})}
  procs, outs, errs, pumps = [], [], [], []
  try:
    for i in range(num_processes):
      p = subprocess.Popen(
          [python, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          text=True, env=_child_env(base, i, num_processes, port,
                                    local_devices))
      procs.append(p)
      outs.append([])
      errs.append([])
      for stream, sink, dest in ((p.stdout, outs[i], sys.stdout),
                                 (p.stderr, errs[i], sys.stderr)):
        t = threading.Thread(target=_pump, daemon=True, args=(
            stream, sink, dest if echo else None, f"[p{i}] "))
        t.start()
        pumps.append(t)
    failure = _supervise(procs, timeout, grace)
  finally:
    for p in procs:  # only ever the processes started above
      if p.poll() is None:
        p.kill()
    for p in procs:
      p.wait()
    for t in pumps:
      t.join(timeout=5)
  results = [ProcessResult(i, p.returncode if not killed else None,
                           "".join(outs[i]), "".join(errs[i]))
             for i, (p, killed) in enumerate(zip(procs, failure.killed))]
  if check and failure.message:
    raise LaunchError(failure.message + _report(results, failure.first),
                      results)
  return results


class _Failure(NamedTuple):
  message: str      # empty when every process exited with 0
  first: int | None  # the process that failed first
  killed: list[bool]


def _supervise(procs: list, timeout: float, grace: float) -> _Failure:
  deadline = time.monotonic() + timeout
  killed = [False] * len(procs)
  while True:
    codes = [p.poll() for p in procs]
    failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
    if failed:
      first = failed[0]
      end = time.monotonic() + grace
      while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.05)
      _kill_running(procs, killed)
      return _Failure(
          f"process {first} of {len(procs)} exited with code "
          f"{codes[first]}; the launcher stopped the others.", first, killed)
    if all(c == 0 for c in codes):
      return _Failure("", None, killed)
    if time.monotonic() > deadline:
      _kill_running(procs, killed)
      return _Failure(
          f"the run timed out after {timeout:g} s; processes "
          f"{[i for i, k in enumerate(killed) if k]} were still running and "
          "were killed.", None, killed)
    time.sleep(0.05)


def _kill_running(procs: list, killed: list[bool]) -> None:
  """Kills every process still running and marks it in ``killed``."""
  for i, p in enumerate(procs):
    if p.poll() is None:
      p.kill()
      killed[i] = True


def _report(results: list[ProcessResult], first: int | None) -> str:
  order = sorted(results, key=lambda r: r.process_id != first)
  parts = []
  for r in order:
    status = "killed" if r.returncode is None else f"exit code {r.returncode}"
    parts.append(f"\n--- process {r.process_id} ({status}) stderr ---\n"
                 f"{_tail(r.stderr) or '(empty)'}")
  return "".join(parts)


_OPTIONS = {"-n": 1, "--num-processes": 1, "--local-devices": 1,
            "--timeout": 1, "-h": 0, "--help": 0}


def _split_argv(args: Sequence[str]) -> tuple[list[str], list[str]]:
  """The launcher's own options, and the rest (what ``python`` runs): the
  first token that is not a launcher option starts the rest, so ``-c`` and
  ``-m`` reach the child."""
  args = list(args)
  i = 0
  while i < len(args):
    token = args[i]
    if token == "--":
      return args[:i], args[i + 1:]
    name = token.split("=", 1)[0]
    if name not in _OPTIONS:
      break
    i += 1 if "=" in token else 1 + _OPTIONS[name]
  return args[:i], args[i:]


def main(args: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m brainshard.launch",
      usage="python -m brainshard.launch [-n N] [--local-devices K] "
            "[--timeout S] script.py [args ...]",
      description="Run a script as several processes of one JAX run.")
  parser.add_argument("-n", "--num-processes", type=int, default=2)
  parser.add_argument("--local-devices", type=int, default=None,
                      help="faked CPU devices per process")
  parser.add_argument("--timeout", type=float, default=3600.0)
  own, rest = _split_argv(sys.argv[1:] if args is None else args)
  ns = parser.parse_args(own)
  if not rest:
    parser.error("give the script to run")
  try:
    launch(rest, ns.num_processes, local_devices=ns.local_devices,
           timeout=ns.timeout, echo=True)
  except LaunchError as e:
    print(f"brainshard.launch: {str(e).splitlines()[0]}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
