"""Gradients through sparse, delayed delivery (``bm.TrainableDelivery``).

The reference is the same network written densely in pure JAX: one weight
matrix per delay ``W[d, r, pre, post]`` scatter-added from the synapse
list, and the input of step ``t`` summed from the spikes of steps ``t -
d``. Checked: the weights' gradients equal the reference's to float
tolerance on 1 and 8 devices, are the same bits on 1 and 8 devices, match
central finite differences of a smooth (sigmoid-spike) network in float64,
follow a user's surrogate, and do not change under ``bs.remat`` chunks.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard import models as bm
from brainshard._models.delivery.grad import presynaptic

N, K, T, ALPHA, R = 64, 8, 16, 0.8, 2


def synapses(seed=0, n=N, k=K, delays=(1, 4)):
  """k inputs per neuron, receptor 0 excitatory, 1 inhibitory."""
  rng = np.random.default_rng(seed)
  post = np.repeat(np.arange(n), k)
  pre = rng.integers(0, n, post.size)
  inh = pre >= n * 3 // 4
  weight = np.where(inh, -rng.uniform(0.1, 0.4, post.size),
                    rng.uniform(0.05, 0.3, post.size))
  return dict(pre=pre, post=post, weight=weight,
              delay=rng.integers(delays[0], delays[1] + 1, post.size),
              receptor=inh.astype(np.int64))


def drive(seed=1, n=N, steps=T):
  return np.random.default_rng(seed).uniform(0.0, 0.6, (steps, n))


def slots(syn, n, shards):
  """Where each listed synapse sits in the index's [S * capacity] arrays
  (index_from_arrays: the target's shard, stably sorted by pre)."""
  n_local = n // shards
  shard = syn["post"] // n_local
  cap = max(np.bincount(shard, minlength=shards).max(), 1)
  out = np.empty(len(shard), np.int64)
  for s in range(shards):
    sel = np.flatnonzero(shard == s)
    sel = sel[np.argsort(syn["pre"][sel], kind="stable")]
    out[sel] = s * cap + np.arange(len(sel))
  return out


class Net:
  """A recurrent LIF network on TrainableDelivery; ``loss(x)`` runs it on
  the drive ``x [T, (B,) N]`` and reads out the integrated voltage."""

  def __init__(self, syn, shards, *, surrogate=bm.FastSigmoid(), every=1,
               batch=None, graded=False, dtype=jnp.float32, spike=None,
               chunk=None):
    mesh = jax.make_mesh((shards,), ("x",))
    idx = bm.index_from_arrays(**syn, n=N, n_shards=shards, n_receptors=R,
                               mesh=mesh)
    self.mesh, self.dtype = mesh, dtype
    self.net = bm.TrainableDelivery(idx, mesh, every=every, batch=batch,
                                    graded=graded, dtype=dtype)
    lead = () if batch is None else (batch,)
    nspec = P(*(None,) * len(lead), "x")
    put = lambda: jax.device_put(jnp.zeros(lead + (N,), dtype),  # noqa: E731
                                 NamedSharding(mesh, nspec))
    self.v, self.s, self.acc = (bs.ShortTermState(put(), spec=nspec)
                                for _ in range(3))
    spike = spike or (lambda x: bm.spike(x, surrogate))
    rd = jax.device_put(np.linspace(-1, 1, N).astype(dtype),
                        NamedSharding(mesh, P()))

    def update(inputs, x):  # inputs [(B,) R, n_local]
      v = ALPHA * self.v.value * (1 - self.s.value) + inputs.sum(-2) + x
      self.v.value, self.s.value = v, spike(v - 1.0)
      self.acc.value = self.acc.value + v
      return self.s.value

    step = self.net.step(update, in_specs=nspec if every == 1
                         else P(None, *nspec))

    def loss(x):
      for st in (self.v, self.s, self.acc):
        st.value = jnp.zeros_like(st.value)
      self.net.reset()
      if every > 1:  # [T, ...] -> [T / every, every, ...]: one call each
        x = x.reshape(-1, every, *x.shape[1:])
      if chunk is None:
        bs.for_loop(step, x)
      else:  # bs.remat over chunks of `chunk` calls: memory O(T / chunk)
        body = bs.remat(lambda xc: bs.for_loop(step, xc))
        bs.for_loop(body, x.reshape(-1, chunk, *x.shape[1:]))
      # A fixed order: replicate, then reduce (no psum of partial sums).
      acc = jax.sharding.reshard(self.acc.value, NamedSharding(mesh, P()))
      return (acc @ rd).sum() / T

    self.loss = loss
    self.grad = bs.jit(bs.value_and_grad(loss, grad_states=self.net.weight))

  def weight_grad(self, x, syn):
    """(loss, the weights' gradient in the synapse list's order)."""
    value, g = self.grad(jnp.asarray(x, self.dtype))
    return value, np.asarray(g)[slots(syn, N, self.mesh.size)]


def dense_reference(syn, x, *, surrogate=bm.FastSigmoid(), spike=None,
                    dtype=jnp.float32):
  """(loss, d loss / d weight per listed synapse) in pure dense JAX; ``x
  [T, N]`` or ``[T, B, N]`` (the batch's losses summed)."""
  dmax = int(syn["delay"].max())
  spike = spike or (lambda x: bm.spike(x, surrogate))
  rd = jnp.asarray(np.linspace(-1, 1, N), dtype)
  pre, post, d, r = (jnp.asarray(syn[k]) for k in
                     ("pre", "post", "delay", "receptor"))

  def one(w, x):
    W = jnp.zeros((dmax + 1, R, N, N), dtype).at[d, r, pre, post].add(w)

    def step(carry, xt):
      v, s, acc, hist = carry  # hist[d - 1]: the spikes of d steps ago
      inp = jnp.einsum("dp,drpq->q", hist, W[1:])
      v = ALPHA * v * (1 - s) + inp + xt
      s = spike(v - 1.0)
      hist = jnp.concatenate([s[None], hist[:-1]])
      return (v, s, acc + v, hist), None

    z = jnp.zeros(N, dtype)
    (_, _, acc, _), _ = jax.lax.scan(
        step, (z, z, z, jnp.zeros((dmax, N), dtype)), x)
    return jnp.dot(acc, rd) / T

  def loss(w):
    x_ = jnp.asarray(x, dtype)
    if x_.ndim == 2:
      return one(w, x_)
    return jax.vmap(one, (None, 1))(w, x_).sum()

  w = jnp.asarray(syn["weight"], np.float32).astype(dtype)
  value, g = jax.jit(jax.value_and_grad(loss))(w)
  return value, np.asarray(g)


def assert_close(g, ref, rel=2e-5):
  np.testing.assert_allclose(g, ref, atol=rel * np.abs(ref).max())


@pytest.mark.slow  # deliver's loops compile in ~3 s
def test_deliver_block_vjp_is_the_transposed_scatter():
  """One shard, no mesh: deliver_block's value and VJP (buffer, spikes,
  weights) against jax.vjp of the same delivery written as one scatter."""
  syn = synapses(n=16, k=3)
  idx = bm.index_from_arrays(**syn, n=16, n_receptors=R)
  pre, post, d, r = (syn[k] for k in ("pre", "post", "delay", "receptor"))
  order = np.argsort(pre, kind="stable")        # the index's slot order
  rng = np.random.default_rng(3)
  buf = jnp.asarray(rng.normal(size=(2, R, 5, 16)), jnp.float32)
  spikes = jnp.asarray(rng.random((2, 3, 16)) < 0.5, jnp.float32)  # B, m
  w = idx.weight
  pre_of = presynaptic(idx)

  def ours(buf, spikes, w):
    return bm.deliver_block(buf, spikes, 7, idx, w, pre_of, blocks=4,
                            sizes=(16,))

  def scatter(buf, spikes, w):
    for k in range(spikes.shape[1]):
      slot = (7 + k + d[order]) % 5
      add = w[:len(order)] * spikes[:, k, pre[order]]
      buf = buf.at[:, r[order], slot, post[order]].add(add)
    return buf

  @jax.jit
  def both(ct):
    out = []
    for f in (ours, scatter):
      value, vjp = jax.vjp(f, buf, spikes, w)
      out.append((value, *vjp(ct)))
    return out

  ours_, ref = both(jnp.asarray(rng.normal(size=buf.shape), jnp.float32))
  for x, y in zip(ours_, ref):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def case():
  return synapses(), drive()


@pytest.fixture(scope="module")
def grads(case):  # compiles two networks and the reference: ~10 s
  """(loss, weight gradient) on 1 and 8 devices and the dense reference."""
  syn, x = case
  out = {s: Net(syn, s).weight_grad(x, syn) for s in (1, 8)}
  out["dense"] = dense_reference(syn, x)
  return out


@pytest.mark.slow
def test_the_network_spikes_and_the_gradient_is_not_trivial(grads):
  _, g = grads["dense"]
  assert (g != 0).mean() > 0.5 and np.isfinite(g).all()


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 8])
def test_gradients_equal_the_dense_reference(grads, shards):
  (value, g), (ref_value, ref) = grads[shards], grads["dense"]
  np.testing.assert_allclose(value, ref_value, rtol=1e-5)
  assert_close(g, ref)


