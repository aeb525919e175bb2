"""Where brainshard's per-call time goes (``python -m benchmarks --profile``).

Two views of the steady-state call path:

* *overhead*: brainshard's call against a direct call of the very
  ``jax.jit`` object it dispatches to, with the same values (interleaved);
  the difference is all the Python brainshard runs per call.
* *profile*: ``cProfile`` of many calls, per function, in microseconds per
  call. cProfile cannot see into JAX's C++ dispatch, so that time shows as
  the *own* time of the Python function that makes the call (for brainshard,
  the generated ``entry``); the other rows are pure Python.
"""

from __future__ import annotations

import cProfile
import pstats

import jax

import brainshard as bs
from benchmarks import _models as M
from benchmarks._harness import Case, compare


def _values(plan) -> tuple:
  """The program's state arguments, as its donating call takes them."""
  return plan.state_args([s._value for s in plan.cand],
                         [s._value for s in plan.rest], plan.packed)


def _dispatch(n: int):
  states, step = M.dispatch_step(n)

  f = bs.jit(step)
  f()
  plan = f._core.program

  def direct():  # the same jitted program, values threaded by hand
    out, new = plan.j_all(*_values(plan))
    for s, x in zip(plan.writes, new):
      s._value = x

  return f, direct, lambda: states[0].value


def _eager(k: int):
  mesh = jax.make_mesh((k,), ("x",), devices=jax.devices()[:k])
  model = M.LifBs(8 * 512, mesh)
  f = model.sharded()
  i_ext = model.i_ext
  f(i_ext)
  plan = next(iter(f._eager.values())).program  # one mesh, no axis rules

  def direct():
    out, new = plan.j_all(*_values(plan), i_ext)
    for s, x in zip(plan.writes, new):
      s._value = x

  return (lambda: f(i_ext)), direct, lambda: model.v.value


def _cprofile(fn, sync, calls: int, block_every: int) -> list[dict]:
  prof = cProfile.Profile()
  prof.enable()
  for i in range(calls):
    fn()
    if i % block_every == block_every - 1:
      jax.block_until_ready(sync())
  prof.disable()
  stats = pstats.Stats(prof).stats
  rows = []
  for (file, line, name), (cc, nc, tt, ct, callers) in stats.items():
    if "benchmarks/_profile.py" in file or name == "<lambda>":
      continue
    short = file.split("site-packages/")[-1].split("wt4/")[-1].split("/brainshard/")[-1]
    rows.append(dict(function=f"{short}:{line}({name})",
                     own_us=tt / calls * 1e6, calls_per_call=nc / calls))
  rows.sort(key=lambda r: -r["own_us"])
  return rows[:8]


def profile_all() -> dict:
  out = {}
  for label, build, calls, inflight in (
      ("bs.jit, N=1", lambda: _dispatch(1), 20000, 1000),
      ("bs.jit, N=10", lambda: _dispatch(10), 5000, 1000),
      ("bs.jit, N=100", lambda: _dispatch(100), 500, 1000),
      # Short batches: XLA:CPU collectives deadlock with many in flight.
      ("eager bs.shard_map, 1 device", lambda: _eager(1), 2000, 8),
      ("eager bs.shard_map, 8 devices", lambda: _eager(8), 300, 8)):
    call, direct, sync = build()
    t = compare({"direct": Case(direct, sync), "brainshard": Case(call, sync)},
                "direct", repeats=31, target_s=0.01, max_number=inflight)
    entry = dict(
        brainshard_us=t["brainshard"].per_call_s * 1e6,
        direct_us=t["direct"].per_call_s * 1e6,
        overhead_us=(t["brainshard"].per_call_s - t["direct"].per_call_s) * 1e6,
        ratio=t["brainshard"].ratio,
        profile=_cprofile(call, sync, calls, inflight))
    print(f"  profile    {label:<30} brainshard {entry['brainshard_us']:8.1f} us, "
          f"direct jitted call {entry['direct_us']:8.1f} us "
          f"(x{entry['ratio']:.3f})")
    out[label] = entry
  return out
