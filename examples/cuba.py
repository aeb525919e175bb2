"""The CUBA / COBA benchmark network, sharded over devices with brainshard.

The network of Vogels & Abbott (2005) as specified for Benchmarks 1 and 2 of
the simulator review of Brette et al. (2007): 4000 leaky integrate-and-fire
neurons, 3200 excitatory and 800 inhibitory, each pair connected with
probability 2%, 5 ms refractory period, dt = 0.1 ms, no external input (the
activity is self-sustained from random initial potentials).

- CUBA (Benchmark 2): current-based exponential synapses,
  ``dv/dt = (ge + gi - (v - El)) / taum``, El = -49 mV, taum = 20 ms,
  taue = 5 ms, taui = 10 ms, Vt = -50 mV, Vr = -60 mV,
  we = 60 * 0.27 / 10 = 1.62 mV, wi = -20 * 4.5 / 10 = -9 mV,
  v(0) uniform in [Vr, Vt]. Parameters as in Brian 2's "CUBA" example
  (https://brian2.readthedocs.io/en/stable/examples/CUBA.html) and PyNN's
  ``VAbenchmarks.py``; subthreshold dynamics integrated exactly.
- COBA (Benchmark 1): conductance-based synapses,
  ``dv/dt = (El - v + ge (Ee - v) + gi (Ei - v) + I) / taum`` with
  El = -60 mV, Ee = 0 mV, Ei = -80 mV, ge/gi in units of the leak
  conductance, we = 0.6, wi = 6.7; v(0) ~ N(-55, 5) mV, ge(0) ~ N(4, 1.5),
  gi(0) ~ N(20, 12) as in Brette's Brian script for the review. Without
  input that activity dies out within ~30 ms, so, like the ANNarchy and
  BrainPy versions of this benchmark, a constant drive I = 20 mV keeps the
  network active; exponential-Euler integration.

Reference firing rates: the review gives no single number for the mean
rate; executed reference implementations report a mean rate of about 5.6 Hz
for CUBA and about 20 Hz for COBA over 1 s (ANNarchy's "COBA and CUBA
networks" notebook, https://annarchy.github.io/notebooks/COBA.html). The
mean rate depends on the random connectivity and initial conditions (the
network is chaotic), so :data:`RATE_RANGE` accepts 3-10 Hz for CUBA and
10-35 Hz for COBA around those references.

How it is sharded: the neuron state is split over the mesh axis ``'x'``
(``P('x')``); each shard holds its rows of the connectivity, stored per
presynaptic neuron as the padded list of its targets on that shard (about
80 / n_shards entries); every step the shards ``all_gather`` the spikes and,
visiting only the neurons that fired, count for each local neuron how many
of its excitatory and inhibitory inputs fired. Connectivity and initial
conditions are drawn globally from the seed, independent of the mesh, and
the input counts are summed as integers, so the same seed gives
bit-identical spikes on 1 and 8 devices.

Usage:
  python examples/cuba.py --devices 8 --duration 1.0 --plot raster.png
  python examples/cuba.py --model coba --devices 4
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# How many spikes one step delivers at most, per branch (a step usually has
# a few: 4000 neurons at ~5 Hz fire ~2 spikes per 0.1 ms step).
CHUNKS = (16, 256)

# (low, high) mean rate in Hz accepted for a 1 s run; see the module docstring.
RATE_RANGE = {"cuba": (3.0, 10.0), "coba": (10.0, 35.0)}


@dataclass(frozen=True)
class Params:
  model: str = "cuba"
  n: int = 4000
  n_exc: int = 3200
  p_connect: float = 0.02
  dt: float = 0.1        # ms
  taum: float = 20.0     # ms
  taue: float = 5.0      # ms
  taui: float = 10.0     # ms
  v_th: float = -50.0    # mV
  v_reset: float = -60.0  # mV
  t_ref: float = 5.0     # ms
  el: float = field(default=None)  # mV; -49 (CUBA) or -60 (COBA)
  we: float = field(default=None)
  wi: float = field(default=None)
  e_exc: float = 0.0     # mV, COBA only
  e_inh: float = -80.0   # mV, COBA only
  drive: float = 20.0    # mV, COBA only: constant input I

  def __post_init__(self):
    if self.model not in ("cuba", "coba"):
      raise ValueError(f"model must be 'cuba' or 'coba', got {self.model!r}")
    cuba = self.model == "cuba"
    defaults = dict(el=-49.0 if cuba else -60.0,
                    we=60 * 0.27 / 10 if cuba else 0.6,
                    wi=-20 * 4.5 / 10 if cuba else 6.7)
    for k, v in defaults.items():
      if getattr(self, k) is None:
        object.__setattr__(self, k, v)

  @property
  def ref_steps(self) -> int:
    return int(round(self.t_ref / self.dt))


def connectivity(params: Params, seed: int) -> np.ndarray:
  """The random connectivity as a boolean matrix ``[post, pre]``.

  Drawn row by row from one NumPy stream, so it does not depend on the
  mesh the network later runs on.
  """
  rng = np.random.default_rng(seed)
  n = params.n
  rows = [rng.random((min(500, n - start), n)) < params.p_connect
          for start in range(0, n, 500)]
  return np.concatenate(rows)


def local_targets(conn: np.ndarray, n_shards: int) -> np.ndarray:
  """Per shard, the local targets of every presynaptic neuron.

  Returns int32 ``[n_shards * n, k]``: rows ``s*n .. (s+1)*n - 1`` belong to
  shard ``s`` and list, for presynaptic neuron ``j``, the indices (local to
  shard ``s``) of the neurons ``j`` connects to; padding entries hold
  ``n_local``, a slot that is dropped.
  """
  n = conn.shape[0]
  n_local = n // n_shards
  blocks = [conn[s * n_local:(s + 1) * n_local].T for s in range(n_shards)]
  k = max(int(b.sum(1).max()) for b in blocks)
  out = np.full((n_shards, n, k), n_local, np.int32)
  for s, block in enumerate(blocks):  # block: [pre, local post]
    pre, post = np.nonzero(block)     # sorted by pre, then post
    starts = np.searchsorted(pre, np.arange(n))
    rank = np.arange(len(pre)) - starts[pre]
    out[s, pre, rank] = post
  return out.reshape(n_shards * n, k)


class EINetwork:
  """The E/I network as brainshard States, sharded over ``mesh`` axis 'x'.

  Args:
    mesh: a 1-D ``jax.sharding.Mesh`` with axis ``'x'`` (its size must
      divide the number of neurons).
    model: ``'cuba'`` or ``'coba'``.
    seed: seeds connectivity and initial conditions (mesh-independent).
  """

  def __init__(self, mesh: Any, model: str = "cuba", seed: int = 0,
               n: int = 4000):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import brainshard as bs

    self.mesh = mesh
    self.params = Params(model=model, n=n, n_exc=int(round(0.8 * n)))
    self.seed = seed
    sharded = NamedSharding(mesh, P("x"))
    put = lambda x: jax.device_put(x, sharded)  # noqa: E731
    n_shards = mesh.shape["x"]
    if n % n_shards:
      raise ValueError(f"{n} neurons do not split over {n_shards} devices")
    # Read-only inside the loop: the loop closes over it (no carry).
    self.targets = bs.ParamState(
        put(local_targets(connectivity(self.params, seed), n_shards)),
        name="targets", spec=P("x"))
    zeros = put(jnp.zeros(n))
    self.v = bs.ShortTermState(zeros, name="v", spec=P("x"))
    self.ge = bs.ShortTermState(zeros, name="ge", spec=P("x"))
    self.gi = bs.ShortTermState(zeros, name="gi", spec=P("x"))
    self.refractory = bs.ShortTermState(
        put(jnp.zeros(n, jnp.int32)), name="refractory", spec=P("x"))
    self.step = bs.shard_map(self._step, mesh=mesh, in_specs=(),
                             out_specs=P("x"))
    self._runs: dict = {}
    self.reset()

  def reset(self, seed: int | None = None) -> None:
    """Draws the initial conditions (globally: the same on any mesh)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import brainshard as bs

    p = self.params
    rng = bs.RandomState(self.seed if seed is None else seed)
    put = lambda x: jax.device_put(x, NamedSharding(self.mesh, P("x")))  # noqa: E731
    if p.model == "cuba":
      self.v.value = put(rng.uniform(p.v_reset, p.v_th, size=p.n))
      self.ge.value = put(self.ge.value * 0)
      self.gi.value = put(self.gi.value * 0)
    else:
      self.v.value = put(rng.normal(-55.0, 5.0, size=p.n))
      self.ge.value = put(rng.normal(4.0, 1.5, size=p.n))
      self.gi.value = put(rng.normal(20.0, 12.0, size=p.n))
    self.refractory.value = put(self.refractory.value * 0)

  def dynamic_states(self) -> dict:
    """The States a checkpoint holds: all but the connectivity, whose layout
    depends on the mesh and which is rebuilt from the seed."""
    return {"v": self.v, "ge": self.ge, "gi": self.gi,
            "refractory": self.refractory}

  # -- one time step, per shard ---------------------------------------------

  def _integrate(self, v, ge, gi):
    import jax.numpy as jnp
    p = self.params
    decay_m = math.exp(-p.dt / p.taum)
    decay_e = math.exp(-p.dt / p.taue)
    decay_i = math.exp(-p.dt / p.taui)
    if p.model == "cuba":
      # Exact solution of the linear subthreshold system over one step.
      be = p.taue / (p.taue - p.taum) * (decay_e - decay_m)
      bi = p.taui / (p.taui - p.taum) * (decay_i - decay_m)
      v_new = p.el + (v - p.el) * decay_m + ge * be + gi * bi
    else:
      # Exponential Euler with the conductances held over the step.
      g_tot = 1.0 + ge + gi
      v_inf = (p.el + p.drive + ge * p.e_exc + gi * p.e_inh) / g_tot
      v_new = v_inf + (v - v_inf) * jnp.exp(-p.dt / p.taum * g_tot)
    return v_new, ge * decay_e, gi * decay_i

  def _step(self):
    import jax
    import jax.numpy as jnp
    p = self.params
    refractory = self.refractory.value
    resting = refractory > 0
    v, ge, gi = self._integrate(self.v.value, self.ge.value, self.gi.value)
    v = jnp.where(resting, self.v.value, v)  # clamped while refractory
    spikes = (v > p.v_th) & ~resting
    self.v.value = jnp.where(spikes, p.v_reset, v)
    self.refractory.value = jnp.where(spikes, p.ref_steps,
                                      jnp.maximum(refractory - 1, 0))
    # Every shard needs every spike: gather them, then count, for each local
    # neuron, its excitatory and inhibitory inputs that fired.
    fired = jax.lax.all_gather(spikes, "x", tiled=True)
    n_exc, n_inh = self._count_inputs(fired, spikes.shape[0])
    self.ge.value = ge + p.we * n_exc.astype(ge.dtype)
    self.gi.value = gi + p.wi * n_inh.astype(gi.dtype)
    return spikes

  def _count_inputs(self, fired, n_local):
    """Event-driven delivery: visit only the neurons that fired; counting in
    integers makes the result independent of the order (and of the mesh)."""
    import jax
    import jax.numpy as jnp
    n, n_exc = self.params.n, self.params.n_exc
    targets = self.targets.value  # [n, k] local targets of each neuron

    def deliver(idx, counts):  # idx: [CHUNK] neuron ids, n = none
      rows = targets[jnp.minimum(idx, n - 1)]
      inh = (idx >= n_exc)[:, None]
      slot = jnp.where((idx < n)[:, None] & (rows < n_local),
                       rows + inh * n_local, 2 * n_local)
      return counts.at[slot.ravel()].add(1, mode="drop")

    counts = jnp.zeros(2 * n_local + 1, jnp.int32)
    total = fired.sum()

    def visit(size):  # deliver the first `size` neurons that fired
      return lambda: deliver(jnp.nonzero(fired, size=size, fill_value=n)[0],
                             counts)

    # Most steps have a few spikes; bursts (e.g. at the start) take a
    # bigger, slower branch; lax.switch runs only the branch that fits.
    sizes = [s for s in CHUNKS if s < n] + [n]
    branch = sum((total > s).astype(jnp.int32) for s in sizes[:-1])
    counts = jax.lax.switch(branch, [visit(s) for s in sizes])
    return counts[:n_local], counts[n_local:2 * n_local]

  # -- running --------------------------------------------------------------

  def compiled_run(self, n_steps: int, pbar: Any = None):
    """The compiled program that runs ``n_steps`` steps and returns the
    spikes ``[n_steps, n]`` (bool), cached per length and progress bar."""
    import brainshard as bs
    key = (n_steps, pbar)
    run = self._runs.get(key)
    if run is None:
      run = bs.jit(lambda: bs.for_loop(self.step, length=n_steps, pbar=pbar))
      run = self._runs[key] = run.lower().compile()
    return run

  def run(self, duration_ms: float, pbar: Any = None):
    """Simulates ``duration_ms`` and returns the spikes ``[steps, n]``."""
    n_steps = int(round(duration_ms / self.params.dt))
    return self.compiled_run(n_steps, pbar)()

  def runner(self, trace: tuple[int, ...] = (0, 1, 2, 3200), **kwargs: Any):
    """A ``bs.Runner`` that records the spikes (as sparse events), the
    population rate and the membrane potential of the neurons ``trace``;
    ``kwargs`` go to ``bs.Runner`` (``chunk``, ``progress``, ...).

    Its runs are chunked, can be stopped with Ctrl-C (or a notebook's stop
    button) at a chunk boundary and continued with ``runner.run()``, and
    their result draws itself (``result.plot()``).
    """
    import brainshard as bs
    monitors = {"spikes": bs.SpikeMonitor(), "rate": bs.RateMonitor(),
                "v": bs.StateMonitor(self.v, index=list(trace))}
    return bs.Runner(self.step, monitors, dt=self.params.dt, **kwargs)