@pytest.mark.slow
def test_gradients_are_the_same_bits_on_1_and_8_devices(grads):
  assert float(grads[1][0]) == float(grads[8][0])
  np.testing.assert_array_equal(grads[1][1], grads[8][1])


@pytest.mark.slow
def test_finite_differences_of_a_smooth_network_in_float64():
  """Sigmoid spikes (smooth forward, graded delivery): bs.grad is the true
  derivative, checked along random directions by central differences."""
  syn, x = synapses(), drive()
  smooth = lambda v: jax.nn.sigmoid(4.0 * v)  # noqa: E731
  with jax.enable_x64(True):
    net = Net(syn, 8, graded=True, dtype=jnp.float64, spike=smooth)
    value, g = net.weight_grad(x, syn)
    _, ref = dense_reference(syn, x, spike=smooth, dtype=jnp.float64)
    assert_close(g, ref, 1e-12)
    loss = bs.jit(net.loss)
    w0 = net.net.weight.value
    order = slots(syn, N, 8)
    rng = np.random.default_rng(2)
    for _ in range(3):
      u = rng.normal(size=len(order))
      du = np.zeros(w0.shape)
      du[order] = u
      eps, f = 1e-5, []
      for sign in (1, -1):
        net.net.weight.value = w0 + sign * eps * jnp.asarray(du)
        f.append(float(loss(jnp.asarray(x))))
      net.net.weight.value = w0
      fd = (f[0] - f[1]) / (2 * eps)
      np.testing.assert_allclose(g @ u, fd, rtol=1e-7)


