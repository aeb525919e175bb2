"""Build time and peak memory of ``bs.models.connect`` (CPU, faked devices).

Each case runs in a fresh child process: the baseline is its resident set
after importing JAX and making the mesh; the peak is the kernel's
high-water mark (``VmHWM``) after one ``connect`` call (compilation
included), reported above the baseline and as a multiple of the index's
bytes (summed over shards).

Example:
  python -c "from benchmarks.bench_connectivity import main; main()"
  python -c "from benchmarks.bench_connectivity import main; \
main(['--neurons', '20000', '--k', '50', '--devices', '1'])"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

__all__ = ["main", "measure"]


def _status(field: str) -> int:
  """``field`` of /proc/self/status in bytes (Linux)."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"no {field} in /proc/self/status")


def _child(neurons: int, k: int, devices: int, rule: str) -> dict:
  import time
  import jax
  from brainshard import models as bm
  mesh = jax.make_mesh((devices,), ("x",))
  lay = bm.Layout({"E": neurons * 4 // 5, "I": neurons - neurons * 4 // 5},
                  n_shards=devices)
  k_e = k * 4 // 5  # in-degree k: 80% from E, 20% from I
  kinds = {"in": lambda kk: bm.FixedInDegree(kk),
           "total": lambda kk: bm.FixedTotalNumber(neurons * kk)}
  proj = [bm.Projection("E", (0, neurons), kinds[rule](k_e),
                        weight=bm.Normal(0.1, 0.01, lower=0.0),
                        delay=bm.Normal(1.5, 0.75)),
          bm.Projection("I", (0, neurons), kinds[rule](k - k_e), weight=-0.4,
                        delay=0.8, receptor=1)]
  base = _status("VmRSS")
  t0 = time.perf_counter()
  idx = bm.connect(proj, lay, dt=0.1, seed=0, mesh=mesh, axis="x")
  jax.block_until_ready(idx)
  seconds = time.perf_counter() - t0
  peak = _status("VmHWM") - base
  return dict(neurons=neurons, k=k, devices=devices, rule=rule,
              synapses=int(idx.count.sum()), build_s=round(seconds, 2),
              index_mb=round(idx.nbytes / 2**20, 1),
              peak_above_base_mb=round(peak / 2**20, 1),
              peak_over_index=round(peak / idx.nbytes, 2))


def measure(neurons: int, k: int, devices: int, rule: str = "in") -> dict:
  """One case in a child process with ``devices`` faked CPU devices."""
  env = dict(os.environ, XLA_FLAGS=(
      f"--xla_force_host_platform_device_count={devices}"))
  code = ("import json, sys; from benchmarks.bench_connectivity import _child;"
          f"print(json.dumps(_child({neurons}, {k}, {devices}, {rule!r})))")
  out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       capture_output=True, text=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> list[dict]:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--neurons", type=int, default=100_000)
  ap.add_argument("--k", type=int, default=100, help="in-degree")
  ap.add_argument("--devices", type=int, nargs="+", default=[1, 8])
  ap.add_argument("--rule", choices=["in", "total"], default="in")
  args = ap.parse_args(argv)
  rows = []
  for d in args.devices:
    row = measure(args.neurons, args.k, d, args.rule)
    print(json.dumps(row), flush=True)
    rows.append(row)
  return rows


if __name__ == "__main__":
  main()
