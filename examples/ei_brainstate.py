"""The E-I network written for brainstate 0.5.4 (the original that
``ei_brainshard.py`` ports; docs/migrating-from-brainstate.md shows both).
Needs brainstate, which no extra of brainshard installs:
``pip install "brainstate>=0.5.4,<0.6"``.

  python -m examples.ei_brainstate
"""

from __future__ import annotations

import argparse
import math
import sys

import jax.numpy as jnp
import numpy as np

from examples.ei_data import DT, PARAMS, connectivity, initial_potential, input_current

PROG = "python -m examples.ei_brainstate"
INSTALL = "brainstate>=0.5.4,<0.6"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog=PROG, description="The E-I network in brainstate (the original "
      f"that examples.ei_brainshard ports). Needs: pip install \"{INSTALL}\".")
  parser.add_argument("--steps", type=int, default=2000,
                      help="0.1 ms steps to simulate (default: %(default)s)")
  return parser.parse_args(argv)


if __name__ == "__main__":  # --help works without brainstate
  ARGS = parse_args()
try:
  import brainstate
except ImportError as err:
  if __name__ != "__main__":
    raise
  sys.exit(f"{PROG} needs brainstate ({err}): pip install \"{INSTALL}\"")


# --8<-- [start:model]
class EINet(brainstate.nn.Module):
  def __init__(self, seed: int = 0):
    super().__init__()
    p = PARAMS
    conn_e, conn_i = connectivity(seed)
    self.conn_e = jnp.asarray(conn_e)
    self.conn_i = jnp.asarray(conn_i)
    self.v = brainstate.HiddenState(jnp.asarray(initial_potential(seed)))
    self.ge = brainstate.HiddenState(jnp.zeros(p["n"]))
    self.gi = brainstate.HiddenState(jnp.zeros(p["n"]))
    self.t_last = brainstate.ShortTermState(jnp.full(p["n"], -1e7))
    self.spike = brainstate.ShortTermState(jnp.zeros(p["n"], bool))
    self.t = brainstate.ShortTermState(jnp.asarray(0.0))

  def update(self, i_ext):
    p, dt = PARAMS, brainstate.environ.get_dt()
    s = self.spike.value.astype(jnp.float32)
    n_exc = p["n_exc"]
    self.ge.value = (self.ge.value * math.exp(-dt / p["taue"])
                     + p["we"] * (self.conn_e @ s[:n_exc]))
    self.gi.value = (self.gi.value * math.exp(-dt / p["taui"])
                     + p["wi"] * (self.conn_i @ s[n_exc:]))
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


def simulate(steps: int = 2000, seed: int = 0):
  """Spikes (steps x n, bool) and the final potentials."""
  brainstate.environ.set(dt=DT)
  net = EINet(seed)
  inputs = jnp.asarray(input_current(steps, seed))

  @brainstate.transform.jit
  def run(xs):
    return brainstate.transform.for_loop(net.update, xs)

  spikes = run(inputs)
  return np.asarray(spikes), np.asarray(net.v.value)

# --8<-- [end:model]

if __name__ == "__main__":
  spikes, v = simulate(ARGS.steps)
  rate = spikes.sum() / (PARAMS["n"] * spikes.shape[0] * DT / 1000.0)
  print(f"brainstate: {spikes.sum()} spikes, mean rate {rate:.2f} Hz")
