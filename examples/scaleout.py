"""One script from one device to many processes: a recurrent rate network
whose neurons are split over every device of every process.

    python -m examples.scaleout                     # the devices this machine has
    python -m examples.scaleout --devices 8         # 8 faked CPU devices
    python -m examples.scaleout --processes 2       # 2 local processes x 4 CPU devices
    srun --ntasks=8 python -m examples.scaleout     # SLURM: one process per task

(Run from the repository root.) The model code never mentions devices or processes: the
weights and rates carry logical axes, one rule maps ``'neuron'`` to the mesh
axis, and the same numbers come out at every scale. See docs/multihost.md.
"""

import argparse
import sys

from examples import _cli


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m examples.scaleout",
                              description=__doc__.splitlines()[0])
  p.add_argument("--neurons", type=int, default=1024,
                 help="network size (default: %(default)s)")
  p.add_argument("--steps", type=int, default=200,
                 help="0.1 ms steps to simulate (default: %(default)s)")
  _cli.add_devices(p, None)
  p.add_argument("--processes", type=int, default=0,
                 help="launch this many local processes of this example")
  p.add_argument("--local-devices", type=int, default=4,
                 help="faked CPU devices per launched process")
  return p.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  if args.processes:  # relaunch this example as a local multi-process run
    from brainshard.launch import launch
    launch(["-m", "examples.scaleout", "--neurons", str(args.neurons),
            "--steps", str(args.steps)], args.processes,
           local_devices=args.local_devices, echo=True)
    return

  import brainshard as bs
  _cli.fake_devices(args.devices)  # before the distributed runtime starts
  bs.init_distributed()  # no-op in a single process; joins the run otherwise
  import jax
  import jax.numpy as jnp
  from jax.sharding import PartitionSpec as P

  mesh = jax.make_mesh((jax.device_count(),), ("x",))
  rules = {"neuron": "x"}
  n, dt = args.neurons, 0.1

  # Created directly in their shards: no device ever holds all of W.
  @bs.sharded_init(mesh=mesh, static_argnums=1)
  def network(key, n):
    W = bs.ParamState(jax.random.normal(key, (n, n)) * 1.5 / n ** 0.5, "W",
                      axes=("neuron", None))
    r = bs.ShortTermState(jnp.linspace(-1.0, 1.0, n), "r", axes=("neuron",))
    return W, r

  @bs.jit
  @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P())
  def step(dt):
    rates = jax.lax.all_gather(r.value, "x", tiled=True)  # every neuron
    r.value = r.value + dt * (-r.value + jnp.tanh(W.value @ rates))
    return jax.lax.pmean(jnp.mean(r.value ** 2), "x")

  with bs.axis_rules(rules):
    W, r = network(jax.random.key(0), n)
    for _ in range(args.steps):
      # Waiting for each step is needed only by multi-process CPU runs
      # (JAX 0.10's gloo runtime can deadlock with dozens of steps in
      # flight; see docs/multihost.md); elsewhere it costs little.
      power = jax.block_until_ready(step(dt))

  power = bs.gather(power)  # a collective: every process calls it
  if jax.process_index() == 0:
    print(f"{jax.process_count()} process(es), {jax.device_count()} "
          f"device(s), mesh {dict(mesh.shape)}")
    print(bs.describe([W, r]))
    print(f"mean squared rate after {args.steps} steps: {float(power):.5f}")


if __name__ == "__main__":
  sys.exit(main())
