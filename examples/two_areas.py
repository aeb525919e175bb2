"""Two coupled E/I areas on two halves of the devices (sub-mesh tasks, MPMD).

Area A (1,600 LIF neurons) and area B (800, other time constant and drive)
each run as a ``bs.task`` on its own half of the devices, with its States
created there (``bs.sharded_init``). Every K steps (the synaptic delay
between the areas) each task advances K steps in one ``bs.for_loop`` and
hands the other its K steps of spikes; the Python loop never waits for the
devices, so both halves compute at once. ``--spmd`` runs the same model as
one program on one mesh over all devices, for comparison: the spikes and
final States are bit for bit the same (input counts are integers).

    python -m examples.two_areas --devices 8 --delay 10
    python -m examples.two_areas --devices 8 --delay 10 --spmd
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import brainshard as bs
from examples import _cli

DT, STEPS_PER_MS = 0.1, 10


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m examples.two_areas",
                              description=__doc__.splitlines()[0])
  _cli.add_devices(p, 8)
  p.add_argument("--delay", type=int, default=10, metavar="D",
                 help="synaptic delay between the areas in 0.1 ms steps "
                      "(default: %(default)s)")
  p.add_argument("--duration", type=float, default=0.2, metavar="S",
                 help="simulated time in seconds (default: %(default)s)")
  p.add_argument("--spmd", action="store_true",
                 help="one program on one mesh instead of two tasks")
  return p.parse_args(argv)

# Different sizes and parameters per area; weights are integer counts times
# a per-area scale, so every sum is exact whatever the sharding.
AREAS = {"A": dict(n=1600, tau=20.0, drive=1.3, w_rec=0.9, w_in=0.6, seed=1),
         "B": dict(n=800, tau=10.0, drive=1.15, w_rec=0.7, w_in=0.9, seed=2)}
THRESHOLD, RESET, P_REC, P_IN = 1.0, 0.0, 0.02, 0.02


class Area:
  """One E/I population: States made on ``mesh`` (sharded over 'x')."""

  def __init__(self, name: str, n_other: int, mesh):
    c = AREAS[name]
    self.name, self.n = name, c["n"]
    rng = np.random.default_rng(c["seed"])
    w_rec = (rng.random((c["n"], c["n"])) < P_REC).astype(np.int32)
    w_rec[:, int(0.8 * c["n"]):] *= -4          # the last 20% inhibit
    w_in = (rng.random((c["n"], n_other)) < P_IN).astype(np.int32)
    v0 = rng.random(c["n"]).astype(np.float32)

    @bs.sharded_init(mesh=mesh)
    def init():
      return dict(
          v=bs.State(jnp.asarray(v0), f"{name}.v", spec=P("x")),
          s=bs.State(jnp.zeros(c["n"], jnp.float32), f"{name}.s", spec=P("x")),
          w_rec=bs.State(jnp.asarray(w_rec), f"{name}.w_rec", spec=P("x")),
          w_in=bs.State(jnp.asarray(w_in), f"{name}.w_in", spec=P("x")))
    self.states = init()
    self.decay = float(np.exp(-DT / c["tau"]))
    self.c = c

  def block(self, other_spikes):
    """K steps of this area, per shard: given this shard's columns of the
    other area's previous K steps of spikes (``[K, n_other / devices]``),
    returns this shard's columns of its own ``[K, n / devices]``."""
    st, c = self.states, self.c
    other_spikes = jax.lax.all_gather(other_spikes, "x", axis=1, tiled=True)

    def step(incoming):
      s_all = jax.lax.all_gather(st["s"].value, "x", tiled=True)
      rec = st["w_rec"].value @ s_all.astype(jnp.int32)
      inp = st["w_in"].value @ incoming.astype(jnp.int32)
      v = (st["v"].value * self.decay + c["drive"] * (1 - self.decay)
           + c["w_rec"] * 0.01 * rec + c["w_in"] * 0.01 * inp)
      spike = v > THRESHOLD
      st["v"].value = jnp.where(spike, RESET, v)
      st["s"].value = spike.astype(jnp.float32)
      return st["s"].value

    return bs.for_loop(step, other_spikes)


