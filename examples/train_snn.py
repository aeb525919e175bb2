"""Train a recurrent spiking (LIF) network with bs.grad and optax.

The task is made here: each of ``--classes`` classes is a fixed random
firing-rate profile over the input channels; a sample is a Poisson spike
train drawn from its class's profile. The network integrates the spikes in
recurrently connected leaky integrate-and-fire neurons (spikes get a
surrogate gradient through ``jax.custom_jvp``), a leaky readout sums its
output, and the time-averaged readout is the class score. Training is
backpropagation through time over a ``bs.for_loop``: ``bs.value_and_grad``
with ``grad_states=bs.ParamState`` returns ``{ParamState: gradient}``, which
optax updates like any dict of parameters.

    python -m examples.train_snn                  # one device
    python -m examples.train_snn --devices 8      # data parallel, 8 devices

With ``--devices N`` the batch is split over a mesh axis with ``bs.shard_map``;
the parameters are replicated, and the gradient of a replicated ParamState
comes back summed over the axis (JAX's ``check_vma`` semantics), so each
step uses exactly the single-device gradient (no explicit ``psum``). On a
CPU the example fakes the N devices itself. Needs optax (and tqdm for the
progress bar). See docs/training.md.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import brainshard as bs
from examples import _cli


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m examples.train_snn",
                              description=__doc__.splitlines()[0])
  _cli.add_devices(p, 1)
  p.add_argument("--epochs", type=int, default=8,
                 help="passes over the data set (default: %(default)s)")
  p.add_argument("--samples", type=int, default=256,
                 help="samples in the data set (default: %(default)s)")
  p.add_argument("--batch", type=int, default=64,
                 help="samples per training step, split over the devices "
                      "(default: %(default)s)")
  p.add_argument("--steps", type=int, default=40,
                 help="time steps per sample (default: %(default)s)")
  p.add_argument("--inputs", type=int, default=20,
                 help="input channels (default: %(default)s)")
  p.add_argument("--hidden", type=int, default=64,
                 help="recurrent LIF neurons (default: %(default)s)")
  p.add_argument("--classes", type=int, default=4,
                 help="classes to tell apart (default: %(default)s)")
  p.add_argument("--lr", type=float, default=1e-2,
                 help="Adam's learning rate (default: %(default)s)")
  p.add_argument("--seed", type=int, default=0,
                 help="seeds the data and the initial weights")
  return p.parse_args(argv)

ALPHA, KAPPA, THRESHOLD = 0.9, 0.8, 1.0


@jax.custom_jvp
def spike(v):
  """Heaviside step forward; a fast-sigmoid derivative backward."""
  return (v > 0).astype(v.dtype)


@spike.defjvp
def _spike_jvp(primals, tangents):
  (v,), (dv,) = primals, tangents
  return spike(v), dv / (1.0 + 10.0 * jnp.abs(v)) ** 2


def make_task(args):
  """Poisson spike trains ``(steps, samples, inputs)`` and their labels."""
  rng = np.random.default_rng(args.seed)
  # Close rate profiles (5-20 Hz-like): the classes overlap, so it takes a
  # few epochs to separate them.
  profiles = 0.05 + 0.15 * rng.random((args.classes, args.inputs))
  labels = rng.integers(0, args.classes, args.samples)
  rates = profiles[labels]                                 # (samples, inputs)
  spikes = rng.random((args.steps, args.samples, args.inputs)) < rates
  return jnp.asarray(spikes, jnp.float32), jnp.asarray(labels)


class RecurrentLIF:
  """LIF neurons with recurrent weights and a leaky linear readout."""

  def __init__(self, args, key):
    k1, k2, k3 = jax.random.split(key, 3)
    n_in, n, n_out, b = args.inputs, args.hidden, args.classes, args.batch
    self.w_in = bs.ParamState(
        jax.random.normal(k1, (n_in, n)) * 2.0 / n_in ** 0.5, name="w_in")
    self.w_rec = bs.ParamState(
        jax.random.normal(k2, (n, n)) * 0.5 / n ** 0.5, name="w_rec")
    self.w_out = bs.ParamState(
        jax.random.normal(k3, (n, n_out)) / n ** 0.5, name="w_out")
    self.v = bs.ShortTermState(jnp.zeros((b, n)), name="v")
    self.s = bs.ShortTermState(jnp.zeros((b, n)), name="s")
    self.y = bs.ShortTermState(jnp.zeros((b, n_out)), name="y")
    self.batch = b

  def step(self, x):
    v = ALPHA * self.v.value * (1.0 - self.s.value) + (
        x @ self.w_in.value + self.s.value @ self.w_rec.value)
    self.v.value = v
    self.s.value = spike(v - THRESHOLD)
    self.y.value = KAPPA * self.y.value + self.s.value @ self.w_out.value
    return self.y.value

  def loss(self, x, labels):
    """Cross-entropy summed over this (shard of the) batch / the full batch,
    so summing it over shards gives the mean over the whole batch."""
    for st in (self.v, self.s, self.y):
      st.value = jnp.zeros_like(st.value)
    logits = bs.for_loop(self.step, x).mean(0)
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, labels[:, None], axis=1).sum()
    correct = (logits.argmax(1) == labels).sum()
    return nll / self.batch, correct


def grad_fn(net: RecurrentLIF, devices: int):
  """``(x, labels) -> ((loss, correct), {ParamState: grad})`` on ``devices``."""
  value_and_grad = bs.value_and_grad(net.loss, grad_states=bs.ParamState,
                                     has_aux=True)
  if devices == 1:
    return value_and_grad
  mesh = jax.make_mesh((devices,), ("x",))

  def per_shard(x, labels):
    (loss, correct), grads = value_and_grad(x, labels)
    # The loss is per shard; the gradients of the replicated ParamStates are
    # already summed over 'x' (check_vma=True): no psum for them.
    return (jax.lax.psum(loss, "x"), jax.lax.psum(correct, "x")), grads

  return bs.shard_map(per_shard, mesh=mesh, in_specs=(P(None, "x"), P("x")),
                      out_specs=((P(), P()), P()),
                      state_in_specs={bs.ShortTermState: P("x")})


def train(args, log=print):
  """Trains and returns the mean loss per epoch."""
  optax = _cli.require("optax", "optax>=0.2", "python -m examples.train_snn")
  x_all, y_all = make_task(args)
  net = RecurrentLIF(args, jax.random.PRNGKey(args.seed))
  opt = optax.adam(args.lr)
  params = [net.w_in, net.w_rec, net.w_out]
  # In a State, 'auto' donation updates the optimizer state in place too.
  opt_state = bs.State(opt.init({p: p.value for p in params}), name="adam")
  grads_of = grad_fn(net, args.devices)

  @bs.jit
  def train_step(x, labels):
    (loss, correct), grads = grads_of(x, labels)
    updates, opt_state.value = opt.update(grads, opt_state.value)
    for p, u in updates.items():
      p.value = p.value + u
    return loss, correct

  n_batches = args.samples // args.batch
  epochs = _progress(range(args.epochs))
  history = []
  for epoch in epochs:
    perm = np.random.default_rng(args.seed + epoch).permutation(args.samples)
    losses, correct = [], 0
    for i in range(n_batches):
      idx = perm[i * args.batch:(i + 1) * args.batch]
      loss, c = train_step(x_all[:, idx], y_all[idx])
      losses.append(loss)
      correct += int(c)
    history.append(float(np.mean(losses)))
    acc = correct / (n_batches * args.batch)
    message = f"epoch {epoch + 1:3d}  loss {history[-1]:.4f}  accuracy {acc:.2f}"
    if hasattr(epochs, "write"):  # print above the bar
      epochs.write(message)
    else:
      log(message)
  return history


def _progress(it):
  try:
    from tqdm.auto import tqdm
  except ImportError:  # the progress bar is optional
    return it
  return tqdm(it, desc="training", unit="epoch")


def main(argv=None):
  args = parse_args(argv)
  if args.batch % args.devices:
    raise SystemExit(f"--batch {args.batch} must divide over --devices "
                     f"{args.devices}")
  _cli.use_devices(args.devices, "python -m examples.train_snn")
  t0 = time.perf_counter()
  history = train(args)
  print(f"{args.epochs} epochs on {args.devices} device(s) in "
        f"{time.perf_counter() - t0:.1f} s; loss {history[0]:.4f} -> "
        f"{history[-1]:.4f}")
  return history


if __name__ == "__main__":
  main()
