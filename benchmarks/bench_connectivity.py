"""Build time and peak memory of ``bs.models.connect`` (CPU, faked devices).

Each case runs in a fresh child process: the baseline is its resident set
after importing JAX and making the mesh; the peak is the kernel's
high-water mark (``VmHWM``) after one ``connect`` call (compilation
included), reported above the baseline and as a multiple of the index's
bytes (summed over shards). ``build_s`` is wall time, ``cpu_s`` the
process's CPU time (user + system) over the call, which a loaded machine
inflates less.

Example:
  python -m benchmarks connectivity
  python -m benchmarks connectivity --neurons 20000 --k 50 --devices 1
  python -m benchmarks connectivity --rule microcircuit --scale 0.1 --k-scale 1
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks._harness import (clock, device_env, parser, peak_rss_mib,
                                 rss_mib)

__all__ = ["main", "measure"]

MIB = 2**20


def microcircuit(bm, scale: float, k_scale: float):
  """The microcircuit's layout and projections (examples.microcircuit's
  parameters: FixedTotalNumber from NEST's synapse-number formula, weights
  and delays normals redrawn into range)."""
  from examples.microcircuit import params as mp
  net = mp.scaled(scale, k_scale)
  names = mp.POPULATIONS
  sizes = dict(zip(names, (int(n) for n in net.neurons)))
  projs = []
  for i, post in enumerate(names):
    for j, pre in enumerate(names):
      if net.synapses[i, j] <= 0:
        continue
      w, d, exc = float(net.weight_mean[i, j]), float(net.delay_mean[i, j]), j % 2 == 0
      projs.append(bm.Projection(
          pre, post, bm.FixedTotalNumber(int(net.synapses[i, j])),
          weight=bm.Normal(w, abs(w) * mp.WEIGHT_REL_STD,
                           **({"lower": 0.0} if exc else {"upper": 0.0})),
          delay=bm.Normal(d, d * mp.DELAY_REL_STD), receptor=0 if exc else 1))
  return sizes, projs


def _child(neurons: int, k: int, devices: int, rule: str) -> dict:
  import jax
  from brainshard import models as bm
  mesh = jax.make_mesh((devices,), ("x",))
  if rule == "microcircuit":  # neurons: scale in 1e-6 units; k: k-scale in %
    sizes, proj = microcircuit(bm, neurons * 1e-6, k / 100)
    return _run(bm, jax, bm.Layout(sizes, n_shards=devices), proj, mesh,
                dict(scale=neurons * 1e-6, k_scale=k / 100, devices=devices,
                     rule=rule))
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
  return _run(bm, jax, lay, proj, mesh,
              dict(neurons=neurons, k=k, devices=devices, rule=rule))


def _run(bm, jax, lay, proj, mesh, row: dict) -> dict:
  base = rss_mib()
  with clock() as build:
    idx = bm.connect(proj, lay, dt=0.1, seed=0, mesh=mesh, axis="x")
    jax.block_until_ready(idx)
  peak = peak_rss_mib() - base
  return dict(row, synapses=int(idx.count.sum()), build_s=round(build.s, 2),
              cpu_s=round(build.cpu_s, 2),
              index_mb=round(idx.nbytes / MIB, 1),
              peak_above_base_mb=round(peak, 1),
              peak_over_index=round(peak * MIB / idx.nbytes, 2))


def measure(neurons: int, k: int, devices: int, rule: str = "in") -> dict:
  """One case in a child process with ``devices`` faked CPU devices."""
  env = device_env(devices)
  code = ("import json, sys; from benchmarks.bench_connectivity import _child;"
          f"print(json.dumps(_child({neurons}, {k}, {devices}, {rule!r})))")
  out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       capture_output=True, text=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> list[dict]:
  ap = parser(__doc__)
  ap.add_argument("--neurons", type=int, default=100_000)
  ap.add_argument("--k", type=int, default=100, help="in-degree")
  ap.add_argument("--devices", type=int, nargs="+", default=[1, 8])
  ap.add_argument("--rule", choices=["in", "total", "microcircuit"],
                  default="in")
  ap.add_argument("--scale", type=float, default=0.1,
                  help="microcircuit: neuron scale")
  ap.add_argument("--k-scale", type=float, default=1.0,
                  help="microcircuit: in-degree scale")
  args = ap.parse_args(argv)
  rows = []
  for d in args.devices:
    if args.rule == "microcircuit":  # passed to the child as integers
      row = measure(int(round(args.scale * 1e6)),
                    int(round(args.k_scale * 100)), d, args.rule)
    else:
      row = measure(args.neurons, args.k, d, args.rule)
    print(json.dumps(row), flush=True)
    rows.append(row)
  return rows
