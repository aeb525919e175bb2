"""Random compositions of brainshard's and JAX's transforms, three or four
deep, give the numbers of the same composition of JAX transforms applied to
the hand-threaded pure function (the State as an argument).

Each layer maps a function of ``x`` (a float32[8]) to a function of ``x``
with a scalar output, so any layer can wrap any other. The brainshard
version closes over the ParamState ``w``; the pure version takes ``w`` as its
first argument. With ``w`` sharded over the 8 devices, the innermost layer is
a ``bs.shard_map`` that splits ``w`` and ``x`` and sums the per-shard results
(``jax.lax.psum``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.sharding import AxisType, PartitionSpec as P

import brainshard as bs

from _util import mesh

N = 8
C = jnp.linspace(0.5, 1.5, N, dtype=jnp.float32)  # projects vectors to scalars


def base(w, x):
  return jnp.sum(jnp.sin(w * x) * x)


def sharded_base(w, x):
  return jax.lax.psum(base(w, x), "x")


# name -> (brainshard layer: g -> g', pure layer: h(w, x) -> h'(w, x))
def _layers(w, m):
  def bs_grad(g):
    return lambda x: jnp.vdot(bs.grad(g, grad_states=w)(x), C)

  def pure_grad(h):
    return lambda wv, x: jnp.vdot(jax.grad(h, 0)(wv, x), C)

  def vmap_of(vmap, g):
    return lambda x: jnp.sum(vmap(g)(jnp.stack([x, 0.5 * x])))

  def pure_vmap(h):
    return lambda wv, x: jnp.sum(jax.vmap(h, (None, 0))(
        wv, jnp.stack([x, 0.5 * x])))

  def bs_loop(g):
    return lambda x: bs.for_loop(lambda i: g(x) * (i + 1.0), jnp.arange(2.0))[-1]

  def pure_loop(h):
    return lambda wv, x: h(wv, x) * 2.0

  def bs_replicated_shard_map(g):
    return bs.shard_map(g, mesh=m, in_specs=P(), out_specs=P())

  return {
      "bs.jit": (bs.jit, jax.jit),
      "jax.jit": (jax.jit, jax.jit),
      "bs.grad": (bs_grad, pure_grad),
      "jax.grad": (lambda g: (lambda x: jnp.vdot(jax.grad(g)(x), C)),
                   lambda h: (lambda wv, x: jnp.vdot(jax.grad(h, 1)(wv, x), C))),
      "bs.vmap": (lambda g: vmap_of(bs.vmap, g), pure_vmap),
      "jax.vmap": (lambda g: vmap_of(jax.vmap, g), pure_vmap),
      "bs.for_loop": (bs_loop, pure_loop),
      "bs.remat": (bs.remat, jax.checkpoint),
      "bs.shard_map": (bs_replicated_shard_map, lambda h: h),
  }


NAMES = ["bs.jit", "jax.jit", "bs.grad", "jax.grad", "bs.vmap", "jax.vmap",
         "bs.for_loop", "bs.remat", "bs.shard_map"]


def _check(names, sharded, axis_type=AxisType.Explicit):
  m = mesh((N,), ("x",), axis_type)
  w = bs.ParamState(jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32), name="w")
  w0 = np.asarray(w.value)
  layers = _layers(w, m)

  if sharded:  # innermost: a shard_map splitting w and x over the 8 devices
    g = bs.shard_map(lambda x: sharded_base(w.value, x), mesh=m,
                     in_specs=P("x"), out_specs=P(), state_in_specs={w: P("x")})
  else:
    g = lambda x: base(w.value, x)  # noqa: E731
  h = base
  for name in names:
    bs_layer, pure_layer = layers[name]
    g, h = bs_layer(g), pure_layer(h)

  x = jnp.linspace(0.2, 1.8, N, dtype=jnp.float32)
  if axis_type == AxisType.Explicit:
    # JAX cannot run an Explicit-mesh reshard op by op under jax.grad and
    # jax.vmap (it asks for set_mesh, which it refuses inside a transform),
    # so on Explicit meshes the composition runs compiled.
    with jax.set_mesh(m):
      got = jax.jit(g)(x)
  else:
    got = g(x)
  # The pure reference compiled as one program: op by op, every example
  # compiles each of its primitives anew (its layers are fresh closures).
  want = jax.jit(h)(jnp.asarray(w0), x)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5,
                             atol=2e-5, err_msg=f"{names}, sharded={sharded}")
  np.testing.assert_array_equal(np.asarray(w.value), w0)  # only read


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(NAMES), min_size=3, max_size=4),
       sharded=st.booleans(),
       axis_type=st.sampled_from([AxisType.Explicit, AxisType.Auto]))
def test_random_compositions_match_pure_jax(names, sharded, axis_type):
  # A shard_map in a shard_map over the same axis is invalid in JAX: keep at
  # most one (none when the innermost layer already maps over the axis).
  first = names.index("bs.shard_map") if "bs.shard_map" in names else None
  names = [n for i, n in enumerate(names)
           if n != "bs.shard_map" or (i == first and not sharded)]
  _check(names, sharded, axis_type)


@pytest.mark.parametrize("names", [
    ["bs.jit", "bs.grad", "bs.vmap"],
    ["bs.remat", "bs.for_loop", "bs.grad", "bs.jit"],
    ["jax.vmap", "bs.grad", "jax.jit"],
    ["bs.vmap", "jax.grad", "bs.remat", "bs.jit"],
    ["bs.for_loop", "bs.vmap", "bs.grad", "jax.vmap"],
])
@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["replicated", "sharded"])
def test_named_compositions_match_pure_jax(names, sharded):
  _check(names, sharded, AxisType.Auto)
  _check(names, sharded, AxisType.Explicit)


def test_grad_inside_shard_map_of_a_replicated_state():
  _check(["bs.grad", "bs.shard_map", "bs.jit"], sharded=False)
