"""The CUBA/COBA network as brainshard States: its States, connectivity and
initial conditions, and the ways to run it (a chunked loop, a monitored
``bs.Runner``). What a shard computes per step is in
:mod:`examples.cuba.step`."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard import models as bm
from examples.cuba import step as shard_step
from examples.cuba.params import Params


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
      body, out = shard_step.every_step, P("x")
    else:  # the spikes of the last block, delivered in this one
      spec = P(None, "x")
      self.pending = bs.ShortTermState(jax.device_put(
          jnp.zeros((delay, n), bool), NamedSharding(mesh, spec)),
          name="pending", spec=spec)
      body, out = shard_step.one_block, P(None, "x")
    self.step = bs.shard_map(functools.partial(body, self), mesh=mesh,
                             in_specs=(), out_specs=out)
    self._runs: dict = {}
    self.reset()

  def _build_index(self, n_shards: int) -> None:
    """Per shard, a CSR push index of its neurons' fixed in-degree inputs,
    built in place (never an n x n matrix, never the whole table on one
    device)."""
    p, n_local = self.params, self.n_local

    @bs.sharded_init(mesh=self.mesh)
    def init():
      pre = bm.hashed_presynaptic(jnp.arange(p.n), p.k, n=p.n,
                                  n_exc=p.n_exc, k=p.k, seed=self.seed)
      pre = pre.reshape(n_shards, n_local, p.k)
      indptr, indices = jax.vmap(bm.csr_from_table, (0, None))(pre, p.n)
      return (bs.ParamState(indptr.reshape(-1), name="indptr", spec=P("x")),
              bs.ParamState(indices.reshape(-1), name="indices", spec=P("x")))

    self.indptr, self.indices = init()
    degree = jnp.diff(self.indptr.value.reshape(n_shards, p.n + 1), axis=1)
    self.max_degree = max(int(degree.max()), 1)

  def reset(self, seed: int | None = None) -> None:
    """Draws the initial conditions (globally: the same on any mesh)."""
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

  # -- running --------------------------------------------------------------

  @property
  def steps_per_call(self) -> int:
    """Simulation steps one call of :attr:`step` advances."""
    return self.params.delay if self.exchange == "delay" else 1

  def loop(self, chunk_steps: int = 1000):
    """The runner's chunked loop (``bs.ChunkedLoop``) over :attr:`step`,
    about ``chunk_steps`` simulation steps per compiled call."""
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
    if self.exchange != "step":
      raise ValueError("EINetwork.runner needs exchange='step'; use run()")
    trace = [i for i in trace if i < self.params.n]
    monitors = {"spikes": bs.SpikeMonitor(), "rate": bs.RateMonitor(),
                "v": bs.StateMonitor(self.v, index=list(trace))}
    return bs.Runner(self.step, monitors, dt=self.params.dt, **kwargs)
