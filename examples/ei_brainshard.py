"""The E-I network of ``ei_brainstate.py``, ported to brainshard
(docs/migrating-from-brainstate.md shows the two side by side;
tests/test_migrating.py checks they give the same spikes). With ``axis`` the
same class runs sharded: each device holds its neurons' States and their
rows of the connectivity, and gathers the spikes every step.

  python -m examples.ei_brainshard [--devices 8]
"""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import brainshard as bs
from examples import _cli
from examples.ei_data import DT, PARAMS, connectivity, initial_potential, input_current


# --8<-- [start:model]
class EINet:  # a plain class: brainshard needs no Module base
  def __init__(self, seed: int = 0, axis: str | None = None):
    p = PARAMS
    self.axis = axis
    spec = P(axis) if axis else None  # split the neurons over `axis`
    conn_e, conn_i = connectivity(seed)
    # Constants a sharded step needs per device are States too (read-only):
    # each device then holds only its own rows.
    self.conn_e = bs.State(jnp.asarray(conn_e), name="conn_e", spec=spec)
    self.conn_i = bs.State(jnp.asarray(conn_i), name="conn_i", spec=spec)
    self.v = bs.ShortTermState(jnp.asarray(initial_potential(seed)), "v",
                               spec=spec)
    self.ge = bs.ShortTermState(jnp.zeros(p["n"]), "ge", spec=spec)
    self.gi = bs.ShortTermState(jnp.zeros(p["n"]), "gi", spec=spec)
    self.t_last = bs.ShortTermState(jnp.full(p["n"], -1e7), "t_last",
                                    spec=spec)
    self.spike = bs.ShortTermState(jnp.zeros(p["n"], bool), "spike",
                                   spec=spec)
    self.t = bs.ShortTermState(jnp.asarray(0.0), "t")  # replicated

  def update(self, i_ext):
    p, dt = PARAMS, DT  # brainshard has no global environment: dt is ours
    s = self.spike.value.astype(jnp.float32)
    if self.axis:  # sharded: every device needs every neuron's spike
      s = jax.lax.all_gather(s, self.axis, tiled=True)
    n_exc = p["n_exc"]
    self.ge.value = (self.ge.value * math.exp(-dt / p["taue"])
                     + p["we"] * (self.conn_e.value @ s[:n_exc]))
    self.gi.value = (self.gi.value * math.exp(-dt / p["taui"])
                     + p["wi"] * (self.conn_i.value @ s[n_exc:]))
    v = self.v.value
    v_new = (p["v_rest"] + (v - p["v_rest"]) * math.exp(-dt / p["taum"])
             + (self.ge.value + self.gi.value) * dt / p["taum"] + i_ext)
    t = self.t.value
    refractory = (t - self.t_last.value) < p["t_ref"]
    v_new = jnp.where(refractory, v, v_new)
    spike = v_new >= p["v_th"]
    self.v.value = jnp.where(spike, p["v_reset"], v_new)
    self.t_last.value = jnp.where(spike, t, self.t_last.value)
    self.spike.value = spike
    self.t.value = t + dt
    return spike


def simulate(steps: int = 2000, seed: int = 0, mesh=None):
  """Spikes (steps x n, bool) and the final potentials; on ``mesh`` (one
  axis, ``'x'``) the neurons are split over its devices."""
  net = EINet(seed, axis="x" if mesh is not None else None)
  inputs = jnp.asarray(input_current(steps, seed))
  step = net.update
  if mesh is not None:
    # The States come in and leave with their own spec (P('x')); the
    # input current is split the same way, the spikes come back split.
    step = bs.shard_map(net.update, mesh=mesh, in_specs=P("x"),
                        out_specs=P("x"))

  @bs.jit
  def run(xs):
    return bs.for_loop(step, xs)

  spikes = run(inputs)
  return np.asarray(spikes), np.asarray(net.v.value)

# --8<-- [end:model]

def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m examples.ei_brainshard",
      description=" ".join(__doc__.split("\n\n")[0].split()))
  _cli.add_devices(parser, 1)
  args = parser.parse_args(argv)
  devices = _cli.use_devices(args.devices, parser.prog)
  mesh = None
  if args.devices > 1:
    mesh = jax.make_mesh((args.devices,), ("x",), devices=devices)
  spikes, v = simulate(mesh=mesh)
  rate = spikes.sum() / (PARAMS["n"] * spikes.shape[0] * DT / 1000.0)
  print(f"brainshard on {args.devices} device(s): {spikes.sum()} spikes, "
        f"mean rate {rate:.2f} Hz")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
