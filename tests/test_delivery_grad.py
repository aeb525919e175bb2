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
  """A recurrent LIF network on TrainableDelivery; ``loss()`` runs it."""

  def __init__(self, syn, shards, *, surrogate=bm.FastSigmoid(), every=1,
               graded=False, dtype=jnp.float32, spike=None, chunk=None):
    mesh = jax.make_mesh((shards,), ("x",))
    idx = bm.index_from_arrays(**syn, n=N, n_shards=shards, n_receptors=R,
                               mesh=mesh)
    self.mesh, self.every, self.chunk = mesh, every, chunk
    self.net = bm.TrainableDelivery(idx, mesh, every=every, graded=graded,
                                    dtype=dtype)
    put = lambda: jax.device_put(jnp.zeros(N, dtype),  # noqa: E731
                                 NamedSharding(mesh, P("x")))
    self.v, self.s, self.acc = (bs.ShortTermState(put(), spec=P("x"))
                                for _ in range(3))
    spike = spike or (lambda x: bm.spike(x, surrogate))
    rd = jax.device_put(np.linspace(-1, 1, N).astype(dtype),
                        NamedSharding(mesh, P()))

    def update(inputs, x):
      v = ALPHA * self.v.value * (1 - self.s.value) + inputs.sum(0) + x
      self.v.value, self.s.value = v, spike(v - 1.0)
      self.acc.value = self.acc.value + v
      return self.s.value

    spec = P("x") if every == 1 else P(None, "x")
    step = self.net.step(update, in_specs=spec)

    def run(x):  # x [T, N] -> per call [every, N] when every > 1
      x = x if every == 1 else x.reshape(-1, every, N)
      if chunk is None:
        bs.for_loop(step, x)
      else:  # bs.remat over chunks of `chunk` calls: memory O(T / chunk)
        body = bs.remat(lambda xc: bs.for_loop(step, xc))
        bs.for_loop(body, x.reshape(-1, chunk, *x.shape[1:]))

    def loss(x):
      for st in (self.v, self.s, self.acc):
        st.value = jnp.zeros_like(st.value)
      self.net.reset()
      run(x)
      # A fixed order: replicate, then reduce (no psum of partial sums).
      acc = jax.sharding.reshard(self.acc.value, NamedSharding(mesh, P()))
      return jnp.dot(acc, rd) / T

    self.loss = loss
    self.grad = bs.jit(bs.value_and_grad(loss, grad_states=self.net.weight))

  def weight_grad(self, x, syn):
    """(loss, the weights' gradient in the synapse list's order)."""
    value, g = self.grad(jnp.asarray(x, self.net.weight.value.dtype))
    return value, np.asarray(g)[slots(syn, N, self.mesh.size)]


def dense_reference(syn, x, *, surrogate=bm.FastSigmoid(), spike=None,
                    dtype=jnp.float32):
  """(loss, d loss / d weight per listed synapse) in pure dense JAX."""
  dmax = int(syn["delay"].max())
  spike = spike or (lambda x: bm.spike(x, surrogate))
  rd = jnp.asarray(np.linspace(-1, 1, N), dtype)
  pre, post, d, r = (jnp.asarray(syn[k]) for k in
                     ("pre", "post", "delay", "receptor"))

  def loss(w):
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
        step, (z, z, z, jnp.zeros((dmax, N), dtype)), jnp.asarray(x, dtype))
    return jnp.dot(acc, rd) / T

  value, g = jax.jit(jax.value_and_grad(loss))(jnp.asarray(syn["weight"],
                                                           dtype))
  return value, np.asarray(g)


@pytest.fixture(scope="module")
def case():
  return synapses(), drive()


@pytest.fixture(scope="module")
def grads(case):
  """(loss, weight gradient) on 1 and 8 devices and the dense reference."""
  syn, x = case
  out = {s: Net(syn, s).weight_grad(x, syn) for s in (1, 8)}
  out["dense"] = dense_reference(syn, x)
  return out


def test_the_network_spikes_and_the_gradient_is_not_trivial(grads):
  _, g = grads["dense"]
  assert (g != 0).mean() > 0.5 and np.isfinite(g).all()


@pytest.mark.parametrize("shards", [1, 8])
def test_gradients_equal_the_dense_reference(grads, shards):
  (value, g), (ref_value, ref) = grads[shards], grads["dense"]
  np.testing.assert_allclose(value, ref_value, rtol=1e-5)
  np.testing.assert_allclose(g, ref, atol=2e-5 * np.abs(ref).max())


def test_gradients_are_the_same_bits_on_1_and_8_devices(grads):
  assert float(grads[1][0]) == float(grads[8][0])
  np.testing.assert_array_equal(grads[1][1], grads[8][1])