def mean_rate(spikes: Any, dt_ms: float) -> float:
  """Mean firing rate in Hz of a ``[steps, n]`` spike array."""
  spikes = np.asarray(spikes)
  return float(spikes.sum()) / (spikes.shape[1] * spikes.shape[0] * dt_ms * 1e-3)


def valid_device_counts(n: int = 4000, most: int = 64) -> list[int]:
  """Device counts the network splits over evenly (up to ``most``)."""
  return [d for d in range(1, most + 1) if n % d == 0]


def save_figure(result: Any, path: str, title: str = "") -> bool:
  """Saves the runner's raster / rate / voltage figure; False without
  matplotlib."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("matplotlib is not installed: no raster plot saved "
          "(pip install matplotlib).")
    return False
  fig = result.plot(title=title)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True


def save_raster(spikes: Any, dt_ms: float, path: str, title: str = "") -> bool:
  """Saves a spike raster; returns False if matplotlib is missing."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("matplotlib is not installed: no raster plot saved "
          "(pip install matplotlib).")
    return False
  steps, neurons = np.nonzero(np.asarray(spikes))
  fig, ax = plt.subplots(figsize=(8, 4))
  ax.plot(steps * dt_ms, neurons, ",k")
  ax.set_xlabel("time (ms)")
  ax.set_ylabel("neuron index")
  ax.set_title(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(
      description="CUBA/COBA benchmark network on a brainshard mesh.")
  parser.add_argument("--model", choices=("cuba", "coba"), default="cuba")
  parser.add_argument("--devices", type=int, default=None,
                      help="number of (faked CPU) devices for the mesh")
  parser.add_argument("--duration", type=float, default=1.0,
                      help="simulated time in seconds")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--plot", default=None, help="save a raster plot here")
  parser.add_argument("--progress", action="store_true",
                      help="show a progress bar while simulating")
  parser.add_argument("--save", default=None, metavar="DIR",
                      help="save the network's state to DIR at the end")
  parser.add_argument("--resume", default=None, metavar="DIR",
                      help="continue from the state saved in DIR (on any "
                           "number of devices)")
  args = parser.parse_args(argv)
  n_neurons = Params().n
  if args.devices is not None and (
      args.devices < 1 or n_neurons % args.devices):
    sys.exit(f"cuba.py: --devices {args.devices}: the {n_neurons} neurons must "
             "split evenly over the devices; valid device counts: "
             f"{', '.join(map(str, valid_device_counts(n_neurons)))}, ...")

  import jax
  if args.devices and jax.config.jax_platforms in (None, "", "cpu"):
    try:  # only possible before JAX starts its backends
      jax.config.update("jax_num_cpu_devices", args.devices)
    except RuntimeError:
      pass
  import brainshard as bs

  n_dev = args.devices or len(jax.devices())
  if n_dev > len(jax.devices()):
    sys.exit(f"asked for {n_dev} devices, but JAX has {len(jax.devices())}")
  mesh = jax.make_mesh((n_dev,), ("x",), devices=jax.devices()[:n_dev])
  t0 = time.perf_counter()
  net = EINetwork(mesh, args.model, seed=args.seed)
  build_s = time.perf_counter() - t0
  start_ms = 0.0
  if args.resume:  # same model and seed, any number of devices
    meta = bs.restore_states(args.resume, net.dynamic_states())
    saved = (meta["model"], meta["seed"], meta["n"])
    if saved != (args.model, args.seed, net.params.n):
      sys.exit(f"{args.resume} holds (model, seed, n) = {saved}, not "
               f"{(args.model, args.seed, net.params.n)}")
    start_ms = meta["t_ms"]

  runner = net.runner(progress=args.model.upper() if args.progress else False)
  t0 = time.perf_counter()
  res = runner.run(duration=args.duration * 1e3)  # compiles, then runs
  run_s = time.perf_counter() - t0
  simulated = res.steps * net.params.dt * 1e-3
  if args.save:
    end_ms = start_ms + simulated * 1e3
    bs.save_states(args.save, net.dynamic_states(), overwrite=True, metadata={
        "model": args.model, "seed": args.seed, "n": net.params.n,
        "t_ms": end_ms})
    print(f"  state at t = {end_ms:g} ms saved to {args.save}")
  rate = len(res.spikes) / (net.params.n * simulated) if simulated else 0.0
  low, high = RATE_RANGE[args.model]
  result = dict(model=args.model, devices=n_dev, duration_s=simulated,
                rate_hz=rate, build_s=build_s, run_s=run_s,
                spikes=len(res.spikes), chunk=runner.loop.chunk,
                interrupted=res.interrupted,
                s_per_simulated_s=run_s / simulated if simulated else None)
  print(f"{args.model.upper()} network, {net.params.n} neurons on {n_dev} "
        f"device(s), {simulated:g} s simulated"
        f"{' (interrupted)' if res.interrupted else ''}")
  print(f"  mean firing rate: {rate:.2f} Hz (reference range "
        f"{low:g}-{high:g} Hz){'' if low <= rate <= high else '  OUT OF RANGE'}")
  print(f"  {len(res.spikes)} spikes recorded as events, chunks of "
        f"{runner.loop.chunk} steps")
  print(f"  build {build_s:.2f} s, run (with compile) {run_s:.2f} s = "
        f"{run_s / max(simulated, 1e-9):.2f} s per simulated second")
  if args.plot:
    if save_figure(res, args.plot,
                   f"{args.model.upper()}, {rate:.1f} Hz, {n_dev} device(s)"):
      print(f"  raster saved to {args.plot}")
  return result


if __name__ == "__main__":
  main()
