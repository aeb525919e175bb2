"""bs.remat: a stateful jax.checkpoint. Gradients through it equal those
through the function itself and through a hand-written pure program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brainshard as bs

KEY = jax.random.PRNGKey(0)


def allclose(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5,
                                                       atol=1e-6), a, b)


def make():
  k1, k2 = jax.random.split(KEY)
  w = bs.ParamState(jax.random.normal(k1, (4, 4)) * 0.5, name="w")
  v = bs.ShortTermState(jnp.zeros(4), name="v")
  xs = jax.random.normal(k2, (12, 4))

  def step(x):
    v.value = jnp.tanh(v.value @ w.value + x)
    return jnp.sum(v.value ** 2)

  return w, v, xs, step


def pure_loss(w, xs):
  def body(v, x):
    v = jnp.tanh(v @ w + x)
    return v, jnp.sum(v ** 2)
  vf, ys = jax.lax.scan(body, jnp.zeros(4), xs)
  return ys.sum(), vf


@pytest.mark.slow
def test_grad_through_remat_equals_grad_through_step():
  w, v, xs, step = make()
  plain = bs.grad(lambda: step(xs[0]) + step(xs[1]), grad_states=w)
  r = bs.remat(step)
  remat = bs.grad(lambda: r(xs[0]) + r(xs[1]), grad_states=w)
  v.value = jnp.zeros(4)
  g_plain = plain()
  v_plain = v.value
  v.value = jnp.zeros(4)
  g_remat = remat()
  allclose(g_remat, g_plain)
  allclose(v.value, v_plain)
  ref, _ = jax.grad(pure_loss, has_aux=True)(w.value, xs[:2])
  allclose(g_remat, ref)


@pytest.mark.slow
@pytest.mark.parametrize("policy", [None, jax.checkpoint_policies.nothing_saveable])
def test_remat_inside_for_loop_under_grad(policy):
  w, v, xs, step = make()
  rstep = bs.remat(step, policy=policy)

  def loss(f):
    v.value = jnp.zeros(4)
    return bs.for_loop(f, xs).sum()

  ref, vf = jax.grad(pure_loss, has_aux=True)(w.value, xs)
  g = bs.jit(bs.grad(lambda: loss(rstep), grad_states=w))()
  allclose(g, ref)
  allclose(v.value, vf)
  allclose(bs.grad(lambda: loss(step), grad_states=w)(), ref)
  # the program really rematerialises: a checkpoint inside the loop body
  text = str(bs.StatefulFunction(
      bs.grad(lambda: loss(rstep), grad_states=w)).make_jaxpr())
  plain = str(bs.StatefulFunction(
      bs.grad(lambda: loss(step), grad_states=w)).make_jaxpr())
  assert "remat" in text and "remat" not in plain


@pytest.mark.slow
def test_eager_remat_writes_states_and_caches():
  w, v, xs, step = make()
  runs = []

  def counted(x, scale):
    runs.append(1)
    return step(x) * scale

  r = bs.remat(counted, static_argnums=1)
  out = r(xs[0], 2.0)
  ref_v = jnp.tanh(xs[0])
  allclose(v.value, ref_v)
  allclose(out, 2.0 * jnp.sum(ref_v ** 2))
  r(xs[1], 2.0)
  r(xs[2], 2.0)
  assert len(runs) == 1
  r(xs[2], 3.0)  # a new static value: one new trace
  assert len(runs) == 2


def test_remat_decorator_and_kwargs():
  w = bs.ParamState(jnp.array([0.5, -1.0]), name="w")

  @bs.remat(prevent_cse=False)
  def f(x, *, k):
    return jnp.sum(jnp.sin(w.value * x) * k)

  g = bs.grad(lambda: f(2.0, k=jnp.array(3.0)), grad_states=w)()
  allclose(g, jax.grad(lambda w: jnp.sum(jnp.sin(w * 2.0) * 3.0))(w.value))
