"""The CUBA / COBA benchmark network, sharded over devices with brainshard.

The network of Vogels & Abbott (2005) as specified for Benchmarks 1 and 2 of
the simulator review of Brette et al. (2007): 4000 leaky integrate-and-fire
neurons (by default), 80% excitatory, each receiving 80 inputs (2%), 5 ms refractory period, dt = 0.1 ms, no external input (the
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
(``P('x')``). Connectivity has a fixed in-degree (``--in-degree K``, 80 =
2% of the original 4000; weights scale with 80 / K so the rate stays in range
at any ``--neurons N``), drawn from a hash of (seed, neuron, slot) in
``ei_kernels.py``: either stored per shard as a push index built in place by
``bs.sharded_init`` (delivery visits only the neurons that fired) or
regenerated every step (``--connectivity onthefly``, nothing in memory).
Spikes are all-gathered every step, or every ``--delay D`` steps (the
min-delay rule: ``--exchange delay``). Initial conditions and connectivity
are global functions of the seed and inputs are counted as integers, so the
same seed gives bit-identical spikes on any number of devices and with
either connectivity or exchange. See docs/scale.md.

Usage:
  python examples/cuba.py --devices 8 --duration 1.0 --plot raster.png
  python examples/cuba.py --neurons 400000 --connectivity onthefly
  python examples/cuba.py --devices 8 --delay 10
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

# (low, high) mean rate in Hz accepted for a 1 s run; see the module docstring.
RATE_RANGE = {"cuba": (3.0, 10.0), "coba": (10.0, 35.0)}


@dataclass(frozen=True)
class Params:
  model: str = "cuba"
  n: int = 4000
  n_exc: int = field(default=None)  # 0.8 n
  k: int = 80            # presynaptic partners per neuron (in-degree)
  delay: int = 1         # synaptic delay in steps (>= 1)
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
    if self.k < 5 or self.delay < 1:
      raise ValueError(f"need k >= 5 and delay >= 1, got {self.k}, {self.delay}")
    # Weights scale with 80 / k: the mean input stays that of the original
    # 4000-neuron network (in-degree 80 = 2% of 4000) at any size and k.
    scale = 80 / self.k
    defaults = dict(el=-49.0 if cuba else -60.0,
                    we=(60 * 0.27 / 10 if cuba else 0.6) * scale,
                    wi=(-20 * 4.5 / 10 if cuba else 6.7) * scale,
                    n_exc=int(round(0.8 * self.n)))
    for k, v in defaults.items():
      if getattr(self, k) is None:
        object.__setattr__(self, k, v)

  @property
  def ref_steps(self) -> int:
    return int(round(self.t_ref / self.dt))


def neuron_update(p: Params, v, ge, gi, ref, in_exc, in_inh):
  """One step of the neurons (pure JAX): the inputs that arrive now are
  added to ge/gi, the subthreshold system is integrated, and v is held
  while refractory. Brian2's convention: a neuron that spikes at step t is
  held for ``ref_steps - 1`` steps and may spike again at ``t + ref_steps``
  (a 5.0 ms minimum gap for t_ref = 5 ms, dt = 0.1 ms)."""
  import jax.numpy as jnp
  ge = ge + p.we * in_exc.astype(ge.dtype)
  gi = gi + p.wi * in_inh.astype(gi.dtype)
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
  resting = ref > 0
  v_new = jnp.where(resting, v, v_new)
  spikes = (v_new > p.v_th) & ~resting
  v_new = jnp.where(spikes, p.v_reset, v_new)
  ref = jnp.where(spikes, p.ref_steps - 1, jnp.maximum(ref - 1, 0))
  return v_new, ge * decay_e, gi * decay_i, ref, spikes


class EINetwork:
  """The E/I network as brainshard States, sharded over ``mesh`` axis 'x'.

  Args:
    mesh: a 1-D ``jax.sharding.Mesh`` with axis ``'x'`` (its size must
      divide the number of neurons).
    model: ``'cuba'`` or ``'coba'``.
    seed: seeds connectivity and initial conditions (mesh-independent).
    n, k, delay: neurons, in-degree, synaptic delay in steps.
    connectivity: ``'stored'`` (each shard holds a push index of its
      neurons' inputs, built in place by ``bs.sharded_init``; delivery visits
      only the neurons that fired) or ``'onthefly'`` (no connectivity in
      memory: every step each neuron regenerates its partners from the seed).
    exchange: ``'step'`` (all-gather the spikes every step; they wait
      ``delay`` steps in a queue of input counts) or ``'delay'`` (one step of
      :attr:`step` advances ``delay`` steps and all-gathers once: the
      min-delay rule). Both give the same spikes.
  """

  def __init__(self, mesh: Any, model: str = "cuba", seed: int = 0,
               n: int = 4000, k: int = 80, delay: int = 1,
               connectivity: str = "stored", exchange: str = "step"):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import brainshard as bs

    if connectivity not in ("stored", "onthefly"):
      raise ValueError(f"connectivity must be 'stored' or 'onthefly', got "
                       f"{connectivity!r}")
    if exchange not in ("step", "delay"):
      raise ValueError(f"exchange must be 'step' or 'delay', got {exchange!r}")
    self.mesh = mesh
    self.params = Params(model=model, n=n, k=k, delay=delay)
    self.seed, self.connectivity, self.exchange = seed, connectivity, exchange
    n_shards = mesh.shape["x"]
    if n % n_shards:
      raise ValueError(f"{n} neurons do not split over {n_shards} devices")
    self.n_local = n // n_shards
    self.sharding = NamedSharding(mesh, P("x"))
    if connectivity == "stored":
      self._build_index(n_shards)
    zeros = jax.device_put(jnp.zeros(n, jnp.float32), self.sharding)
    self.v = bs.ShortTermState(zeros, name="v", spec=P("x"))
    self.ge = bs.ShortTermState(zeros, name="ge", spec=P("x"))
    self.gi = bs.ShortTermState(zeros, name="gi", spec=P("x"))
    self.refractory = bs.ShortTermState(
        jax.device_put(jnp.zeros(n, jnp.int32), self.sharding),
        name="refractory", spec=P("x"))
    if exchange == "step":  # input counts due in 0 .. delay-1 steps
      spec = P(None, None, "x")
      self.pending = bs.ShortTermState(jax.device_put(
          jnp.zeros((delay, 2, n), jnp.int32), NamedSharding(mesh, spec)),
          name="pending", spec=spec)
      body, out = self._step, P("x")
    else:  # the spikes of the last block, delivered in this one
      spec = P(None, "x")
      self.pending = bs.ShortTermState(jax.device_put(
          jnp.zeros((delay, n), bool), NamedSharding(mesh, spec)),
          name="pending", spec=spec)
      body, out = self._block, P(None, "x")
    self.step = bs.shard_map(body, mesh=mesh, in_specs=(), out_specs=out)
    self._runs: dict = {}
    self.reset()

  def _build_index(self, n_shards: int) -> None:
    """Per shard, a CSR push index of its neurons' fixed in-degree inputs,
    built in place (never an n x n matrix, never the whole table on one
    device)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import brainshard as bs
    import ei_kernels as ek

    p, n_local = self.params, self.n_local

    @bs.sharded_init(mesh=self.mesh)
    def init():
      pre = ek.presynaptic(jnp.arange(p.n), p.k, n=p.n, n_exc=p.n_exc,
                           k=p.k, seed=self.seed)
      pre = pre.reshape(n_shards, n_local, p.k)
      indptr, indices = jax.vmap(ek.csr_from_table, (0, None))(pre, p.n)
      return (bs.ParamState(indptr.reshape(-1), name="indptr", spec=P("x")),
              bs.ParamState(indices.reshape(-1), name="indices", spec=P("x")))

    self.indptr, self.indices = init()
    degree = jnp.diff(self.indptr.value.reshape(n_shards, p.n + 1), axis=1)
    self.max_degree = max(int(degree.max()), 1)

  def reset(self, seed: int | None = None) -> None:
    """Draws the initial conditions (globally: the same on any mesh)."""
    import jax
    import jax.numpy as jnp

    import brainshard as bs

    p = self.params
    rng = bs.RandomState(self.seed if seed is None else seed)
    put = lambda x: jax.device_put(jnp.asarray(x, jnp.float32), self.sharding)  # noqa: E731
    if p.model == "cuba":
      self.v.value = put(rng.uniform(p.v_reset, p.v_th, size=p.n))
      self.ge.value = put(self.ge.value * 0)
      self.gi.value = put(self.gi.value * 0)
    else:
      self.v.value = put(rng.normal(-55.0, 5.0, size=p.n))
      self.ge.value = put(rng.normal(4.0, 1.5, size=p.n))
      self.gi.value = put(rng.normal(20.0, 12.0, size=p.n))
    self.refractory.value = self.refractory.value * 0
    self.pending.value = jnp.zeros_like(self.pending.value)

  def dynamic_states(self) -> dict:
    """The States a checkpoint holds: all but the connectivity, which is
    rebuilt from the seed."""
    return {"v": self.v, "ge": self.ge, "gi": self.gi,
            "refractory": self.refractory, "pending": self.pending}

  # -- per shard --------------------------------------------------------------

  def _count_inputs(self, fired):
    """Input counts (exc, inh) of the local neurons from the global spikes."""
    import jax
    import jax.numpy as jnp
    import ei_kernels as ek
    p = self.params
    if self.connectivity == "onthefly":
      rows = (jax.lax.axis_index("x") * self.n_local
              + jnp.arange(self.n_local))
      return ek.deliver_pull(fired, rows, n=p.n, n_exc=p.n_exc, k=p.k,
                             seed=self.seed)
    return ek.deliver_events(fired, self.indptr.value, self.indices.value,
                             n_local=self.n_local, n_exc=p.n_exc,
                             max_degree=self.max_degree)

  def _gather(self, spikes, axis):
    """The global spikes. On one device no all-gather at all: XLA:CPU runs a
    one-device all-gather as a real collective (a rendezvous, about 10% of
    a 4000-neuron step)."""
    import jax
    if self.mesh.shape["x"] == 1:
      return spikes
    return jax.lax.all_gather(spikes, "x", axis=axis, tiled=True)

  def _step(self):
    """One step; the spikes are all-gathered every step."""
    import jax
    import jax.numpy as jnp
    p = self.params
    pending = self.pending.value
    v, ge, gi, ref, spikes = neuron_update(
        p, self.v.value, self.ge.value, self.gi.value, self.refractory.value,
        pending[0, 0], pending[0, 1])
    self.v.value, self.ge.value, self.gi.value = v, ge, gi
    self.refractory.value = ref
    fired = self._gather(spikes, 0)
    now = jnp.stack(self._count_inputs(fired))[None]
    self.pending.value = jnp.concatenate([pending[1:], now])
    return spikes

  def _block(self):
    """``delay`` steps with one all-gather: every spike of the last block
    arrives in this one (spikes of step t arrive at step t + delay)."""
    import jax
    import jax.numpy as jnp
    p = self.params
    fired = self._gather(self.pending.value, 1)
    inputs = jax.lax.map(lambda f: jnp.stack(self._count_inputs(f)), fired)

    def one(carry, counts):
      v, ge, gi, ref, spikes = neuron_update(p, *carry, counts[0], counts[1])
      return (v, ge, gi, ref), spikes

    carry = (self.v.value, self.ge.value, self.gi.value, self.refractory.value)
    carry, spikes = jax.lax.scan(one, carry, inputs)
    self.v.value, self.ge.value, self.gi.value, self.refractory.value = carry
    self.pending.value = spikes
    return spikes

  # -- running --------------------------------------------------------------

  @property
  def steps_per_call(self) -> int:
    """Simulation steps one call of :attr:`step` advances."""
    return self.params.delay if self.exchange == "delay" else 1

  def loop(self, chunk_steps: int = 1000):
    """The runner's chunked loop (``bs.ChunkedLoop``) over :attr:`step`,
    about ``chunk_steps`` simulation steps per compiled call."""
    import brainshard as bs
    calls = max(1, chunk_steps // self.steps_per_call)
    loop = self._runs.get(calls)
    if loop is None:
      loop = self._runs[calls] = bs.ChunkedLoop(self.step, calls,
                                                name="ei_step")
    return loop

  def run(self, duration_ms: float, chunk_steps: int = 1000):
    """Simulates ``duration_ms`` and returns the spikes ``[steps, n]``
    (bool) as a NumPy array."""
    n_steps = int(round(duration_ms / self.params.dt))
    per = self.steps_per_call
    if n_steps % per:
      raise ValueError(f"{duration_ms} ms = {n_steps} steps is not a multiple "
                       f"of the delay ({per} steps)")
    loop = self.loop(chunk_steps)
    out = [np.asarray(c.out) for c in loop.iterate(n_steps // per)]
    if not out:
      return np.zeros((0, self.params.n), bool)
    return np.concatenate(out).reshape(n_steps, self.params.n)

  def runner(self, trace: tuple[int, ...] = (0, 1, 2, 3200), **kwargs: Any):
    """A ``bs.Runner`` that records the spikes (as sparse events), the
    population rate and the membrane potential of the neurons ``trace``;
    ``kwargs`` go to ``bs.Runner`` (``chunk``, ``progress``, ...). Needs
    ``exchange='step'`` (one step per call).

    Its runs are chunked, can be stopped with Ctrl-C (or a notebook's stop
    button) at a chunk boundary and continued with ``runner.run()``, and
    their result draws itself (``result.plot()``).
    """
    import brainshard as bs
    if self.exchange != "step":
      raise ValueError("EINetwork.runner needs exchange='step'; use run()")
    trace = [i for i in trace if i < self.params.n]
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
  parser.add_argument("--neurons", type=int, default=4000)
  parser.add_argument("--in-degree", type=int, default=80,
                      help="presynaptic partners per neuron (weights scale "
                           "with 80 / in-degree)")
  parser.add_argument("--delay", type=int, default=1,
                      help="synaptic delay in steps")
  parser.add_argument("--connectivity", choices=("stored", "onthefly"),
                      default="stored")
  parser.add_argument("--exchange", choices=("step", "delay"), default=None,
                      help="all-gather spikes every step, or every --delay "
                           "steps (default: 'delay' when --delay > 1)")
  parser.add_argument("--plot", default=None, help="save a raster plot here")
  parser.add_argument("--progress", action="store_true",
                      help="show a progress bar while simulating")
  parser.add_argument("--save", default=None, metavar="DIR",
                      help="save the network's state to DIR at the end")
  parser.add_argument("--resume", default=None, metavar="DIR",
                      help="continue from the state saved in DIR (on any "
                           "number of devices)")
  args = parser.parse_args(argv)
  n_neurons = args.neurons
  exchange = args.exchange or ("delay" if args.delay > 1 else "step")
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
  net = EINetwork(mesh, args.model, seed=args.seed, n=n_neurons,
                  k=args.in_degree, delay=args.delay,
                  connectivity=args.connectivity, exchange=exchange)
  jax.block_until_ready(net.v.value)
  build_s = time.perf_counter() - t0
  start_ms = 0.0
  if args.resume:  # same model and seed, any number of devices
    meta = bs.restore_states(args.resume, net.dynamic_states())
    saved = (meta["model"], meta["seed"], meta["n"])
    if saved != (args.model, args.seed, net.params.n):
      sys.exit(f"{args.resume} holds (model, seed, n) = {saved}, not "
               f"{(args.model, args.seed, net.params.n)}")
    start_ms = meta["t_ms"]

  t0 = time.perf_counter()
  if exchange == "step":
    runner = net.runner(
        progress=args.model.upper() if args.progress else False)
    res = runner.run(duration=args.duration * 1e3)  # compiles, then runs
    n_spikes, chunk, interrupted = len(res.spikes), runner.loop.chunk, \
        res.interrupted
    steps = res.steps
  else:
    spikes = net.run(args.duration * 1e3)
    res, n_spikes, chunk, interrupted = None, int(spikes.sum()), \
        net.loop().chunk * net.steps_per_call, False
    steps = spikes.shape[0]
  run_s = time.perf_counter() - t0
  simulated = steps * net.params.dt * 1e-3
  if args.save:
    end_ms = start_ms + simulated * 1e3
    bs.save_states(args.save, net.dynamic_states(), overwrite=True, metadata={
        "model": args.model, "seed": args.seed, "n": net.params.n,
        "t_ms": end_ms})
    print(f"  state at t = {end_ms:g} ms saved to {args.save}")
  rate = n_spikes / (net.params.n * simulated) if simulated else 0.0
  low, high = RATE_RANGE[args.model]
  result = dict(model=args.model, devices=n_dev, duration_s=simulated,
                rate_hz=rate, build_s=build_s, run_s=run_s,
                spikes=n_spikes, chunk=chunk, interrupted=interrupted,
                neurons=n_neurons, in_degree=args.in_degree,
                delay=args.delay, exchange=exchange,
                s_per_simulated_s=run_s / simulated if simulated else None)
  print(f"{args.model.upper()} network, {net.params.n} neurons (in-degree "
        f"{args.in_degree}, {args.connectivity}, delay {args.delay} steps, "
        f"exchange every {net.steps_per_call} step(s)) on {n_dev} "
        f"device(s), {simulated:g} s simulated"
        f"{' (interrupted)' if interrupted else ''}")
  print(f"  mean firing rate: {rate:.2f} Hz (reference range "
        f"{low:g}-{high:g} Hz){'' if low <= rate <= high else '  OUT OF RANGE'}")
  print(f"  {n_spikes} spikes, chunks of {chunk} steps")
  print(f"  build {build_s:.2f} s, run (with compile) {run_s:.2f} s = "
        f"{run_s / max(simulated, 1e-9):.2f} s per simulated second")
  if args.plot and res is not None:
    if save_figure(res, args.plot,
                   f"{args.model.upper()}, {rate:.1f} Hz, {n_dev} device(s)"):
      print(f"  raster saved to {args.plot}")
  return result


if __name__ == "__main__":
  main()
