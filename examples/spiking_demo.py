"""A small spiking network, sharded over 8 (faked) CPU devices.

Each device owns a contiguous block of leaky integrate-and-fire neurons: their
membrane potentials and spikes (``ShortTermState`` with ``spec=P('x')``) and
their rows of the recurrent weight matrix (``ParamState`` with
``spec=P('x', None)``). Every step, each shard gathers the whole spike vector
(``jax.lax.all_gather``), integrates its own neurons and writes its block of
the states back. The step is ``bs.jit(bs.shard_map(step))``, driven by a
plain Python loop.

    python -m examples.spiking_demo --devices 8 --neurons 4000 --steps 2000
"""

from __future__ import annotations

import argparse
import sys
import time

from examples import _cli


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m examples.spiking_demo",
                              description=__doc__.splitlines()[0])
  _cli.add_devices(p, 8)
  p.add_argument("--neurons", type=int, default=4000,
                 help="network size, divisible by --devices "
                      "(default: %(default)s)")
  p.add_argument("--steps", type=int, default=2000,
                 help="0.1 ms steps to simulate (default: %(default)s)")
  p.add_argument("--seed", type=int, default=0,
                 help="seeds the weights and initial potentials")
  return p.parse_args(argv)


def main(argv=None) -> dict:
  args = parse_args(argv)
  devices = _cli.use_devices(args.devices, "python -m examples.spiking_demo")
  import jax
  import jax.numpy as jnp
  from jax.sharding import PartitionSpec as P

  import brainshard as bs

  n, dt = args.neurons, 0.1                     # neurons, ms
  tau, v_rest, v_th, v_reset = 20.0, -60.0, -50.0, -60.0   # ms, mV
  drive = 10.5                                  # mV of constant input
  if n % len(devices):
    sys.exit(f"--neurons {n} must be divisible by {len(devices)} devices")

  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices)
  k_v, k_conn = jax.random.split(jax.random.key(args.seed))
  n_exc = int(0.8 * n)
  connected = jax.random.bernoulli(k_conn, 0.02, (n, n))
  jump = jnp.where(jnp.arange(n) < n_exc, 0.25, -1.25)  # mV per presynaptic spike
  weights = jnp.where(connected, jump[None, :], 0.0)

  v = bs.ShortTermState(
      jax.random.uniform(k_v, (n,), minval=v_reset, maxval=v_th),
      name="v", spec=P("x"))
  spiked = bs.ShortTermState(jnp.zeros(n, bool), name="spiked", spec=P("x"))
  w = bs.ParamState(weights, name="w", spec=P("x", None))

  @bs.jit
  @bs.shard_map(mesh=mesh, in_specs=(), out_specs=P())
  def step():
    presyn = jax.lax.all_gather(spiked.value, "x", tiled=True)
    recurrent = w.value @ presyn.astype(jnp.float32)
    v_new = v.value + dt / tau * (v_rest - v.value + drive) + recurrent
    fired = v_new >= v_th
    v.value = jnp.where(fired, v_reset, v_new)
    spiked.value = fired
    return jax.lax.psum(fired.sum(), "x")

  step().block_until_ready()                   # trace + compile
  total = 0
  start = time.perf_counter()
  for _ in range(args.steps):
    # Reading the count waits for the step. Besides being what a driver loop
    # does, this matters on faked CPU devices: XLA's in-process collectives
    # can deadlock when many steps with an all_gather are queued at once.
    total += int(step())
  elapsed = time.perf_counter() - start
  seconds = args.steps * dt / 1000.0
  rate = total / n / seconds
  print(f"{n} LIF neurons on {len(devices)} device(s), "
        f"{args.steps} steps of {dt} ms")
  print(f"v: {v!r}")
  print(f"mean rate: {rate:.1f} Hz")
  print(f"time per step: {elapsed / args.steps * 1e6:.0f} us "
        f"({elapsed / seconds:.2f} s per simulated second)")
  return {"rate_hz": rate, "us_per_step": elapsed / args.steps * 1e6}


if __name__ == "__main__":
  main()
