"""A parameter sweep with ``bs.vmap``: B copies of a CUBA network, one per
excitatory weight, stepped at once and sharded over devices.

The network is the CUBA benchmark of Vogels & Abbott (2005) / Brette et al.
(2007) (see :mod:`examples.cuba`), made smaller: ``n`` LIF neurons, 80 %
excitatory, each pair connected with probability ``80 / n`` (so every neuron
keeps about 80 inputs), exact subthreshold integration, 5 ms refractory
period, dt = 0.1 ms. The resting potential El = -49 mV lies above threshold,
so activity is self-sustained; inhibition (wi = -9 mV) keeps it low, and
stronger excitation raises it.

The ensemble: the State ``we`` holds B excitatory weights, one per member,
and the dynamic States (``v``, ``ge``, ``gi``, ``refractory``, ``count``)
one row per member; the connectivity is one State shared by all members.
``bs.vmap(step, state_in_axes={bs.ShortTermState: 0, we: 0})`` steps all B
networks at once. Each member draws its own random initial potentials
(``bs.vmap`` folds the member index into the key), reproducibly from the
seed. With ``--devices D`` the members are split over a mesh axis with
``bs.shard_map`` (each device runs B / D networks); the random draws and the
spike counts (integer input counts) are the same as on one device.

Usage (the plot goes into ``results/``; ``--duration`` in seconds):
  python -m examples.ensemble --devices 8 --members 32 --plot rates.png
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from examples import _cli


@dataclass(frozen=True)
class Params:
  n: int = 400
  inputs: float = 80.0   # mean number of inputs per neuron
  dt: float = 0.1        # ms
  taum: float = 20.0     # ms
  taue: float = 5.0      # ms
  taui: float = 10.0     # ms
  el: float = -49.0      # mV
  v_th: float = -50.0    # mV
  v_reset: float = -60.0  # mV
  t_ref: float = 5.0     # ms
  wi: float = -20 * 4.5 / 10  # mV

  @property
  def n_exc(self) -> int:
    return int(round(0.8 * self.n))


class Ensemble:
  """B CUBA networks that differ in their excitatory weight.

  Args:
    weights: the B excitatory weights (mV); B must split over ``mesh``.
    mesh: a 1-D mesh with axis ``'x'`` to shard the members over, or None.
    n: neurons per network.
    seed: seeds the (shared) connectivity and the initial potentials.
  """

  def __init__(self, weights: Any, mesh: Any = None, n: int = 400,
               seed: int = 0):
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import brainshard as bs

    p = self.params = Params(n=n)
    b = self.members = len(weights)
    rng = np.random.default_rng(seed)
    conn = rng.random((n, n)) < min(1.0, p.inputs / n)  # [post, pre]
    self.conn = bs.ParamState(jnp.asarray(conn, jnp.float32), name="conn")
    self.we = bs.ParamState(jnp.asarray(weights, jnp.float32), name="we")
    self.v = bs.ShortTermState(jnp.zeros((b, n)), name="v")
    self.ge = bs.ShortTermState(jnp.zeros((b, n)), name="ge")
    self.gi = bs.ShortTermState(jnp.zeros((b, n)), name="gi")
    self.refractory = bs.ShortTermState(jnp.zeros((b, n), jnp.int32),
                                        name="refractory")
    self.count = bs.ShortTermState(jnp.zeros(b, jnp.int32), name="count")
    self.rng = bs.RandomState(seed, name="rng")

    # One member's step; the dict batches every ShortTermState and `we`
    # along axis 0 and shares `conn` and the RandomState.
    batched = {bs.ShortTermState: 0, self.we: 0}
    self.step = bs.vmap(self._step, state_in_axes=batched)
    # `_reset` only writes: state_out_axes batches what it writes (and the
    # batch size comes from those States' shapes).
    self.reset = bs.vmap(self._reset, state_out_axes=batched)
    if mesh is not None:
      specs = {bs.ShortTermState: P("x"), self.we: P("x")}
      self.step = bs.shard_map(self.step, mesh=mesh, in_specs=(),
                               out_specs=P(), state_in_specs=specs)
      self.reset = bs.shard_map(self.reset, mesh=mesh, in_specs=(),
                                out_specs=P(), state_in_specs=specs)

  def _reset(self) -> None:
    p = self.params
    self.v.value = self.rng.uniform(p.v_reset, p.v_th, size=p.n)
    for s in (self.ge, self.gi):
      s.value = jax_zeros(p.n)
    self.refractory.value = jax_zeros(p.n, "int32")
    self.count.value = jax_zeros((), "int32")

  def _step(self) -> None:
    import jax.numpy as jnp
    p = self.params
    decay_m = math.exp(-p.dt / p.taum)
    decay_e = math.exp(-p.dt / p.taue)
    decay_i = math.exp(-p.dt / p.taui)
    be = p.taue / (p.taue - p.taum) * (decay_e - decay_m)
    bi = p.taui / (p.taui - p.taum) * (decay_i - decay_m)
    v, ge, gi = self.v.value, self.ge.value, self.gi.value
    refractory = self.refractory.value
    resting = refractory > 0
    v_new = p.el + (v - p.el) * decay_m + ge * be + gi * bi
    v_new = jnp.where(resting, v, v_new)  # clamped while refractory
    spikes = (v_new > p.v_th) & ~resting
    self.v.value = jnp.where(spikes, p.v_reset, v_new)
    self.refractory.value = jnp.where(
        spikes, int(round(p.t_ref / p.dt)), jnp.maximum(refractory - 1, 0))
    # Inputs counted exactly (0/1 matrix times 0/1 spikes), so the result
    # does not depend on how the members are batched or sharded.
    s = spikes.astype(jnp.float32)
    c = self.conn.value
    n_exc = p.n_exc
    self.ge.value = ge * decay_e + self.we.value * (c[:, :n_exc] @ s[:n_exc])
    self.gi.value = gi * decay_i + p.wi * (c[:, n_exc:] @ s[n_exc:])
    self.count.value = self.count.value + spikes.sum(dtype=jnp.int32)

  def run(self, duration_ms: float) -> np.ndarray:
    """Simulates every member from fresh initial conditions; returns the
    mean firing rate (Hz) of each member."""
    import brainshard as bs
    steps = int(round(duration_ms / self.params.dt))
    self.reset()
    bs.jit(lambda: bs.for_loop(self.step, length=steps))()
    count = np.asarray(self.count.value)
    return count / (self.params.n * duration_ms * 1e-3)


def jax_zeros(shape: Any, dtype: str = "float32") -> Any:
  import jax.numpy as jnp
  return jnp.zeros(shape, dtype)


def save_plot(weights: Any, rates: Any, path: str, title: str) -> bool:
  """Firing rate against the excitatory weight; False without matplotlib."""
  plt = _cli.pyplot("python -m examples.ensemble")
  if plt is None:
    return False
  fig, ax = plt.subplots(figsize=(5, 3.5))
  ax.plot(weights, rates, "o-")
  ax.set_xlabel("excitatory weight we (mV)")
  ax.set_ylabel("mean firing rate (Hz)")
  ax.set_title(title)
  fig.tight_layout()
  fig.savefig(_cli.output_path(path), dpi=120)
  plt.close(fig)
  return True


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(
      prog="python -m examples.ensemble",
      description="Sweep the excitatory weight of a CUBA network with "
                  "bs.vmap, sharded over devices.")
  _cli.add_devices(parser, 1)
  parser.add_argument("--members", type=int, default=16,
                      help="number of networks (weights) in the ensemble")
  parser.add_argument("--n", type=int, default=400, help="neurons per network")
  parser.add_argument("--duration", type=float, default=0.2,
                      help="simulated time in seconds")
  parser.add_argument("--wmax", type=float, default=3.2,
                      help="largest excitatory weight (mV); the sweep starts "
                           "at 0")
  parser.add_argument("--seed", type=int, default=0,
                      help="seeds connectivity and initial potentials")
  parser.add_argument("--plot", default="ensemble.png", metavar="PNG",
                      help="where to save the rate-vs-weight plot (a bare "
                           "file name goes into results/; '' for none)")
  args = parser.parse_args(argv)

  devices = _cli.use_devices(args.devices, parser.prog)
  import jax
  if args.members % args.devices:
    sys.exit(f"{args.members} members do not split over {args.devices} "
             "devices")
  mesh = None
  if args.devices > 1:
    mesh = jax.make_mesh((args.devices,), ("x",), devices=devices)
  weights = np.linspace(0.0, args.wmax, args.members)
  t0 = time.perf_counter()
  ens = Ensemble(weights, mesh, n=args.n, seed=args.seed)
  rates = ens.run(args.duration * 1e3)
  elapsed = time.perf_counter() - t0
  print(f"{args.members} CUBA networks of {args.n} neurons on "
        f"{args.devices} device(s), {args.duration:g} s simulated in "
        f"{elapsed:.1f} s (compile included)")
  for w, r in zip(weights, rates):
    print(f"  we = {w:5.2f} mV: {r:7.2f} Hz")
  if args.plot and save_plot(weights, rates, args.plot,
                             f"CUBA, {args.n} neurons, {args.devices} device(s)"):
    print(f"  plot saved to {_cli.output_path(args.plot)}")
  return dict(weights=weights, rates=rates, seconds=elapsed)


if __name__ == "__main__":
  main()
