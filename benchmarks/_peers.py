"""The same workloads on the peers, when installed (the ``bench`` extra):
``brainstate.transform.jit / shard_map / for_loop`` and Flax ``nnx.jit``.

Each builder returns ``(run, sync)`` for the harness, or raises
:class:`Unavailable` with the reason (not installed, or the call failed).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from benchmarks import _models as M


class Unavailable(Exception):
  """This peer cannot run this workload here (the message says why)."""


def _import(name: str):
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      return importlib.import_module(name)
  except Exception as e:  # ImportError, or a peer broken against this JAX
    raise Unavailable(f"{name} not importable: {type(e).__name__}: {e}"[:160])


def versions() -> dict[str, str]:
  out = {}
  for mod, dist in (("brainstate", "brainstate"), ("flax", "flax")):
    try:
      out[dist] = _import(mod).__version__
    except Unavailable:
      pass
  return out


# -- brainstate -------------------------------------------------------------------


def bst_dispatch(n: int):
  bst = _import("brainstate")
  states = [bst.State(jnp.zeros(4, jnp.float32)) for _ in range(n)]

  def step():
    for s in states:
      s.value = s.value + 1.0

  return bst.transform.jit(step), lambda: states[0].value


class _BstLif:
  def __init__(self, n: int, mesh):
    bst = self.bst = _import("brainstate")
    v, count, self.i_ext = M.lif_init(n, mesh)
    self.v = bst.ShortTermState(v)
    self.count = bst.State(count)
    self.mesh = mesh

  def step(self, i_ext):
    v, spk = M.lif_update(self.v.value, i_ext)
    self.v.value = v
    n = jax.lax.psum(spk.sum(dtype=jnp.float32), "x")
    self.count.value = self.count.value + n
    return n

  def sharded(self):
    return self.bst.transform.shard_map(
        self.step, self.mesh, in_specs=(P("x"),), out_specs=P(),
        state_in_specs={self.v: P("x")}, state_out_specs={self.v: P("x")})


def bst_lif(n: int, mesh, *, jit: bool):
  model = _BstLif(n, mesh)
  f = model.sharded()
  if jit:
    f = model.bst.transform.jit(f)
  i_ext = model.i_ext
  return (lambda: f(i_ext)), (lambda: model.v.value)


def bst_sim(n: int, xs):
  bst = _import("brainstate")
  v, count, _ = M.lif_init(n)
  vs, cs = bst.ShortTermState(v), bst.State(count)

  def step(drive):
    new_v, spk = M.lif_update(vs.value, drive)
    vs.value = new_v
    k = spk.sum(dtype=jnp.float32)
    cs.value = cs.value + k
    return k

  f = bst.transform.jit(lambda xs: bst.transform.for_loop(step, xs))
  return (lambda: f(xs)), (lambda: vs.value)


def bst_cuba(ts):
  bst = _import("brainstate")
  init = M.cuba_init(0)
  c, pre_e, pre_i = init["const"], init["pre_e"], init["pre_i"]
  states = {k: bst.ShortTermState(init[k]) for k in M.CubaBs.NAMES}

  def step(t):
    new = M.cuba_update({k: s.value for k, s in states.items()}, t, pre_e,
                        pre_i, c)
    for k, s in states.items():
      s.value = new[k]
    return new["spike"].sum()

  f = bst.transform.jit(lambda ts: bst.transform.for_loop(step, ts))
  return (lambda: f(ts)), (lambda: states["v"].value)


# -- Flax NNX ---------------------------------------------------------------------


def nnx_dispatch(n: int):
  nnx = _import("flax.nnx")

  class Many(nnx.Module):
    def __init__(self):
      for i in range(n):
        setattr(self, f"s{i}", nnx.Variable(jnp.zeros(4, jnp.float32)))

  names = [f"s{i}" for i in range(n)]
  model = Many()

  @nnx.jit
  def step(m):
    for name in names:
      var = getattr(m, name)
      var[...] = var[...] + 1.0

  return (lambda: step(model)), (lambda: model.s0[...])


def nnx_sim(n: int, xs):
  nnx = _import("flax.nnx")

  class Pop(nnx.Module):
    def __init__(self):
      v, count, _ = M.lif_init(n)
      self.v, self.count = nnx.Variable(v), nnx.Variable(count)

  pop = Pop()

  @nnx.jit
  def run(pop, xs):
    def body(pop, drive):
      new_v, spk = M.lif_update(pop.v[...], drive)
      pop.v[...] = new_v
      k = spk.sum(dtype=jnp.float32)
      pop.count[...] = pop.count[...] + k
      return pop, k
    _, ks = nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(
        pop, xs)
    return ks

  return (lambda: run(pop, xs)), (lambda: pop.v[...])


def call(builder: Callable, *args, **kwargs) -> tuple[Callable, Callable]:
  """Builds and smoke-runs a peer case; any failure becomes Unavailable.
  (The runner silences the peers' deprecation warnings process-wide, so the
  timed calls carry no per-call warning machinery.)"""
  try:
    run, sync = builder(*args, **kwargs)
    jax.block_until_ready(run())
    jax.block_until_ready(sync())
  except Unavailable:
    raise
  except Exception as e:
    raise Unavailable(f"failed: {type(e).__name__}: {e}"[:200]) from None
  return run, sync
