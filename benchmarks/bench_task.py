"""Sub-mesh tasks (MPMD) against the same model as one SPMD program.

``examples.two_areas``: two E/I areas, each a ``bs.task`` on half of the
devices, against both areas in one ``bs.jit(bs.shard_map)`` over all of
them (same arithmetic, bit-identical spikes). Rows, each a ratio of times
per simulated block measured interleaved in this process:

- ``delay 1``: the areas exchange spikes every step (one call per step);
- ``delay 10``: each call advances 10 steps (the min-delay rule);
- ``overlap``: the time of A's and B's task loops run one after the other,
  over the time of the interleaved loop. 2.0 = the two halves ran entirely
  at once; 1.0 = not at all. On faked CPU devices all "devices" share the
  host's cores, so expect little speed-up there; on a GPU pair it is the
  figure that matters.
- ``concurrent``: from a ``jax.profiler`` trace of two tasks on 1+1 and on
  4+4 devices (when each device ran), the fraction of the shorter task's run
  during which the other task's devices were also running. XLA:CPU launches
  programs that span several devices one at a time (its CPU client orders
  them so that their collectives cannot deadlock a fixed thread pool), so on
  faked CPU devices only one-device tasks overlap; GPUs have no such rule.

Usage:  python -m benchmarks task [--steps 400] [--repeats 7]
"""

from __future__ import annotations

from benchmarks._harness import Case, compare, fake_devices, parser

fake_devices(8)  # before JAX starts

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from examples import two_areas  # noqa: E402


def _timed(runs: dict, baseline: str, repeats: int) -> dict:
  """Median seconds per run of each, timed interleaved (benchmarks/_harness);
  each run blocks on its own results."""
  t = compare({k: Case(r) for k, r in runs.items()}, baseline,
              repeats=repeats, target_s=0.05, warmup=1)
  return {k: v.per_call_s for k, v in t.items()}


def _simulation(make, steps: int, delay: int):
  a, b, step = make(delay, len(jax.devices()))

  def run():
    out_a, out_b = two_areas.simulate(a, b, step, steps, delay)
    jax.block_until_ready((out_a[-1], out_b[-1]))
  return run, (a, b, step)


def overlap(steps: int, delay: int, repeats: int) -> float:
  """(A alone + B alone) / (A and B interleaved), one task loop each."""
  _, (a, b, step) = _simulation(two_areas.mpmd, steps, delay)
  ta, tb = step.tasks
  spec = jax.sharding.PartitionSpec(None, "x")
  xa = jax.device_put(jnp.zeros((delay, b.n)),
                      jax.sharding.NamedSharding(ta.mesh, spec))
  xb = jax.device_put(jnp.zeros((delay, a.n)),
                      jax.sharding.NamedSharding(tb.mesh, spec))

  def loop(*calls):
    def step(*_):  # the same input every block: only the tasks' own time
      return tuple(t(x) for t, x in calls)

    def run():
      carry, _ = two_areas.bs.run_tasks(step, tuple(x for _, x in calls),
                                        steps // delay, record=False)
      jax.block_until_ready(carry)
    return run
  t = _timed({"both": loop((ta, xa), (tb, xb)), "A": loop((ta, xa)),
              "B": loop((tb, xb))}, "both", repeats)
  return (t["A"] + t["B"]) / t["both"]


def device_intervals(per_task: int, repeats: int = 3) -> dict:
  """When each task's devices ran, from a ``jax.profiler`` trace
  (benchmarks/_trace.py): two tasks of the same matmul loop on
  ``per_task`` devices each, dispatched back to back. Returns the fraction
  of the shorter task's run during which the other's devices also ran
  (best of ``repeats`` traces)."""
  import brainshard as bs
  from jax.sharding import NamedSharding, PartitionSpec as P
  from benchmarks import _trace
  meshes = bs.split_mesh(jax.devices()[:2 * per_task], (per_task, per_task))

  def body(x):
    return jax.lax.fori_loop(0, 100, lambda _, y: jnp.tanh(y @ y * 0.01), x)
  x = jnp.full((256, 256), 0.01)
  tasks = [(bs.task(body, mesh=m, in_specs=P(), out_specs=P()),
            jax.device_put(x, NamedSharding(m, P()))) for m in meshes]
  jax.block_until_ready([t(xi) for t, xi in tasks])  # compiled
  groups = [[d.id for d in m.devices.flat] for m in meshes]
  best = 0.0
  for _ in range(repeats):
    busy = _trace.device_intervals(
        lambda: jax.block_until_ready([t(xi) for t, xi in tasks]))
    if not busy:
      return dict(overlap_fraction=float("nan"))
    best = max(best, _trace.overlap_fraction(busy, *groups))
  return dict(overlap_fraction=best)


def main(argv=None) -> dict:
  ap = parser(__doc__, repeats=7)
  ap.add_argument("--steps", type=int, default=400)
  args = ap.parse_args(argv)
  print(f"jax {jax.__version__}, {len(jax.devices())} {jax.default_backend()} "
        "devices; two areas on two halves vs one SPMD program")
  out = {}
  for delay in (1, 10):
    t = _timed({"spmd": _simulation(two_areas.spmd, args.steps, delay)[0],
                "task": _simulation(two_areas.mpmd, args.steps, delay)[0]},
               "spmd", args.repeats)
    t_task, t_spmd = t["task"], t["spmd"]
    out[f"delay {delay}"] = dict(task_s=t_task, spmd_s=t_spmd,
                                 ratio=t_task / t_spmd)
    print(f"  delay {delay:>2}: two tasks {t_task * 1e3:8.1f} ms, one SPMD "
          f"program {t_spmd * 1e3:8.1f} ms per {args.steps} steps: ratio "
          f"{t_task / t_spmd:.2f}")
  out["overlap"] = overlap(args.steps, 10, args.repeats)
  print(f"  overlap (A alone + B alone) / (A and B together): "
        f"{out['overlap']:.2f} (2.0 = fully at once)")
  for per_task in sorted({1, len(jax.devices()) // 2}):
    frac = device_intervals(per_task)["overlap_fraction"]
    out[f"concurrent_fraction {per_task}+{per_task}"] = frac
    print(f"  tasks on {per_task}+{per_task} devices: device work at the same "
          f"time {frac:.0%} of the shorter task's run (jax.profiler trace)")
  return out