@pytest.mark.slow
def test_a_user_surrogate_is_used():
  syn, x = synapses(), drive()
  mine = lambda x: jnp.exp(-4.0 * x * x)  # noqa: E731
  _, g = Net(syn, 8, surrogate=mine).weight_grad(x, syn)
  _, ref = dense_reference(syn, x, surrogate=mine)
  _, other = dense_reference(syn, x, surrogate=bm.ArcTan())
  assert_close(g, ref)
  assert np.abs(g - other).max() > 50 * 2e-5 * np.abs(ref).max()


@pytest.mark.slow
def test_remat_chunks_give_the_same_gradient(grads, case):
  """The same forward bits; the gradient to rounding: each chunk's weight
  cotangents are summed before they join the total (scan's transpose), a
  different association of the same terms."""
  syn, x = case
  value, g = Net(syn, 8, chunk=4).weight_grad(x, syn)
  assert float(value) == float(grads[8][0])
  np.testing.assert_allclose(g, grads[8][1], rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_a_batch_exchanging_every_min_delay_steps():
  """batch=2 and every=min_delay=2: the dense reference's summed batch, and
  the same bits on 1 and 8 devices."""
  syn = synapses(delays=(2, 5))
  x = np.stack([drive(1), drive(3)], 1)                    # [T, B, N]
  got = {s: Net(syn, s, every=2, batch=2).weight_grad(x, syn) for s in (1, 8)}
  ref_value, ref = dense_reference(syn, x)
  np.testing.assert_allclose(got[8][0], ref_value, rtol=1e-5)
  assert_close(got[8][1], ref)
  assert float(got[1][0]) == float(got[8][0])
  np.testing.assert_array_equal(got[1][1], got[8][1])


def test_blocks_must_fit_the_mesh_and_the_neurons():
  syn = synapses(n=24, k=2)
  mesh = jax.make_mesh((8,), ("x",))
  idx = bm.index_from_arrays(**syn, n=24, n_shards=8, n_receptors=R)
  with pytest.raises(ValueError, match="blocks = 4 must be a multiple"):
    bm.TrainableDelivery(idx, mesh, blocks=4)
  with pytest.raises(ValueError, match="divide the 24 neurons"):
    bm.TrainableDelivery(idx, mesh, blocks=16)



@pytest.mark.slow
def test_the_docs_snippet_runs_and_gives_the_same_bits_on_1_and_8(capsys):
  """docs/training.md's first example of gradients through delivery."""
  import pathlib
  import re
  text = (pathlib.Path(__file__).parents[1] / "docs" / "training.md"
          ).read_text()
  section = text.split("## Gradients through sparse, delayed delivery")[1]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  assert "shards = 1" in code
  listed = dict(pre=np.array([0, 0, 1, 2]), post=np.array([1, 2, 3, 3]))
  g = {}
  for shards in (1, 8):
    scope = {}
    exec(compile(code.replace("shards = 1", f"shards = {shards}"),
                 "docs/training.md", "exec"), scope)
    g[shards] = np.asarray(scope["g"])[slots(listed, 8, shards)]
  assert np.abs(g[1]).min() > 0 and capsys.readouterr().out
  np.testing.assert_array_equal(g[1], g[8])
