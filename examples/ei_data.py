"""The parameters, connectivity, initial potentials and input of the E-I
network that ``ei_brainstate.py`` (the brainstate original) and
``ei_brainshard.py`` (its brainshard port) both simulate. Drawn with NumPy
from a seed, so both get exactly the same network (see
docs/migrating-from-brainstate.md). ``python -m examples.ei_data`` prints
what they build."""

from __future__ import annotations

import argparse

import numpy as np

# A CUBA-like network (Vogels & Abbott 2005, Brette et al. 2007), small: 400
# leaky integrate-and-fire neurons, 80% excitatory, exponential current
# synapses, 5 ms refractory period; potentials in mV, times in ms.
PARAMS = dict(n=400, n_exc=320, p=0.1, taum=20.0, taue=5.0, taui=10.0,
              v_th=-50.0, v_reset=-60.0, v_rest=-49.0, we=1.62, wi=-9.0,
              t_ref=5.0, noise=0.5)
DT = 0.1  # ms


def connectivity(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """0/1 float32 matrices ``conn_e[i, j]`` (excitatory j -> neuron i) and
  ``conn_i`` (inhibitory). Entries are 0 or 1, so ``conn @ spikes`` counts
  the inputs that fired exactly, whatever order a program sums in."""
  rng = np.random.default_rng(seed)
  p = PARAMS
  conn = (rng.random((p["n"], p["n"])) < p["p"]).astype(np.float32)
  np.fill_diagonal(conn, 0.0)
  return conn[:, :p["n_exc"]], conn[:, p["n_exc"]:]


def initial_potential(seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed + 1)
  p = PARAMS
  return rng.uniform(p["v_reset"], p["v_th"], p["n"]).astype(np.float32)


def input_current(steps: int, seed: int = 0) -> np.ndarray:
  """Gaussian noise current, one row per step (mV per step)."""
  rng = np.random.default_rng(seed + 2)
  return (PARAMS["noise"] * rng.standard_normal((steps, PARAMS["n"]))).astype(
      np.float32)


def main(argv: list[str] | None = None) -> None:
  """Prints the network's parameters and connection counts."""
  parser = argparse.ArgumentParser(
      prog="python -m examples.ei_data",
      description="Prints the E-I network that examples.ei_brainstate and "
                  "examples.ei_brainshard simulate.")
  parser.add_argument("--seed", type=int, default=0,
                      help="seeds connectivity, potentials and input")
  args = parser.parse_args(argv)
  conn_e, conn_i = connectivity(args.seed)
  v = initial_potential(args.seed)
  print(f"E-I network (seed {args.seed}), dt = {DT} ms: {PARAMS}")
  print(f"  {int(conn_e.sum())} excitatory and {int(conn_i.sum())} inhibitory "
        f"synapses; v(0) in [{v.min():.1f}, {v.max():.1f}] mV")


if __name__ == "__main__":
  main()
