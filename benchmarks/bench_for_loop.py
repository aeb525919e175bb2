"""``bs.jit(bs.for_loop(step))`` against a hand-written ``jax.jit(lax.scan)``.

The same leaky integrate-and-fire network step is written twice: once with
States (the brainshard way) and once as a pure function of its state tuple.
Both run in the same process; repeats are interleaved and the medians
compared. Goal: ratio <= 1.05 (the loop costs no more than ``lax.scan``).

Also prints the number of instructions and copies of both optimized XLA
programs, so a difference in the program itself shows up directly.

Usage:
  python -m benchmarks for-loop [--n 1024] [--steps 2000] [--repeats 15]
"""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np

import brainshard as bs
from benchmarks._harness import clock, parser, write_json

DECAY, THRESHOLD, RESET = 0.95, 1.0, 0.0


def make_inputs(n: int, steps: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  w = (rng.random((n, n)) < 0.05).astype(np.float32) * 0.08
  drive = rng.random((steps, n)).astype(np.float32) * 0.12
  return jnp.asarray(w), jnp.asarray(drive)


class Network:
  """The stateful version: membrane potential, last spikes, spike count."""

  def __init__(self, w):
    n = w.shape[0]
    self.w = bs.ParamState(w, name="w")
    self.v = bs.ShortTermState(jnp.zeros(n), name="v")
    self.spikes = bs.ShortTermState(jnp.zeros(n), name="spikes")
    self.count = bs.State(jnp.zeros((), jnp.int32), name="count")

  def step(self, drive):
    v = self.v.value * DECAY + self.w.value @ self.spikes.value + drive
    fired = v > THRESHOLD
    self.v.value = jnp.where(fired, RESET, v)
    self.spikes.value = fired.astype(jnp.float32)
    self.count.value = self.count.value + fired.sum()
    return fired.mean()


def pure_step(w, carry, drive):
  """The same step as a pure function: what a JAX user would hand-write."""
  v, spikes, count = carry
  v = v * DECAY + w @ spikes + drive
  fired = v > THRESHOLD
  carry = (jnp.where(fired, RESET, v), fired.astype(jnp.float32),
           count + fired.sum())
  return carry, fired.mean()


@jax.jit
def scan_reference(w, carry, drives):
  return jax.lax.scan(lambda c, d: pure_step(w, c, d), carry, drives)


def hlo_stats(compiled) -> dict:
  text = compiled.as_text()
  lines = [l for l in text.splitlines() if " = " in l and "ENTRY" not in l]
  return {"instructions": len(lines),
          "copies": sum(" copy(" in l for l in lines)}


def main(argv=None) -> dict:
  ap = parser(__doc__, repeats=15, json=True)
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--steps", type=int, default=2000)
  args = ap.parse_args(argv)

  w, drives = make_inputs(args.n, args.steps)
  net = Network(w)
  run_loop = bs.jit(lambda d: bs.for_loop(net.step, d))
  init = (jnp.zeros(args.n), jnp.zeros(args.n), jnp.zeros((), jnp.int32))

  # Same results first: the comparison is only fair for the same program.
  rates = run_loop(drives)
  (v, spikes, count), ref_rates = scan_reference(w, init, drives)
  np.testing.assert_allclose(rates, ref_rates, rtol=1e-6)
  np.testing.assert_allclose(net.v.value, v, rtol=1e-5, atol=1e-6)
  assert int(net.count.value) == int(count)

  def time_loop():
    with clock() as t:
      jax.block_until_ready(run_loop(drives))
    return t.s

  def time_scan():
    with clock() as t:
      jax.block_until_ready(scan_reference(w, init, drives))
    return t.s

  loop_times, scan_times = [], []
  for i in range(args.repeats + 2):
    order = (time_loop, time_scan) if i % 2 == 0 else (time_scan, time_loop)
    results = {f: f() for f in order}
    if i >= 2:  # warm-up
      loop_times.append(results[time_loop])
      scan_times.append(results[time_scan])

  loop_med = statistics.median(loop_times)
  scan_med = statistics.median(scan_times)
  result = {
      "n": args.n, "steps": args.steps, "repeats": args.repeats,
      "device": str(jax.devices()[0].platform),
      "for_loop_s": loop_med, "lax_scan_s": scan_med,
      "ratio": loop_med / scan_med,
      "for_loop_hlo": hlo_stats(run_loop.lower(drives).compile()),
      "lax_scan_hlo": hlo_stats(scan_reference.lower(w, init, drives).compile()),
  }
  print(f"network n={args.n}, {args.steps} steps, {args.repeats} interleaved "
        f"repeats on {result['device']}")
  print(f"  bs.jit(bs.for_loop(step)):  {loop_med * 1e3:8.2f} ms (median)")
  print(f"  jax.jit(lax.scan(pure)):    {scan_med * 1e3:8.2f} ms (median)")
  print(f"  ratio:                      {result['ratio']:8.3f}  (goal <= 1.05)")
  print(f"  optimized HLO  for_loop: {result['for_loop_hlo']}  "
        f"lax.scan: {result['lax_scan_hlo']}")
  write_json(args.json, result)
  return result
