"""bs.grad and family: every result is compared with jax on a hand-written
pure function of the same values."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from _util import mesh

KEY = jax.random.PRNGKey(0)


def allclose(a, b, **kw):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(
      x, y, rtol=kw.get("rtol", 1e-5), atol=kw.get("atol", 1e-6)), a, b)


class Model:
  """Two parameters, a non-float counter and a written trace."""

  def __init__(self):
    k1, k2 = jax.random.split(KEY)
    self.w = bs.ParamState(jax.random.normal(k1, (3, 2)), name="w")
    self.b = bs.ParamState(jax.random.normal(k2, (2,)), name="b")
    self.scale = bs.State(jnp.array(1.5), name="scale")
    self.count = bs.State(jnp.zeros((), jnp.int32), name="count")
    self.trace = bs.ShortTermState(jnp.zeros(2), name="trace")

  def loss(self, x):
    h = jnp.tanh(x @ self.w.value + self.b.value) * self.scale.value
    self.count.value = self.count.value + 1
    self.trace.value = h.mean(0)
    return jnp.sum(h ** 2)


def pure_loss(w, b, scale, x):
  return jnp.sum((jnp.tanh(x @ w + b) * scale) ** 2)


X = jax.random.normal(jax.random.PRNGKey(1), (4, 3))


@functools.lru_cache(maxsize=None)
def _pure_grad(argnums):
  # jitted once per argnums: the same pure gradient, one compile for all
  # tests instead of one per primitive per call
  return jax.jit(jax.grad(pure_loss, argnums))


def reference(m, argnums=(0, 1)):
  return _pure_grad(argnums)(m.w.value, m.b.value, m.scale.value, X)


@pytest.mark.slow
def test_grad_states_structures():
  m = Model()
  gw, gb = reference(m)
  _, gscale = reference(m, (0, 2))
  allclose(bs.grad(m.loss, grad_states=m.w)(X), gw)
  g = bs.grad(m.loss, grad_states=[m.w, m.b])(X)
  assert isinstance(g, list)
  allclose(g, [gw, gb])
  g = bs.grad(m.loss, grad_states=(m.b, m.w))(X)
  assert isinstance(g, tuple)
  allclose(g, (gb, gw))
  allclose(bs.grad(m.loss, grad_states={"w": m.w, "s": m.scale})(X),
           {"w": gw, "s": gscale})
  g = bs.grad(m.loss, grad_states=bs.ParamState)(X)
  assert list(g) == [m.w, m.b]  # dict in creation order
  allclose(g[m.w], gw)
  allclose(g[m.b], gb)
  g = bs.grad(m.loss, grad_states=lambda s: s.name in ("b", "scale"))(X)
  assert set(g) == {m.b, m.scale}
  allclose(g[m.scale], gscale)


@pytest.mark.slow
def test_argnums_conventions():
  m = Model()
  gw, gb = reference(m)
  gx = reference(m, 3)
  sg, ag = bs.grad(m.loss, grad_states=m.w, argnums=0)(X)
  allclose((sg, ag), (gw, gx))
  sg, ag = bs.grad(m.loss, grad_states=m.w, argnums=(0,))(X)
  assert isinstance(ag, tuple)
  allclose(ag[0], gx)
  # grad_states=None: exactly jax.grad(fun, argnums or 0)
  allclose(bs.grad(m.loss)(X), gx)
  f = lambda x, y: jnp.sum(jnp.sin(x) * y * m.scale.value)  # noqa: E731
  y = jnp.arange(3.0)
  for argnums in (None, 1, (0, 1)):
    ref = jax.grad(f, argnums if argnums is not None else 0)(X[0], y)
    allclose(bs.grad(f, argnums=argnums)(X[0], y), ref)


@pytest.mark.slow
def test_value_and_grad_and_aux():
  m = Model()
  gw, gb = reference(m)
  value = pure_loss(m.w.value, m.b.value, m.scale.value, X)
  v, g = bs.value_and_grad(m.loss, grad_states=[m.w, m.b])(X)
  allclose((v, g), (value, [gw, gb]))

  def with_aux(x):
    return m.loss(x), {"trace": m.trace.value}

  (v, aux), g = bs.value_and_grad(with_aux, grad_states=m.w, has_aux=True)(X)
  allclose((v, g), (value, gw))
  allclose(aux["trace"], m.trace.value)
  g, aux = bs.grad(with_aux, grad_states=m.b, has_aux=True)(X)
  allclose(g, gb)
  with pytest.raises(TypeError, match="pair"):
    bs.grad(m.loss, grad_states=m.b, has_aux=True)(X)


@pytest.mark.parametrize("jitted", [False, True])
def test_written_states_keep_forward_values(jitted):
  m = Model()
  w0 = m.w.value
  g = bs.grad(m.loss, grad_states=m.w)
  run = bs.jit(g) if jitted else g
  run(X)
  run(X)
  assert int(m.count.value) == 2
  h = jnp.tanh(X @ m.w.value + m.b.value) * m.scale.value
  allclose(m.trace.value, h.mean(0))
  assert m.w.value is w0 or np.array_equal(m.w.value, w0)  # read-only: kept


def test_eager_calls_trace_once():
  m = Model()
  runs = []

  def loss(x):
    runs.append(1)
    return m.loss(x)

  g = bs.grad(loss, grad_states=bs.ParamState)
  first = g(X)
  for _ in range(3):
    allclose(g(X), first)
  assert len(runs) == 1
  # An inline bs.grad(loss) is the same program: no new trace either.
  bs.grad(loss, grad_states=bs.ParamState)(X)
  assert len(runs) == 1
  assert int(m.count.value) == 5
  # A State that changes shape gets a new trace with the new shape.
  m.b.value = jnp.zeros((1, 2))
  g2 = g(X)
  assert len(runs) == 2 and g2[m.b].shape == (1, 2)
  allclose(g2[m.b], reference(m)[1])


@pytest.mark.slow
def test_state_dict_is_a_pytree_for_jit_and_optax():
  m = Model()
  opt = optax.adam(1e-2)
  params = {m.w: m.w.value, m.b: m.b.value}
  opt_state = opt.init(params)

  @bs.jit
  def train_step(opt_state, x):
    loss, grads = bs.value_and_grad(m.loss, grad_states=bs.ParamState)(x)
    updates, opt_state = opt.update(grads, opt_state)
    for s, u in updates.items():
      s.value = s.value + u
    return opt_state, loss

  def pure_step(params, opt_state, x):
    loss, grads = jax.value_and_grad(pure_loss, (0, 1))(*params, 1.5, x)
    updates, opt_state = opt.update({"w": grads[0], "b": grads[1]}, opt_state)
    return (params[0] + updates["w"], params[1] + updates["b"]), opt_state, loss

  pure_step = jax.jit(pure_step)
  ref_params = (m.w.value, m.b.value)
  ref_opt = opt.init({"w": ref_params[0], "b": ref_params[1]})
  for _ in range(3):
    opt_state, loss = train_step(opt_state, X)
    ref_params, ref_opt, ref_loss = pure_step(ref_params, ref_opt, X)
    allclose(loss, ref_loss)
  allclose((m.w.value, m.b.value), ref_params)
  assert sorted([m.b, m.w]) == [m.w, m.b]
  assert m.w < m.b and m.b >= m.w and not m.w == Model().w  # eq: identity
  with pytest.raises(TypeError):
    m.w < 1  # noqa: B015


def test_bad_grad_states_leave_states_as_they_were():
  m = Model()
  before = [s.value for s in (m.w, m.b, m.count, m.trace)]
  unused = bs.ParamState(jnp.ones(2), name="unused")
  with pytest.raises(ValueError, match="'unused'.*never reads"):
    bs.grad(m.loss, grad_states=[m.w, unused])(X)
  with pytest.raises(ValueError, match="'trace'.*writes it before"):
    bs.grad(m.loss, grad_states=m.trace)(X)
  with pytest.raises(TypeError, match="'count'.*floating-point"):
    bs.grad(m.loss, grad_states={"c": m.count})(X)
  with pytest.raises(TypeError, match="'count'.*floating-point"):
    bs.grad(m.loss, grad_states=bs.State)(X)
  with pytest.raises(ValueError, match="LongTermState matches no State"):
    bs.grad(m.loss, grad_states=bs.LongTermState)(X)
  with pytest.raises(TypeError, match="grad_states must be"):
    bs.grad(m.loss, grad_states=3)
  with pytest.raises(TypeError, match="each entry of grad_states must be a "
                     "State; got ArrayImpl"):
    bs.grad(m.loss, grad_states=[m.w, jnp.ones(2)])
  with pytest.raises(ValueError, match="argnums"):
    bs.grad(m.loss, grad_states=m.w, argnums=2)(X)
  for s, v in zip((m.w, m.b, m.count, m.trace), before):
    np.testing.assert_array_equal(s.value, v)


@pytest.mark.slow
def test_random_state_and_pytree_state():
  rng = bs.RandomState(7, name="rng")
  p = bs.ParamState({"a": jnp.array([1.0, 2.0]), "b": jnp.array(0.5)}, name="p")

  def loss():
    noise = rng.normal(size=(2,))
    return jnp.sum((p.value["a"] * p.value["b"] + noise) ** 2)

  key0 = rng.value
  noise = bs.RandomState(key0).normal(size=(2,))  # the draw loss will make
  ref = jax.grad(lambda q: jnp.sum((q["a"] * q["b"] + noise) ** 2))(p.value)
  for run in (bs.grad(loss, grad_states=bs.ParamState),
              bs.jit(bs.grad(loss, grad_states=bs.ParamState))):
    rng.value = key0
    g = run()
    allclose(g[p], ref)
    advanced = bs.RandomState(key0)
    advanced.normal(size=(2,))
    np.testing.assert_array_equal(jax.random.key_data(rng.value),
                                  jax.random.key_data(advanced.value))


def test_bs_grad_under_foreign_jax_jit():
  m = Model()
  read_only = lambda x: pure_loss(m.w.value, m.b.value, 1.5, x)  # noqa: E731
  gw = reference(m)[0]
  allclose(jax.jit(bs.grad(read_only, grad_states=m.w))(X), gw)
  count = m.count.value
  with pytest.raises(bs.StateTraceError, match="'count'"):
    jax.jit(bs.grad(m.loss, grad_states=m.w))(X)
  assert m.count.value is count


# ----------------------------------------------------------------------------
# vjp, jvp, jacobians, hessian


def test_vjp_and_jvp():
  m = Model()
  f = lambda x: jnp.tanh(x @ m.w.value) * m.scale.value  # noqa: E731
  pure = lambda w, x: jnp.tanh(x @ w) * 1.5  # noqa: E731
  ct = jnp.ones((4, 2))
  out, f_vjp = bs.vjp(f, X, grad_states={"w": m.w})
  ref_out, ref_vjp = jax.vjp(pure, m.w.value, X)
  allclose(out, ref_out)
  (gs, gx), (rw, rx) = f_vjp(ct), ref_vjp(ct)
  allclose((gs["w"], gx), (rw, rx))
  out, f_vjp = bs.vjp(f, X)
  allclose(f_vjp(ct), (rx,))

  dw, dx = jnp.ones_like(m.w.value), jnp.zeros_like(X)
  out, tan = bs.jvp(f, (X,), (dx,), grad_states=bs.ParamState,
                    state_tangents={m.w: dw, m.b: jnp.zeros(2)})
  ref = jax.jvp(pure, (m.w.value, X), (dw, dx))
  allclose((out, tan), ref)
  with pytest.raises(ValueError, match="state_tangents"):
    bs.jvp(f, (X,), (dx,), grad_states=m.w)


@pytest.mark.parametrize("kind", ["jacrev", "jacfwd"])
def test_jacobians(kind):
  m = Model()
  f = lambda x: {"h": jnp.tanh(x @ m.w.value + m.b.value)}  # noqa: E731
  pure = lambda w, b, x: {"h": jnp.tanh(x @ w + b)}  # noqa: E731
  ours, theirs = getattr(bs, kind), getattr(jax, kind)
  ref = jax.jit(theirs(pure, (0, 1, 2)))(m.w.value, m.b.value, X)["h"]
  jac = ours(f, grad_states=[m.w, m.b], argnums=0)(X)["h"]
  allclose(jac, ([ref[0], ref[1]], ref[2]))
  allclose(ours(f)(X)["h"], ref[2])


@pytest.mark.slow
def test_hessian():
  m = Model()
  f = lambda: jnp.sum(jnp.tanh(m.w.value) ** 3) * jnp.sum(m.b.value ** 2)  # noqa
  pure = lambda w, b: jnp.sum(jnp.tanh(w) ** 3) * jnp.sum(b ** 2)  # noqa: E731
  ref = jax.jit(jax.hessian(pure, (0, 1)))(m.w.value, m.b.value)
  h = bs.hessian(f, grad_states={"w": m.w, "b": m.b})()
  allclose(h["w"]["w"], ref[0][0])
  allclose(h["w"]["b"], ref[0][1])
  allclose(h["b"]["w"], ref[1][0])
  h = bs.hessian(f, grad_states=bs.ParamState)()
  allclose(h[m.b][m.b], ref[1][1])
  # with argnums and has_aux: ((H_ss, H_sx), (H_xs, H_xx)) as jax.hessian
  g = lambda x: (jnp.sum(jnp.sin(m.b.value * x) ** 2), x.sum())  # noqa: E731
  x = jnp.array([1.0, 2.0])
  h, aux = bs.hessian(g, grad_states=m.b, argnums=0, has_aux=True)(x)
  allclose(h, jax.jit(jax.hessian(lambda b, x: jnp.sum(jnp.sin(b * x) ** 2),
                                   (0, 1)))(m.b.value, x))
  allclose(aux, 3.0)


# ----------------------------------------------------------------------------
# Compositions


@jax.custom_jvp
def spike(v):
  return (v > 0).astype(v.dtype)


@spike.defjvp
def _spike_jvp(primals, tangents):
  (v,), (dv,) = primals, tangents
  return spike(v), dv / (1 + 10 * jnp.abs(v)) ** 2  # fast-sigmoid surrogate


@pytest.mark.slow
def test_bptt_through_for_loop_matches_lax_scan():
  n_in, n, steps = 3, 5, 20
  k1, k2, k3 = jax.random.split(KEY, 3)
  w_in = bs.ParamState(jax.random.normal(k1, (n_in, n)), name="w_in")
  w_rec = bs.ParamState(jax.random.normal(k2, (n, n)) * 0.3, name="w_rec")
  v = bs.ShortTermState(jnp.zeros(n), name="v")
  s = bs.ShortTermState(jnp.zeros(n), name="s")
  xs = jax.random.normal(k3, (steps, n_in))

  def step(x):
    v.value = 0.9 * v.value * (1 - s.value) + x @ w_in.value + s.value @ w_rec.value
    s.value = spike(v.value - 1.0)
    return s.value

  def loss():
    v.value, s.value = jnp.zeros(n), jnp.zeros(n)
    return jnp.mean((bs.for_loop(step, xs).mean(0) - 0.2) ** 2)

  def pure(w_in, w_rec):
    def body(c, x):
      v, s = c
      v = 0.9 * v * (1 - s) + x @ w_in + s @ w_rec
      s = spike(v - 1.0)
      return (v, s), s
    (vf, _), ss = jax.lax.scan(body, (jnp.zeros(n), jnp.zeros(n)), xs)
    return jnp.mean((ss.mean(0) - 0.2) ** 2), vf

  (ref_loss, vf), ref = jax.jit(jax.value_and_grad(pure, (0, 1), has_aux=True))(
      w_in.value, w_rec.value)
  assert float(jnp.abs(ref[0]).sum()) > 0  # the surrogate carries gradient
  for run in (bs.value_and_grad(loss, grad_states=[w_in, w_rec]),
              bs.jit(bs.value_and_grad(loss, grad_states=[w_in, w_rec]))):
    value, g = run()
    allclose((value, g), (ref_loss, list(ref)))
    allclose(v.value, vf)


@pytest.mark.slow
@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_inside_shard_map_is_the_single_device_gradient(check_vma):
  m = mesh((8,), ("x",))
  k1, k2 = jax.random.split(KEY)
  w = bs.ParamState(jax.random.normal(k1, (3, 2)), name="w")
  seen = bs.State(jnp.zeros((), jnp.int32), name="seen")
  x = jax.random.normal(k2, (16, 3))
  y = jnp.ones((16, 2))

  def loss(x, y):  # per shard: its part of the global mean
    seen.value = seen.value + 1
    return jnp.sum((jnp.tanh(x @ w.value) - y) ** 2) / 16

  def step(x, y):
    l, g = bs.value_and_grad(loss, grad_states=w)(x, y)
    if not check_vma:  # per-shard gradients: the user sums them
      g = jax.lax.psum(g, "x")
    return jax.lax.psum(l, "x"), g

  run = bs.shard_map(step, mesh=m, in_specs=(P("x"), P("x")),
                     out_specs=(P(), P()), check_vma=check_vma)
  ref_l, ref_g = jax.jit(jax.value_and_grad(
      lambda w: jnp.sum((jnp.tanh(x @ w) - y) ** 2) / 16))(w.value)
  allclose(run(x, y), (ref_l, ref_g))
  allclose(bs.jit(run)(x, y), (ref_l, ref_g))
  assert int(seen.value) == 2


def test_jax_transforms_around_bs_jit_reading_states():
  w = bs.ParamState(jnp.array([1.0, -2.0, 0.5]), name="w")
  f = bs.jit(lambda x: jnp.sum(jnp.sin(w.value * x)))
  pure = lambda x: jnp.sum(jnp.sin(w.value * x))  # noqa: E731
  x = jnp.array([0.3, 0.2, 0.1])
  allclose(jax.grad(f)(x), jax.grad(pure)(x))
  allclose(jax.jit(jax.grad(f))(x), jax.grad(pure)(x))


def test_bs_jit_of_jax_grad_of_bs_jit():
  w = bs.ParamState(jnp.array([1.0, -2.0, 0.5]), name="w")
  f = bs.jit(lambda x: jnp.sum(jnp.sin(w.value * x)))
  x = jnp.array([0.3, 0.2, 0.1])
  ref = jax.grad(lambda x: jnp.sum(jnp.sin(w.value * x)))(x)
  allclose(bs.jit(jax.grad(f))(x), ref)


@pytest.mark.slow
def test_grad_of_function_calling_bs_jit_and_nested_grad():
  w = bs.ParamState(jnp.array([1.0, 2.0]), name="w")
  v = bs.State(jnp.zeros(2), name="v")

  @bs.jit
  def inner(x):
    v.value = jnp.sin(w.value * x)
    return v.value

  loss = lambda x: jnp.sum(inner(x) ** 2)  # noqa: E731
  pure = lambda w, x: jnp.sum(jnp.sin(w * x) ** 2)  # noqa: E731
  allclose(bs.grad(loss, grad_states=w)(1.5), jax.grad(pure)(w.value, 1.5))
  allclose(v.value, jnp.sin(w.value * 1.5))
  # d/dx of d/dw: a bs.grad inside another
  inner_g = bs.grad(loss, grad_states=w)
  outer = bs.grad(lambda x: jnp.sum(inner_g(x)))
  allclose(outer(1.5), jax.grad(lambda x: jnp.sum(jax.grad(pure)(w.value, x)))(1.5))


# ----------------------------------------------------------------------------
# examples/train_snn.py


def _train_snn():
  from examples import train_snn
  return train_snn


TINY = ["--samples", "32", "--batch", "16", "--steps", "8", "--hidden", "16",
        "--inputs", "6", "--lr", "3e-2"]


@pytest.mark.slow
def test_train_snn_data_parallel_gradients_are_single_device_gradients():
  ex = _train_snn()
  args = ex.parse_args(TINY)
  x, y = ex.make_task(args)
  x, y = x[:, :16], y[:16]
  net = ex.RecurrentLIF(args, jax.random.PRNGKey(0))
  (l1, c1), g1 = ex.grad_fn(net, 1)(x, y)
  (l8, c8), g8 = ex.grad_fn(net, 8)(x, y)
  assert list(g1) == [net.w_in, net.w_rec, net.w_out]
  assert float(jnp.abs(g1[net.w_in]).sum()) > 0
  allclose((l8, g8), (l1, g1), rtol=1e-4, atol=1e-6)
  assert int(c8) == int(c1)


@pytest.mark.slow
def test_train_snn_runs_and_learns(capsys):
  ex = _train_snn()
  history = ex.main(TINY + ["--epochs", "4"])
  assert len(history) == 4 and history[-1] < history[0]
  assert "epoch   4  loss" in capsys.readouterr().out
  h8 = ex.main(TINY + ["--epochs", "1", "--devices", "8"])
  allclose(h8[0], history[0], rtol=1e-4)
