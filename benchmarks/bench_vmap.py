"""``bs.jit(bs.vmap(step))`` on an ensemble against hand-written pure JAX.

B = 64 leaky integrate-and-fire networks that share one coupling matrix and
differ in their membrane time constant: ``V`` holds ``[B, n]`` potentials,
``tau`` ``[B]`` time constants, ``W`` the shared ``[n, n]`` coupling. The
brainshard step closes over those States; the reference is
``jax.jit(jax.vmap(pure_step), donate_argnums=...)`` threading the same
arrays by hand. Two workloads, timed interleaved in one process
(benchmarks/_harness.py):

- ``step``: one ensemble step per call (dispatch plus a small step);
- ``loop``: ``bs.for_loop`` of 100 steps per call, against ``lax.scan``.

brainstate 0.5.4's ``transform.vmap`` runs the same step beside them where
it is installed. Goal: ratio <= 1.05.

Usage:
  python -m benchmarks vmap [--members 64] [--n 256] [--repeats 15]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import brainshard as bs
from benchmarks import _harness
from benchmarks._peers import Unavailable, _import

THRESHOLD, RESET = 1.0, 0.0
LOOP_STEPS = 100


def inputs(members: int, n: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  w = (rng.random((n, n)) < 0.05).astype(np.float32) * 0.1
  v0 = rng.random((members, n)).astype(np.float32)
  tau = np.linspace(5.0, 20.0, members).astype(np.float32)
  return jnp.asarray(w), jnp.asarray(v0), jnp.asarray(tau)


def member_step(v, tau, w, drive):
  """One network's step: the same arithmetic on either side."""
  v = v + (-v + w @ (v > THRESHOLD).astype(v.dtype) + drive) / tau
  fired = v > THRESHOLD
  return jnp.where(fired, RESET, v), fired.mean()


class Ensemble:
  """The stateful version (the same class works for brainstate's States)."""

  def __init__(self, lib, w, v0, tau):
    self.V = lib.ShortTermState(v0)
    self.tau = lib.ParamState(tau)
    self.W = lib.ParamState(w)

  def step(self, drive):
    self.V.value, rate = member_step(self.V.value, self.tau.value,
                                     self.W.value, drive)
    return rate


def _pure(members):
  step = jax.vmap(member_step, in_axes=(0, 0, None, None))
  one = jax.jit(step, donate_argnums=0)

  def scan(v, tau, w, drives):
    def body(v, d):
      return step(v, tau, w, d)
    return jax.lax.scan(body, v, drives)
  return one, jax.jit(scan, donate_argnums=0)


def cases(members: int, n: int) -> dict[str, dict[str, _harness.Case]]:
  w, v0, tau = inputs(members, n)
  drive = jnp.float32(1.2)
  drives = jnp.full((LOOP_STEPS,), 1.2, jnp.float32)
  one, scan = _pure(members)
  box = {"v": v0.copy(), "vs": v0.copy()}

  def pure_step():
    box["v"], rate = one(box["v"], tau, w, drive)
    return rate

  def pure_loop():
    box["vs"], rates = scan(box["vs"], tau, w, drives)
    return rates

  net = Ensemble(bs, w, v0, tau)
  ens = bs.vmap(net.step, in_axes=None,
                state_in_axes={net.V: 0, net.tau: 0})
  bs_step = bs.jit(ens)
  bs_loop = bs.jit(lambda d: bs.for_loop(ens, d))
  out = {
      "step": {"pure": _harness.Case(pure_step, lambda: box["v"]),
               "brainshard": _harness.Case(lambda: bs_step(drive),
                                           lambda: net.V.value)},
      "loop": {"pure": _harness.Case(pure_loop, lambda: box["vs"]),
               "brainshard": _harness.Case(lambda: bs_loop(drives),
                                           lambda: net.V.value)},
  }
  try:
    bst = _import("brainstate")
    peer = Ensemble(bst, w, v0, tau)
    vm = bst.transform.vmap(peer.step, in_axes=None,
                            in_states=[peer.V, peer.tau], out_states=[peer.V])
    bst_step = bst.transform.jit(vm)
    bst_loop = bst.transform.jit(
        lambda d: bst.transform.for_loop(vm, d))
    bst_step(drive), bst_loop(drives)  # fails here if unsupported
    out["step"]["brainstate"] = _harness.Case(lambda: bst_step(drive),
                                              lambda: peer.V.value)
    out["loop"]["brainstate"] = _harness.Case(lambda: bst_loop(drives),
                                              lambda: peer.V.value)
  except Unavailable as e:
    print(f"  (brainstate skipped: {e})")
  except Exception as e:  # noqa: BLE001 - a peer's failure is reported
    print(f"  (brainstate failed: {type(e).__name__}: {str(e)[:120]})")
  return out


