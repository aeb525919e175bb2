"""Delivery alone: CPU nanoseconds per synaptic event of ``bm.deliver``'s
kernels on Brunel-like and microcircuit-like networks, beside this
machine's limit.

Per shape (``_delivery_shapes.py``: Brunel's model A at 40 Hz, the
microcircuit at scale 0.1 with full in-degrees), one compiled program per
kernel runs ``--steps`` steps of a ring buffer as ``Delivery`` does (clear
the consumed slot, deliver the step's spikes), on one device. The kernels:
``xla`` (``deliver(kernel='xla')``) and ``native`` (the numba loop of
``delivery/native.py``, where numba is installed). The limit
(``_delivery_limit.py``): XLA's scatter alone on precomputed targets, a
read of the same arrays, and the plain loop in C (where gcc is). Cases are
timed interleaved in one process, ``--repeats`` rounds; printed: the median
CPU (and wall) ns per event and the median per-round ratio to ``xla``.
On a GPU (``benchmarks/gpu.sh``) the wall time is the figure: the XLA
kernel runs as Delivery runs it there (16 fired neurons an iteration),
beside XLA's scatter alone; no native kernel, no C loop.

Usage:
  python -m benchmarks delivery [--shapes brunel,microcircuit]
      [--steps 200] [--repeats 7] [--json FILE]
"""

from __future__ import annotations

import statistics

from benchmarks._harness import clock, parser, write_json


def _kernel_program(kernel: str, length: int, steps: int, width):
  """jit ``(buf, fired [steps, n], index) -> buf``: ``steps`` steps of
  clearing slot ``t % length`` and delivering step ``t``'s spikes (XLA's
  ``width`` as Delivery passes it: 1024 on CPU, None elsewhere)."""
  import jax
  import jax.numpy as jnp
  from brainshard._models.delivery.push import clear_slots, deliver

  @jax.jit
  def run(buf, fired, index):
    def step(buf, xs):
      t, f = xs
      buf = clear_slots(buf, t, 1, index, kernel)
      return deliver(buf, f, t, index, width=width, kernel=kernel), None
    return jax.lax.scan(step, buf, (jnp.arange(steps), fired))[0]
  return run


def cases(shape: str, steps: int):
  """``(cases {name: run()}, events, extra)`` for one shape; ``extra``
  holds what is measured outside the process (the C loop's inputs)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from benchmarks import _delivery_limit as limit
  from benchmarks._delivery_shapes import SHAPES, bernoulli_spikes, events
  from brainshard import models as bm
  from brainshard._models.delivery import native
  index, rates = SHAPES[shape]()
  dev = jax.devices()[0]
  index = jax.tree.map(lambda a: jax.device_put(np.asarray(a), dev), index)
  fired_np = bernoulli_spikes(rates, steps)
  n_events = events(index, fired_np)
  length = bm.ring_length(index.max_delay, 1)
  buf = jnp.zeros((index.n_receptors, length, index.n_local), jnp.float32)
  fired = jnp.asarray(fired_np)
  out = {}
  cpu = dev.platform == "cpu"
  kernels = ["xla"] + (["native"] if native.available() and cpu else [])
  results = {}
  for k in kernels:
    prog = _kernel_program(k, length, steps, 1024 if cpu else None)
    results[k] = prog(buf, fired, index)
    out[k] = lambda prog=prog: prog(buf, fired, index)
  if "native" in results:
    same = bool((results["native"] == results["xla"]).all())
    print(f"  native == xla bit for bit: {same}", flush=True)
  flat, w = (jnp.asarray(a) for a in limit.precomputed(index, fired_np,
                                                       length))
  scatter, stream = limit.xla_programs(length, index.n_local)
  out["xla scatter (precomputed)"] = lambda: scatter(flat, w)
  out["xla stream (read only)"] = lambda: stream(flat, w)
  extra = dict(index=index, fired=fired_np, length=length, cpu=cpu)
  return out, n_events, extra


def measure(runs: dict, repeats: int) -> dict:
  """``{name: (cpu_s list, wall_s list)}``: each case timed once per round,
  the order rotating from round to round."""
  import jax
  names = list(runs)
  for name in names:  # compiled and warm
    jax.block_until_ready(runs[name]())
  got = {n: ([], []) for n in names}
  for r in range(repeats):
    for name in names[r % len(names):] + names[:r % len(names)]:
      with clock() as c:
        jax.block_until_ready(runs[name]())
      got[name][0].append(c.cpu_s)
      got[name][1].append(c.s)
  return got


def report(shape: str, got: dict, n_events: int, c_loop: list) -> dict:
  base = got["xla"][0]
  rows = {}
  print(f"{shape}: {n_events:,} events", flush=True)
  for name, (cpu, wall) in got.items():
    ratio = statistics.median(a / b for a, b in zip(cpu, base))
    rows[name] = dict(cpu_ns=1e9 * statistics.median(cpu) / n_events,
                      wall_ns=1e9 * statistics.median(wall) / n_events,
                      cpu_ratio_to_xla=ratio)
  if c_loop:
    rows["c loop (gcc -O2)"] = dict(
        cpu_ns=1e9 * statistics.median(c_loop) / n_events, wall_ns=None,
        cpu_ratio_to_xla=None)
  for name, row in rows.items():
    wall = "" if row["wall_ns"] is None else f"  wall {row['wall_ns']:6.2f}"
    ratio = ("" if row["cpu_ratio_to_xla"] is None
             else f"  cpu / xla {row['cpu_ratio_to_xla']:5.2f}")
    print(f"  {name:28s} cpu {row['cpu_ns']:6.2f} ns/event{wall}{ratio}",
          flush=True)
  return rows


def main(argv: list[str] | None = None) -> dict:
  p = parser(__doc__, repeats=7, json=True)
  p.add_argument("--shapes", default="brunel,microcircuit",
                 help="comma-separated: brunel, microcircuit")
  p.add_argument("--steps", type=int, default=200,
                 help="steps per timed call (default: %(default)s)")
  args = p.parse_args(argv)
  from benchmarks import _delivery_limit as limit
  out = {}
  for shape in args.shapes.split(","):
    runs, n_events, extra = cases(shape, args.steps)
    got = measure(runs, args.repeats)
    c_loop = limit.c_loop_seconds(extra["index"], extra["fired"],
                                  extra["length"], args.repeats
                                  ) if extra["cpu"] else []
    out[shape] = report(shape, got, n_events, c_loop)
    del runs, extra
  write_json(args.json, out)
  return out