def build(mesh_a, mesh_b):
  a = Area("A", AREAS["B"]["n"], mesh_a)
  b = Area("B", AREAS["A"]["n"], mesh_b)
  return a, b


def mpmd(delay: int, devices: int = 8):
  """Each area a task on its half of the devices. Returns ``(a, b, step)``:
  ``step(sa, sb)`` advances both areas ``delay`` steps given each other's
  last block of spikes, and returns the new blocks."""
  mesh_a, mesh_b = bs.split_mesh(jax.devices()[:devices],
                                 (devices // 2, devices - devices // 2))
  a, b = build(mesh_a, mesh_b)
  spec = P(None, "x")  # [K steps, neurons]: neurons split over the devices
  task_a = bs.task(a.block, mesh=mesh_a, in_specs=spec, out_specs=spec,
                   name="area A")
  task_b = bs.task(b.block, mesh=mesh_b, in_specs=spec, out_specs=spec,
                   name="area B")
  bs.check_disjoint(task_a, task_b)

  def step(sa, sb):  # never waits: both halves compute at once
    return task_a(sb), task_b(sa)
  step.tasks = (task_a, task_b)
  return a, b, step


def spmd(delay: int, devices: int = 8):
  """The same model as one program over one mesh of all the devices."""
  mesh = jax.make_mesh((devices,), ("x",))
  a, b = build(mesh, mesh)
  spec = P(None, "x")

  @bs.jit
  @bs.shard_map(mesh=mesh, in_specs=(spec, spec), out_specs=(spec, spec))
  def both(sa, sb):
    return a.block(sb), b.block(sa)

  return a, b, both


def simulate(a, b, step, steps: int, delay: int, progress: bool = False):
  """Runs ``steps`` steps in blocks of ``delay``; the blocks of spikes."""
  sa = jnp.zeros((delay, a.n), jnp.float32)
  sb = jnp.zeros((delay, b.n), jnp.float32)
  _, blocks = bs.run_tasks(step, (sa, sb), steps // delay,
                           steps_per_block=delay, progress=progress)
  return [x for x, _ in blocks], [y for _, y in blocks]


def run_mpmd(steps: int, delay: int, devices: int = 8):
  """Two tasks on two halves; returns (area A, area B, (spikes A, B))."""
  a, b, step = mpmd(delay, devices)
  return a, b, simulate(a, b, step, steps, delay)


def run_spmd(steps: int, delay: int, devices: int = 8):
  """One SPMD program; returns (area A, area B, (spikes A, B))."""
  a, b, step = spmd(delay, devices)
  return a, b, simulate(a, b, step, steps, delay)


def rates(spikes, n: int, steps: int) -> float:
  """Mean firing rate in Hz."""
  total = sum(float(jnp.sum(x)) for x in spikes)
  return total / n / (steps * DT / 1000.0)


def main(argv=None):
  args = parse_args(argv)
  _cli.use_devices(args.devices, "python -m examples.two_areas")
  steps = int(args.duration * 1e3 * STEPS_PER_MS) // args.delay * args.delay
  a, b, step = (spmd if args.spmd else mpmd)(args.delay, args.devices)
  t0 = time.perf_counter()
  out_a, out_b = simulate(a, b, step, steps, args.delay, progress=True)
  wall = time.perf_counter() - t0
  ra, rb = rates(out_a, a.n, steps), rates(out_b, b.n, steps)
  print(f"{'SPMD, one mesh' if args.spmd else 'two tasks, two sub-meshes'}: "
        f"{steps} steps, delay {args.delay}: area A {ra:.2f} Hz, area B "
        f"{rb:.2f} Hz ({wall:.2f} s with compile)")
  print(bs.describe({"A": a.states, "B": b.states}))
  return ra, rb


if __name__ == "__main__":
  main()