def check_same_numbers(members: int, n: int) -> None:
  """The comparison is only fair for the same program: same results."""
  w, v0, tau = inputs(members, n)
  net = Ensemble(bs, w, v0, tau)
  ens = bs.jit(bs.vmap(net.step, in_axes=None,
                       state_in_axes={net.V: 0, net.tau: 0}))
  one, _ = _pure(members)
  v = v0.copy()
  for _ in range(5):
    rate = ens(jnp.float32(1.2))
    v, ref = one(v, tau, w, jnp.float32(1.2))
  np.testing.assert_allclose(np.asarray(net.V.value), np.asarray(v),
                             rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(rate), np.asarray(ref), rtol=1e-6)


def hlo_stats(members: int, n: int) -> dict:
  """Instructions and copies of both optimized one-step programs: equal
  counts mean the same program (the timing ratio is then noise)."""
  w, v0, tau = inputs(members, n)
  net = Ensemble(bs, w, v0, tau)
  ens = bs.jit(bs.vmap(net.step, in_axes=None,
                       state_in_axes={net.V: 0, net.tau: 0}))
  one, _ = _pure(members)
  drive = jnp.float32(1.2)
  out = {}
  for name, compiled in (("brainshard", ens.lower(drive).compile()),
                         ("pure", one.lower(v0, tau, w, drive).compile())):
    lines = [ln for ln in compiled.as_text().splitlines()
             if " = " in ln and "ENTRY" not in ln]
    out[name] = {"instructions": len(lines),
                 "copies": sum(" copy(" in ln for ln in lines)}
  return out


def main(argv=None) -> dict:
  ap = _harness.parser(__doc__, repeats=15, json=True)
  ap.add_argument("--members", type=int, default=64)
  ap.add_argument("--n", type=int, default=256)
  args = ap.parse_args(argv)

  check_same_numbers(args.members, args.n)
  print(f"ensemble of B={args.members} LIF networks, n={args.n}, "
        f"{args.repeats} interleaved repeats on {jax.devices()[0].platform}")
  result = {"members": args.members, "n": args.n, "repeats": args.repeats,
            "hlo": hlo_stats(args.members, args.n)}
  print(f"  optimized HLO of one step: {result['hlo']}")
  for workload, impls in cases(args.members, args.n).items():
    timings = _harness.compare(impls, "pure", repeats=args.repeats)
    label = ("one step per call" if workload == "step"
             else f"for_loop of {LOOP_STEPS} steps per call")
    print(f"  {workload} ({label}):")
    result[workload] = {}
    for name, t in timings.items():
      print(f"    {name:<11} {t.per_call_s * 1e6:9.1f} us  ratio "
            f"{t.ratio:5.3f} [{t.ratio_lo:.3f}, {t.ratio_hi:.3f}]  "
            f"best-time ratio {t.ratio_best:5.3f}")
      result[workload][name] = {"per_call_s": t.per_call_s, "ratio": t.ratio,
                                "ratio_best": t.ratio_best}
  _harness.write_json(args.json, result)
  return result
