"""The workloads of the suite (``python -m benchmarks``), by name in
:data:`WORKLOADS`. Each returns a list of result rows (``_rows.row``);
every timed row is a ratio against hand-threaded pure JAX timed interleaved
with it in this process (benchmarks/_harness)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import brainshard as bs
from benchmarks import _models as M
from benchmarks import _peers
from benchmarks._dispatch import PURE_DISPATCH, w_dispatch
from benchmarks._harness import Case, compare, compare_once, release
from benchmarks._rows import BS, BST, Ctx, add_peers, mesh_of, rows_for
from benchmarks.bench_demo import cuba_example, w_demo
from benchmarks.bench_guides import w_autodiff, w_vmap

ROOT = Path(__file__).resolve().parent.parent


# -- 2/3. a sharded stateful step: under bs.jit, and eagerly ---------------------------

# XLA:CPU can deadlock in a collective's rendezvous when many multi-device
# executions are in flight (seen here with ~50 queued psum steps on 8 faked
# devices, in pure JAX too); batches of programs with collectives stay short.
MAX_INFLIGHT = 16


def sharded_cases(n: int, mesh, ctx: Ctx):
  model = M.LifBs(n, mesh)
  jitted = bs.jit(model.sharded())
  eager = model.sharded()
  i_ext = model.i_ext
  sync = lambda: model.v.value
  pure = M.LifPure(n, mesh)
  cases = {"jax.jit(jax.shard_map)": Case(pure.run, lambda: pure.v),
           f"{BS} bs.jit(bs.shard_map)": Case(lambda: jitted(i_ext), sync),
           f"{BS} bs.shard_map (eager)": Case(lambda: eager(i_ext), sync)}
  missing: dict[str, str] = {}
  if ctx.peers:
    for name, jit in ((f"{BST} jit(shard_map)", True),
                      (f"{BST} shard_map (eager)", False)):
      try:
        run, s = _peers.call(_peers.bst_lif, n, mesh, jit=jit)
        cases[name] = Case(run, s)
      except _peers.Unavailable as e:
        missing[name] = str(e)
  return cases, missing


def _sharded_repeats(ctx: Ctx) -> int:
  # 8 faked devices on 2 shared cores make each execution noisy: more, short
  # repeats (the batches are capped at MAX_INFLIGHT calls anyway).
  return ctx.repeats if ctx.quick else 2 * ctx.repeats + 1


def _sharded_goal(impl: str) -> float | None:
  if impl == f"{BS} bs.jit(bs.shard_map)":
    return 1.05
  if impl == f"{BS} bs.shard_map (eager)":
    return 1.15
  return None


def w_sharded(ctx: Ctx) -> list[dict]:
  mesh = mesh_of(8)
  sizes = [8 * 512] if ctx.quick else [8 * 512, 8 * 65536]
  out = []
  for n in sizes:
    cases, missing = sharded_cases(n, mesh, ctx)
    t = compare(cases, "jax.jit(jax.shard_map)", repeats=_sharded_repeats(ctx),
                target_s=0.01, max_number=MAX_INFLIGHT)
    out += rows_for(ctx, "sharded", f"n={n}, 8 devices", t, missing,
                 "jax.jit(jax.shard_map)", goal_for=_sharded_goal, x=n)
    release(cases)
  return out


# -- 4. simulations: for_loop vs lax.scan, and the CUBA network ---------------------


def w_loops(ctx: Ctx) -> list[dict]:
  out = []
  steps, n = 1000, 4000
  xs = M.sim_inputs(steps)
  sim = M.SimBs(n)
  prog = sim.program()
  pure = M.SimPure(n)
  cases = {"jax.lax.scan": Case(lambda: pure.run(xs), lambda: pure.v),
           f"{BS} bs.jit(bs.for_loop)": Case(lambda: prog(xs),
                                             lambda: sim.v.value)}
  missing: dict[str, str] = {}
  add_peers(ctx, cases, missing, {
      f"{BST} jit(for_loop)": (_peers.bst_sim, (n, xs)),
      "nnx.jit(nnx.scan)": (_peers.nnx_sim, (n, xs))})
  t = compare(cases, "jax.lax.scan", repeats=ctx.repeats, target_s=0.05)
  out += rows_for(ctx, "for_loop", f"{steps} steps, n={n}", t, missing,
               "jax.lax.scan",
               goal_for=lambda i: 1.05 if i.startswith(BS) else None, x=steps)

  steps = 1000 if ctx.quick else 10000
  ts = M.cuba_times(steps)
  net = M.CubaBs(0)
  cprog = net.program()
  cpure = M.CubaPure(0)
  cases = {"jax.lax.scan": Case(lambda: cpure.run(ts), lambda: cpure.s["v"]),
           f"{BS} bs.jit(bs.for_loop)": Case(lambda: cprog(ts),
                                             lambda: net.states["v"].value)}
  missing = {}
  add_peers(ctx, cases, missing, {f"{BST} jit(for_loop)": (_peers.bst_cuba, (ts,))})
  t = compare(cases, "jax.lax.scan", repeats=max(5, ctx.repeats // 2),
              target_s=0.05)
  sim_s = steps * M.CUBA["dt"] / 1000.0
  fresh = M.CubaBs(0)  # the rate of one run from the initial conditions
  counts = np.asarray(fresh.program()(ts))
  rate = counts.sum() / (M.CUBA["n"] * sim_s)
  rows = rows_for(ctx, "cuba", f"{steps} steps ({sim_s:g} s)", t, missing,
               "jax.lax.scan", goal_for=lambda i: 1.05 if i.startswith(BS) else None,
               x=steps)
  for r in rows:
    if "time_s" in r:
      r["per_sim_second_s"] = r["time_s"] / sim_s
    r["rate_hz"] = float(rate)
  ctx.log(f"  cuba       mean rate {rate:.1f} Hz over {sim_s:g} s simulated")
  out += rows
  out += cuba_example(ctx)
  return out


# -- 5. first call: trace + compile + run --------------------------------------------


def w_first_call(ctx: Ctx) -> list[dict]:
  mesh = mesh_of(8)
  n = 8 * 512
  out = []
  repeats = 5 if ctx.quick else 9

  def bs_sharded(jit: bool):
    def make():
      model = M.LifBs(n, mesh)
      f = model.sharded()
      f = bs.jit(f) if jit else f
      return lambda: f(model.i_ext)
    return make

  def pure_sharded():
    pure = M.LifPure(n, mesh)
    return pure.run

  makers = {"jax.jit(jax.shard_map)": pure_sharded,
            f"{BS} bs.jit(bs.shard_map)": bs_sharded(True),
            f"{BS} bs.shard_map (eager)": bs_sharded(False)}
  missing: dict[str, str] = {}
  if ctx.peers:
    try:
      _peers.call(_peers.bst_lif, n, mesh, jit=True)  # availability check
      makers[f"{BST} jit(shard_map)"] = lambda: _peers.bst_lif(
          n, mesh, jit=True)[0]
    except _peers.Unavailable as e:
      missing[f"{BST} jit(shard_map)"] = str(e)
  t = compare_once(makers, "jax.jit(jax.shard_map)", repeats=repeats)
  out += rows_for(ctx, "first-call", "sharded LIF step", t, missing,
               "jax.jit(jax.shard_map)",
               goal_for=lambda i: 1.5 if i.startswith(BS) else None)

  k = 100

  def bs_many():
    return bs.jit(M.dispatch_step(k)[1])

  def pure_many():  # donating, as bs.jit does: the same work
    vals = [jnp.zeros(4, jnp.float32) for _ in range(k)]
    f = jax.jit(lambda vals: [v + 1.0 for v in vals], donate_argnums=0)
    return lambda: f(vals)

  t = compare_once({PURE_DISPATCH: pure_many, BS: bs_many}, PURE_DISPATCH,
                   repeats=repeats)
  out += rows_for(ctx, "first-call", f"N={k} states", t, {}, PURE_DISPATCH,
               goal_for=lambda i: 1.5 if i == BS else None)

  if hasattr(bs, "for_loop"):
    xs = M.sim_inputs(1000)

    def bs_sim():
      prog = M.SimBs(4000).program()
      return lambda: prog(xs)

    def pure_sim():
      p = M.SimPure(4000)
      return lambda: p.run(xs)

    t = compare_once({"jax.lax.scan": pure_sim, f"{BS} bs.jit(bs.for_loop)": bs_sim},
                     "jax.lax.scan", repeats=repeats)
    out += rows_for(ctx, "first-call", "1000-step for_loop", t, {}, "jax.lax.scan",
                 goal_for=lambda i: 1.5 if i.startswith(BS) else None)
  return out


# -- 6. scaling with the mesh ------------------------------------------------------------


def devices_cases(n: int, k: int) -> dict[str, Case]:
  """The sharded LIF step on ``k`` devices: pure, under bs.jit, eager."""
  mesh = mesh_of(k)
  model = M.LifBs(n, mesh)
  jitted = bs.jit(model.sharded())
  eager = model.sharded()
  pure = M.LifPure(n, mesh)
  i_ext = model.i_ext
  sync = lambda: model.v.value  # noqa: E731
  return {"jax.jit(jax.shard_map)": Case(pure.run, lambda: pure.v),
          f"{BS} bs.jit(bs.shard_map)": Case(lambda: jitted(i_ext), sync),
          f"{BS} bs.shard_map (eager)": Case(lambda: eager(i_ext), sync)}


def w_devices(ctx: Ctx) -> list[dict]:
  out = []
  for k in (1, 2, 4, 8):
    cases = devices_cases(8 * 512, k)
    t = compare(cases, "jax.jit(jax.shard_map)", repeats=_sharded_repeats(ctx),
                target_s=0.01, max_number=MAX_INFLIGHT)
    out += rows_for(ctx, "devices", f"{k} device(s)", t, {},
                 "jax.jit(jax.shard_map)", goal_for=_sharded_goal, x=k)
    release(cases)
  return out


# -- 7. memory: donation ------------------------------------------------------------------


def w_memory(ctx: Ctx) -> list[dict]:
  mib = 128 if ctx.quick else 1024
  out = []
  for impl in ("bs-auto", "bs-false", "pure-donate", "pure-keep"):
    cmd = [sys.executable, "-m", "benchmarks._memory_child", impl, str(mib)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
      out.append(dict(workload="memory", case=f"{mib} MiB", impl=impl,
                      unavailable=proc.stderr.strip().splitlines()[-1][:200]))
      continue
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r.update(workload="memory", case=f"{mib} MiB state over 8 devices", impl=impl)
    out.append(r)
    ctx.log(f"  memory     {impl:<12} peak RSS over the state: "
            f"{r['rss_peak_over_state_mib']:7.1f} MiB; XLA per device: args "
            f"{r['args_mib']:.1f} out {r['out_mib']:.1f} alias {r['alias_mib']:.1f}"
            f" temp {r['temp_mib']:.1f} MiB")
  return out


WORKLOADS = {
    "dispatch": w_dispatch,
    "sharded": w_sharded,
    "loops": w_loops,
    "first-call": w_first_call,
    "devices": w_devices,
    "memory": w_memory,
    "demo": w_demo,
    "autodiff": w_autodiff,
    "vmap": w_vmap,
}
