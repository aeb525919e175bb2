"""Transforms nest in every order and give the numbers of pure JAX.

Two families: brainshard's and JAX's own wrappers around each other (a
wrapper object must run the function it wraps, never one found in that
function's ``__dict__``), and brainshard's transforms two deep with sharded
and replicated States, compared with the hand-threaded pure program.
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import brainshard as bs

from _util import mesh

# -- wrappers around wrappers ---------------------------------------------------
#
# Each transform maps a function of a scalar to a function of a scalar (a
# pair for value_and_grad), and is applied to the stateful function with
# brainshard and to the pure one with plain JAX. The JAX-made function is
# handed to the outer transform directly: jax.grad and functools.wraps copy
# the inner function's __dict__ onto it, which is what the wrappers must not
# pick up.

MESH1 = ("x",)


def _grad(pair):
  return lambda g: jax.grad(g, has_aux=pair)


def _vag(pair):
  return lambda g: jax.value_and_grad(g, has_aux=pair)


def _wraps(pair):
  def wrap(g):
    @functools.wraps(g)
    def h(x):
      out = g(x)
      return (out[0] + 1.0, out[1]) if pair else out + 1.0
    return h
  return wrap


# Eager jax.grad of an Explicit-mesh shard_map needs jax.set_mesh in JAX
# itself; Auto axes keep these pairs about wrapping, not mesh contexts.
def _bs_shard_map(pair):
  m = mesh((8,), MESH1, AxisType.Auto)
  return lambda g: bs.shard_map(g, mesh=m, in_specs=P(), out_specs=P())


def _pure_shard_map(pair):
  m = mesh((8,), MESH1, AxisType.Auto)
  return lambda g: jax.shard_map(g, mesh=m, in_specs=P(), out_specs=P())


# name -> (brainshard version, pure version, makes a pair)
TRANSFORMS = {
    "bs.jit": (lambda pair: bs.jit, lambda pair: jax.jit, False),
    "bs.shard_map": (_bs_shard_map, _pure_shard_map, False),
    "jax.jit": (lambda pair: jax.jit, lambda pair: jax.jit, False),
    "jax.grad": (_grad, _grad, False),
    "jax.value_and_grad": (_vag, _vag, True),
    "jax.vmap": (lambda pair: lambda g: jax.vmap(
        g, in_axes=None, out_axes=None, axis_size=2),) * 2 + (False,),
    "jax.checkpoint": (lambda pair: jax.checkpoint,) * 2 + (False,),
    "functools.wraps": (_wraps, _wraps, False),
}


# shard_map in shard_map over the same axis is invalid in JAX too.
@pytest.mark.parametrize("inner,outer", [
    p for p in itertools.product(TRANSFORMS, repeat=2)
    if p != ("bs.shard_map", "bs.shard_map")])
@pytest.mark.slow
def test_wrapped_twice_runs_what_it_wraps(inner, outer):
  w = bs.ParamState(jnp.float32(2.0), name="w")

  def loss(x):
    return (w.value * x) ** 3

  def pure_loss(x):
    return (jnp.float32(2.0) * x) ** 3

  bs_in, pure_in, pair = TRANSFORMS[inner]
  bs_out, pure_out, _ = TRANSFORMS[outer]
  got = bs_out(pair)(bs_in(False)(loss))(jnp.float32(1.5))
  want = pure_out(pair)(pure_in(False)(pure_loss))(jnp.float32(1.5))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
               got, want)


def test_wrapper_objects_do_not_take_the_wrapped_dict():
  w = bs.State(jnp.float32(2.0), name="w")
  inner = bs.jit(lambda x: (w.value * x) ** 2)
  grad_fn = jax.grad(inner)
  assert "_core" in vars(grad_fn)  # what functools.wraps copied onto it
  outer = bs.jit(grad_fn)
  assert outer._core is not inner._core
  assert outer.__wrapped__ is grad_fn
  assert float(outer(5.0)) == 40.0
  sm = bs.shard_map(grad_fn, mesh=mesh((1,), MESH1), in_specs=P(),
                    out_specs=P())
  assert sm.__wrapped__ is grad_fn and float(sm(5.0)) == 40.0


# -- brainshard transforms two deep ------------------------------------------------
#
# One step: v <- v * a + x (v split over the mesh or replicated), a read-only
# replicated parameter, returning the global sum of v. Each layer runs the
# step inside it once; for_loop runs it twice, cond takes its true branch.

N = 16


def _layer(kind, m, v, sharded):
  if kind == "bs.jit":
    return lambda g: bs.jit(g)
  if kind == "bs.shard_map":
    def sm(g):
      def body(x):
        return jax.lax.psum(g(x), "x") / 8
      return bs.shard_map(body, mesh=m, in_specs=P(), out_specs=P(),
                          state_in_specs={v: P("x") if sharded else P()})
    return sm
  if kind == "bs.for_loop":
    def loop(g):
      def run(x):
        return bs.for_loop(lambda i: g(x), jnp.arange(2))[-1]
      return run
    return loop
  if kind == "bs.cond":
    return lambda g: (lambda x: bs.cond(x > 0, g, lambda y: -1.0 * y, x))
  raise AssertionError(kind)


LAYERS = ["bs.jit", "bs.shard_map", "bs.for_loop", "bs.cond"]


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "replicated"])
@pytest.mark.parametrize("inner,outer", [
    (a, b) for a, b in itertools.product(LAYERS, repeat=2)
    if not (a == b == "bs.shard_map")])
def test_two_deep(inner, outer, sharded):
  m = mesh((8,), MESH1)
  v = bs.State(jnp.zeros(N), name="v")
  a = bs.ParamState(jnp.float32(0.5), name="a")

  def step(x):
    v.value = v.value * a.value + x
    return v.value.sum()

  f = _layer(outer, m, v, sharded)(_layer(inner, m, v, sharded)(step))
  f(jnp.float32(1.0))
  f(jnp.float32(1.0))  # a second call starts from the first one's states
  expected = np.zeros(N, np.float32)  # the pure program, step by step
  steps_per_call = 2 ** [inner, outer].count("bs.for_loop")
  for _ in range(2 * steps_per_call):
    expected = expected * np.float32(0.5) + np.float32(1.0)
  np.testing.assert_allclose(np.asarray(v.value), expected, rtol=1e-6)
  assert float(a.value) == 0.5  # read-only: untouched


def test_jit_inside_shard_map_reads_and_writes_a_sharded_state():
  m = mesh((8,), MESH1)
  v = bs.State(jnp.arange(N, dtype=jnp.float32), name="v")

  @bs.jit
  def inner(x):
    v.value = v.value + x
    return v.value.sum()

  sm = bs.shard_map(lambda x: jax.lax.psum(inner(x), "x"), mesh=m,
                    in_specs=P("x"), out_specs=P(), state_in_specs={v: P("x")})
  total = sm(jnp.ones(N))
  np.testing.assert_allclose(np.asarray(v.value), np.arange(N) + 1.0)
  assert float(total) == float(np.sum(np.arange(N) + 1.0))
  total = bs.jit(sm)(jnp.ones(N))  # and under an outer bs.jit
  np.testing.assert_allclose(np.asarray(v.value), np.arange(N) + 2.0)
  assert float(total) == float(np.sum(np.arange(N) + 2.0))
