"""The stateful programs the benchmarks run, each written twice: with
brainshard States, and as hand-threaded pure JAX (the baseline).

* ``lif``: a population of leaky integrate-and-fire neurons (membrane
  potential sharded over the mesh) and a replicated spike counter; one step
  integrates, spikes, resets and counts spikes across shards with ``psum``.
* ``cuba``: the CUBA network of Brette et al. (2007) (Vogels & Abbott 2005
  without conductances): 4000 LIF neurons, 80% excitatory, 2% connectivity
  (here a fixed in-degree: each neuron draws 64 excitatory and 16 inhibitory
  presynaptic partners), current-based exponential synapses, 5 ms refractory
  period, dt = 0.1 ms.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs

# -- LIF population -----------------------------------------------------------

DT, TAU, V_REST, V_TH, V_RESET = 0.1, 10.0, 0.0, 1.0, 0.0


def lif_update(v, i_ext):
  """One Euler step; returns (new v, spikes)."""
  v = v + DT / TAU * (V_REST - v + i_ext)
  spk = v >= V_TH
  return jnp.where(spk, V_RESET, v), spk


def lif_init(n: int, mesh=None):
  v = jnp.linspace(0.0, 0.9, n, dtype=jnp.float32)
  i_ext = jnp.full((n,), 1.5, jnp.float32)
  if mesh is not None:
    v = jax.device_put(v, NamedSharding(mesh, P("x")))
    i_ext = jax.device_put(i_ext, NamedSharding(mesh, P("x")))
  return v, jnp.zeros((), jnp.float32), i_ext


class LifBs:
  """The brainshard program: States, and a step that reads and writes them."""

  def __init__(self, n: int, mesh):
    v, count, self.i_ext = lif_init(n, mesh)
    self.v = bs.ShortTermState(v, name="v", spec=P("x"))
    self.count = bs.State(count, name="count")
    self.mesh = mesh

  def step(self, i_ext):
    v, spk = lif_update(self.v.value, i_ext)
    self.v.value = v
    n = jax.lax.psum(spk.sum(dtype=jnp.float32), "x")
    self.count.value = self.count.value + n
    return n

  def sharded(self):
    return bs.shard_map(self.step, mesh=self.mesh, in_specs=P("x"),
                        out_specs=P())


def lif_pure_step(v, count, i_ext):
  v, spk = lif_update(v, i_ext)
  n = jax.lax.psum(spk.sum(dtype=jnp.float32), "x")
  return n, v, count + n


def lif_pure_jitted(mesh, donate: bool = True):
  """``jax.jit(jax.shard_map(pure_step), donate_argnums=(0, 1))`` -- a fresh
  function object each call, so no JAX cache is shared between makers."""
  step = functools.partial(lif_pure_step)  # a new object for jax's caches
  mapped = jax.shard_map(step, mesh=mesh, in_specs=(P("x"), P(), P("x")),
                         out_specs=(P(), P("x"), P()))
  return jax.jit(mapped, donate_argnums=(0, 1) if donate else ())


class LifPure:
  """Hand-threaded pure JAX: the caller keeps the arrays and passes them."""

  def __init__(self, n: int, mesh, donate: bool = True):
    self.v, self.count, self.i_ext = lif_init(n, mesh)
    self.f = lif_pure_jitted(mesh, donate)

  def run(self):
    n, self.v, self.count = self.f(self.v, self.count, self.i_ext)
    return n


# -- a 1000-step LIF simulation (for_loop vs lax.scan) ---------------------------


def sim_inputs(steps: int):
  t = jnp.arange(steps, dtype=jnp.float32)
  return 1.2 + 0.5 * jnp.sin(t * 0.01)


class SimBs:
  def __init__(self, n: int):
    v, count, _ = lif_init(n)
    self.v = bs.ShortTermState(v, name="v")
    self.count = bs.State(count, name="count")

  def step(self, drive):
    v, spk = lif_update(self.v.value, drive)
    self.v.value = v
    n = spk.sum(dtype=jnp.float32)
    self.count.value = self.count.value + n
    return n

  def program(self):
    return bs.jit(lambda xs: bs.for_loop(self.step, xs))


def sim_pure_jitted():
  def body(carry, drive):
    v, count = carry
    v, spk = lif_update(v, drive)
    n = spk.sum(dtype=jnp.float32)
    return (v, count + n), n

  def run(v, count, xs):
    (v, count), ns = jax.lax.scan(body, (v, count), xs)
    return ns, v, count

  return jax.jit(run, donate_argnums=(0, 1))


class SimPure:
  def __init__(self, n: int):
    self.v, self.count, _ = lif_init(n)
    self.f = sim_pure_jitted()

  def run(self, xs):
    ns, self.v, self.count = self.f(self.v, self.count, xs)
    return ns


# -- dispatch ------------------------------------------------------------------------


def dispatch_step(n: int):
  """``n`` small States and a step that reads and writes every one of them:
  a program whose cost is all dispatch."""
  states = [bs.State(jnp.zeros(4, jnp.float32)) for _ in range(n)]

  def step():
    for s in states:
      s.value = s.value + 1.0

  return states, step


def dispatch_pure(n: int, donate: bool = True):
  """The same work in pure JAX, ``(run, sync)``: ``vals = f(vals)``,
  donating every buffer as ``bs.jit`` does (or none)."""
  f = jax.jit(lambda vals: [v + 1.0 for v in vals],
              donate_argnums=0 if donate else ())
  box = [[jnp.zeros(4, jnp.float32) for _ in range(n)]]

  def run():
    box[0] = f(box[0])
  return run, lambda: box[0][0]


def dispatch_pure_kept(n: int):
  """The same work as ``bs.jit`` with a reference kept to one state's value
  after each step, ``(run, sync)``: every buffer donated but that one."""
  f = jax.jit(lambda v0, rest: (v0 + 1.0, [v + 1.0 for v in rest]),
              donate_argnums=1)
  box = [jnp.zeros(4, jnp.float32),
         [jnp.zeros(4, jnp.float32) for _ in range(n - 1)]]
  kept = [None]

  def run():
    box[0], box[1] = f(box[0], box[1])
    kept[0] = box[0]  # the reference the notebook pattern keeps
  return run, lambda: box[0]


# -- CUBA (Brette et al. 2007) ------------------------------------------------------

CUBA = dict(n=4000, n_exc=3200, k_exc=64, k_inh=16, dt=0.1, tau_m=20.0,
            tau_e=5.0, tau_i=10.0, v_th=-50.0, v_reset=-60.0, e_l=-49.0,
            w_e=60 * 0.27 / 10, w_i=-20 * 4.5 / 10, t_ref=5.0)


def cuba_init(seed: int = 0, n: int | None = None) -> dict[str, Any]:
  c = dict(CUBA)
  if n is not None:
    c.update(n=n, n_exc=n * 4 // 5)
  rng = np.random.default_rng(seed)
  n, ne = c["n"], c["n_exc"]
  return dict(
      v=jnp.asarray(rng.uniform(c["v_reset"], c["v_th"], n), jnp.float32),
      ge=jnp.zeros(n, jnp.float32), gi=jnp.zeros(n, jnp.float32),
      ref=jnp.zeros(n, jnp.float32),  # refractory time left, ms
      spike=jnp.zeros(n, bool),
      pre_e=jnp.asarray(rng.integers(0, ne, (n, c["k_exc"])), jnp.int32),
      pre_i=jnp.asarray(rng.integers(ne, n, (n, c["k_inh"])), jnp.int32),
      const=c)


def cuba_update(s: dict, t, pre_e, pre_i, c: dict) -> dict:
  """One step of the network on a dict of arrays; returns the new dict.

  Refractoriness counts down (``ref``, ms left) rather than comparing with
  absolute spike times: the benchmark runs the same 1 s of input times
  repeatedly, and times restarting at 0 would leave every neuron refractory
  (and the network silent) after the first run. ``t`` is the loop's input.
  """
  del t
  spk = s["spike"].astype(jnp.float32)
  ge = s["ge"] + c["w_e"] * spk[pre_e].sum(axis=1)
  gi = s["gi"] + c["w_i"] * spk[pre_i].sum(axis=1)
  refractory = s["ref"] > 0
  dv = (ge + gi - (s["v"] - c["e_l"])) / c["tau_m"]
  v = jnp.where(refractory, s["v"], s["v"] + c["dt"] * dv)
  spike = v >= c["v_th"]
  ref = jnp.where(spike, c["t_ref"], jnp.maximum(s["ref"] - c["dt"], 0.0))
  return dict(v=jnp.where(spike, c["v_reset"], v),
              ge=ge - c["dt"] * ge / c["tau_e"],
              gi=gi - c["dt"] * gi / c["tau_i"],
              ref=ref, spike=spike)


class CubaBs:
  """The network as brainshard States stepped by ``bs.for_loop``."""
  NAMES = ("v", "ge", "gi", "ref", "spike")

  def __init__(self, seed: int = 0, n: int | None = None):
    init = cuba_init(seed, n)
    self.c = init["const"]
    self.pre_e, self.pre_i = init["pre_e"], init["pre_i"]
    self.states = {k: bs.ShortTermState(init[k], name=k) for k in self.NAMES}

  def step(self, t):
    s = {k: st.value for k, st in self.states.items()}
    new = cuba_update(s, t, self.pre_e, self.pre_i, self.c)
    for k, st in self.states.items():
      st.value = new[k]
    return new["spike"].sum()

  def program(self):
    return bs.jit(lambda ts: bs.for_loop(self.step, ts))


class CubaPure:
  def __init__(self, seed: int = 0, n: int | None = None):
    init = cuba_init(seed, n)
    c = init["const"]
    self.s = {k: init[k] for k in CubaBs.NAMES}
    pre_e, pre_i = init["pre_e"], init["pre_i"]

    def body(s, t):
      new = cuba_update(s, t, pre_e, pre_i, c)
      return new, new["spike"].sum()

    def run(s, ts):
      return jax.lax.scan(body, s, ts)

    self.f = jax.jit(run, donate_argnums=0)

  def run(self, ts):
    self.s, counts = self.f(self.s, ts)
    return counts


def cuba_times(steps: int):
  return jnp.arange(steps, dtype=jnp.float32) * CUBA["dt"]
