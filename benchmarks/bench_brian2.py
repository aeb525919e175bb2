"""brainshard vs Brian2 on the same CUBA / COBA network (same connectivity
table, same parameters), on one CPU device: seconds per simulated second and
the spike statistics (rate, ISI CV, active fraction).

``python -m benchmarks brian2 [--neurons 4000] [--duration 1]``.
Brian2 runs its Cython target when a C compiler and Cython are present,
else its numpy target; the output says which.

Example (the Brian2 network, built and run 1 ms):
  >>> import pytest; b2 = pytest.importorskip('brian2')
  >>> run = brian2_run('cuba', 400, target='numpy')[1]
  >>> run(1.0).shape
  (10, 400)
"""

from __future__ import annotations

import os
import pathlib
import platform
import shutil

import numpy as np

from benchmarks import _ei
from benchmarks._harness import clock, parser


def brian2_target() -> str:
  try:
    import Cython  # noqa: F401
  except ImportError:
    return "numpy"
  return "cython" if shutil.which("cc") or shutil.which("gcc") else "numpy"


def brian2_run(model: str, n: int, k: int = 80, seed: int = 0,
               target: str | None = None):
  """The example's network in Brian2 (its connectivity table, its initial
  conditions); returns ``(build_s, run(ms) -> spikes [steps, n])``."""
  import brian2 as b2
  import jax.numpy as jnp
  from examples import cuba
  from brainshard import models as bm
  import brainshard as bs
  p = cuba.Params(model=model, n=n, k=k)
  b2.prefs.codegen.target = target or brian2_target()
  b2.start_scope()
  b2.defaultclock.dt = p.dt * b2.ms
  ms, mV = b2.ms, b2.mV
  ns = dict(taum=p.taum * ms, taue=p.taue * ms, taui=p.taui * ms,
            El=p.el * mV, Ee=p.e_exc * mV, Ei=p.e_inh * mV, I=p.drive * mV)
  if model == "cuba":
    eqs = """dv/dt = (ge + gi - (v - El)) / taum : volt (unless refractory)
             dge/dt = -ge / taue : volt
             dgi/dt = -gi / taui : volt"""
    method, we, wi = "exact", f"ge += {p.we} * mV", f"gi += {p.wi} * mV"
  else:
    eqs = """dv/dt = (El - v + ge * (Ee - v) + gi * (Ei - v) + I) / taum : volt (unless refractory)
             dge/dt = -ge / taue : 1
             dgi/dt = -gi / taui : 1"""
    method, we, wi = "exponential_euler", f"ge += {p.we}", f"gi += {p.wi}"
  # The build: Brian2's objects, the example's table and initial conditions.
  with clock() as build:
    g = b2.NeuronGroup(n, eqs, threshold=f"v > {p.v_th} * mV",
                       reset=f"v = {p.v_reset} * mV", refractory=p.t_ref * ms,
                       method=method, namespace=ns)
    pre = np.asarray(bm.hashed_presynaptic(jnp.arange(n), k, n=n, n_exc=p.n_exc, k=k,
                                    seed=seed))
    post = np.repeat(np.arange(n), k).reshape(n, k)
    k_exc = int(round(0.8 * k))
    se = b2.Synapses(g, g, on_pre=we)
    se.connect(i=pre[:, :k_exc].ravel(), j=post[:, :k_exc].ravel())
    si = b2.Synapses(g, g, on_pre=wi)
    si.connect(i=pre[:, k_exc:].ravel(), j=post[:, k_exc:].ravel())
    rng = bs.RandomState(seed)  # the example's initial conditions
    if model == "cuba":
      g.v = np.asarray(rng.uniform(p.v_reset, p.v_th, size=n)) * mV
    else:
      g.v = np.asarray(rng.normal(-55.0, 5.0, size=n)) * mV
      g.ge = np.asarray(rng.normal(4.0, 1.5, size=n))
      g.gi = np.asarray(rng.normal(20.0, 12.0, size=n))
    mon = b2.SpikeMonitor(g)
    net = b2.Network(g, se, si, mon)
  build_s = build.s
  done = [0]

  def run(duration_ms):
    steps = int(round(duration_ms / p.dt))
    net.run(duration_ms * ms)
    t = np.round(np.asarray(mon.t / ms) / p.dt).astype(int) - done[0]
    keep = t >= 0
    out = np.zeros((steps, n), bool)
    out[t[keep], np.asarray(mon.i)[keep]] = True
    done[0] += steps
    return out

  return build_s, run


def compare(model: str, n: int, duration_ms: float, seeds=(0,)) -> list[dict]:
  """One row per (implementation, seed): s per simulated second and stats."""
  rows = []
  for seed in seeds:
    for impl, make in (("brainshard", _ei.brainshard_run),
                       ("pure JAX", _ei.pure_run), ("Brian2", brian2_run)):
      build_s, run = make(model, n, seed=seed)
      t = _ei.time_run(run, duration_ms)
      rows.append(dict(impl=impl, model=model, n=n, seed=seed,
                       build_s=build_s, s_per_sim_s=t["s_per_sim_s"],
                       **_ei.stats(t["spikes"], 0.1)))
  return rows


def main(argv=None) -> list[dict]:
  ap = parser(__doc__)
  ap.add_argument("--neurons", type=int, default=4000)
  ap.add_argument("--duration", type=float, default=1.0, help="seconds")
  ap.add_argument("--seeds", type=int, default=2)
  ap.add_argument("--models", default="cuba,coba")
  args = ap.parse_args(argv)
  print(f"Brian2 code generation target: {brian2_target()}"
        + ("" if brian2_target() == "cython" else
           " (NO C compiler or Cython: numpy target, slower than Cython)"))
  rows = []
  for model in args.models.split(","):
    rows += compare(model, args.neurons, args.duration * 1e3,
                    seeds=range(args.seeds))
  text = (f"Measured by `python -m benchmarks brian2` on "
          f"{platform.node()} ({os.cpu_count()} CPU cores), one CPU device, "
          f"Brian2 {brian2_version()} ({brian2_target()} target).\n\n"
          + table(rows) + "\n")
  out = pathlib.Path(__file__).resolve().parent / "results" / "brian2.md"
  out.parent.mkdir(exist_ok=True)
  out.write_text(text)
  print(text)
  return rows


def brian2_version() -> str:
  import brian2
  return brian2.__version__


def table(rows: list[dict]) -> str:
  lines = ["| model | N | implementation | seed | s per simulated s | rate (Hz) "
           "| ISI CV | active |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['model']} | {r['n']} | {r['impl']} | {r['seed']} | "
                 f"{r['s_per_sim_s']:.3f} | {r['rate_hz']:.2f} | "
                 f"{r['isi_cv']:.3f} | {r['active']:.3f} |")
  return "\n".join(lines)
