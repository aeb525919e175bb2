"""Train a sparse recurrent spiking network by gradient through delivery.

A network built with ``bm.connect`` (per-synapse delays of 1-5 ms): 64
input neurons fire Poisson spike trains from an 8x8 image (scikit-learn's
digits; ``--task patterns`` makes up a task instead), ``--hidden`` leaky
integrate-and-fire neurons (80 % excitatory, 20 % inhibitory, sparse
recurrent synapses) with a surrogate spike (``bm.spike``, SuperSpike's
fast sigmoid), and 10 leaky readout neurons whose mean voltage is the class
score. Every synapse's weight is trained, with optax's Adam on the gradient
``bs.value_and_grad`` takes through the ring buffers and delays
(``bm.TrainableDelivery``), a batch of samples at a time.

    python -m examples.learn_sparse                  # one device
    python -m examples.learn_sparse --devices 8      # the same losses
    python -m examples.learn_sparse --quick          # a small network, CI

On 1, 2, 4 or 8 devices the losses are the same bits: delivery sums in
global presynaptic order, the gradient's sums over synapses run over fixed
blocks of targets, and the loss is reduced after the readout is replicated.
Needs optax, and scikit-learn for the digits (pip install ".[examples]").
See docs/training.md.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard import models as bm
from examples import _cli

PROG = "python -m examples.learn_sparse"
ALPHA, KAPPA = 0.9, 0.9       # membrane decay per step: hidden, readout
N_IN, N_OUT = 64, 10


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
  _cli.add_devices(p, 1)
  p.add_argument("--task", choices=("digits", "patterns"), default="digits",
                 help="scikit-learn's 8x8 digits, or made-up rate patterns "
                      "(no scikit-learn needed) (default: %(default)s)")
  p.add_argument("--hidden", type=int, default=10000,
                 help="recurrent LIF neurons (default: %(default)s)")
  p.add_argument("--steps", type=int, default=20,
                 help="time steps (1 ms) per sample (default: %(default)s)")
  p.add_argument("--batch", type=int, default=32,
                 help="samples per training step (default: %(default)s)")
  p.add_argument("--train-steps", type=int, default=150,
                 help="optimizer steps (default: %(default)s)")
  p.add_argument("--lr", type=float, default=2e-3,
                 help="Adam's learning rate (default: %(default)s)")
  p.add_argument("--log", type=int, default=10,
                 help="print the loss every this many steps (default: "
                      "%(default)s)")
  p.add_argument("--chunk", type=int, default=0, metavar="K",
                 help="bs.remat every K time steps: the backward pass keeps "
                      "steps/K copies of the network's state and recomputes "
                      "one chunk at a time (default: 0, no remat)")
  p.add_argument("--seed", type=int, default=0,
                 help="seeds the synapses, the data split and the spikes")
  p.add_argument("--quick", action="store_true",
                 help="a CI-sized run: 512 hidden neurons, 10 steps a "
                      "sample, batch 8, 4 optimizer steps")
  p.add_argument("--measure", action="store_true",
                 help="time one forward run and one gradient step, and "
                      "print the compiled programs' memory")
  if p.parse_known_args(argv)[0].quick:  # new defaults; options still win
    p.set_defaults(hidden=512, steps=10, batch=8, train_steps=4, log=1)
  return p.parse_args(argv)


# -- the task ------------------------------------------------------------------

def load_task(args):
  """Rates in [0, 1] ``[samples, 64]`` and labels, split 80/20."""
  rng = np.random.default_rng(args.seed)
  if args.task == "digits":
    datasets = _cli.require("sklearn.datasets", "scikit-learn>=1.3", PROG)
    data = datasets.load_digits()
    rates, labels = data.data / 16.0, data.target
  else:  # 10 classes of random rate profiles, each sample a noisy copy
    profiles = rng.random((N_OUT, N_IN)) ** 2
    labels = rng.integers(0, N_OUT, 1000)
    rates = np.clip(profiles[labels] + 0.2 * rng.normal(
        size=(labels.size, N_IN)), 0, 1)
  order = rng.permutation(labels.size)
  cut = labels.size * 4 // 5
  return ((rates[order[:cut]], labels[order[:cut]]),
          (rates[order[cut:]], labels[order[cut:]]))


def poisson(rates, steps, rng, peak=0.3):
  """Spike trains ``[steps, batch, 64]``: at most ``peak`` spikes a step."""
  return (rng.random((steps, *rates.shape)) < peak * rates).astype(np.float32)


# -- the network ---------------------------------------------------------------

def layout(hidden: int, shards: int):
  n_exc = hidden * 4 // 5
  sizes = {"in": N_IN, "E": n_exc, "I": hidden - n_exc, "out": N_OUT}
  # Pad to a multiple of 64 on every mesh: the gradient's fixed blocks (8)
  # and up to 64 devices then cut the same neuron axis.
  sizes["pad"] = -sum(sizes.values()) % 64
  return bm.Layout(sizes, n_shards=shards)


def projections(lay):
  d = bm.Uniform(1.0, 5.0)  # ms, dt = 1 ms: 1-5 steps per synapse
  hid = (lay.range("E")[0], lay.range("I")[1])   # E and I: one id range
  return [
      bm.Projection("in", hid, bm.FixedInDegree(16), bm.Normal(0.25, 0.1), d),
      bm.Projection("E", hid, bm.FixedInDegree(20), bm.Normal(0.05, 0.02), d),
      bm.Projection("I", hid, bm.FixedInDegree(5), bm.Normal(-0.2, 0.05), d),
      bm.Projection("E", "out", bm.FixedInDegree(200), bm.Normal(0.0, 0.1), d),
  ]


class Network:
  """The spiking network on ``mesh``; ``loss(x, labels)`` runs a batch."""

  def __init__(self, args, mesh):
    self.lay = lay = layout(args.hidden, mesh.size)
    idx = bm.connect(projections(lay), lay, dt=1.0, seed=args.seed, mesh=mesh)
    self.synapses = int(idx.count.sum())
    self.net = bm.TrainableDelivery(idx, mesh, batch=args.batch, every=1)
    spec = P(None, "x")
    zeros = jax.device_put(jnp.zeros((args.batch, lay.n_padded)),
                           NamedSharding(mesh, spec))
    self.v, self.s, self.acc = (bs.ShortTermState(zeros, spec=spec)
                                for _ in range(3))
    self.count = bs.ShortTermState(zeros.astype(jnp.int32), spec=spec)
    self.mesh, self.steps, self.n_local = mesh, args.steps, lay.n_local
    self.hidden, self.chunk = args.hidden, args.chunk
    if self.chunk and args.steps % self.chunk:
      raise SystemExit(f"{PROG}: --chunk {self.chunk} must divide --steps "
                       f"{args.steps}")
    self.step = self.net.step(self.update, in_specs=P())

  def update(self, inputs, x):
    """One step of this shard's neurons: ``inputs [B, 1, n_local]``, ``x
    [B, 64]`` the input neurons' spikes."""
    lay = self.lay
    gid = jax.lax.axis_index("x") * self.n_local + jnp.arange(self.n_local)
    is_ = lambda name: (gid >= lay.range(name)[0]) & (  # noqa: E731
        gid < lay.range(name)[1])
    hidden, out = is_("E") | is_("I"), is_("out")
    i = inputs[:, 0]
    v = jnp.where(out, KAPPA * self.v.value,
                  ALPHA * self.v.value * (1 - self.s.value)) + i
    x_here = jnp.take(x, jnp.clip(gid - lay.range("in")[0], 0, N_IN - 1), 1)
    s = jnp.where(is_("in"), x_here,
                  jnp.where(hidden, bm.spike(v - 1.0), 0.0))
    self.v.value, self.s.value = v, s
    self.acc.value = self.acc.value + jnp.where(out, v, 0.0)
    self.count.value = self.count.value + (hidden & (s > 0))  # int: exact
    return s

  def loss(self, x, labels):
    """Mean cross-entropy of the batch, and (correct answers, the hidden
    neurons' spikes per neuron and step)."""
    for st in (self.v, self.s, self.acc, self.count):
      st.value = jnp.zeros_like(st.value)
    self.net.reset()
    if self.chunk:  # memory: steps / chunk States + one chunk's residuals
      body = bs.remat(lambda xc: bs.for_loop(self.step, xc))
      bs.for_loop(body, x.reshape(-1, self.chunk, *x.shape[1:]))
    else:
      bs.for_loop(self.step, x)
    # Replicate the readout, then reduce: the same bits on any mesh.
    acc = jax.sharding.reshard(self.acc.value, NamedSharding(self.mesh, P()))
    lo, hi = self.lay.range("out")
    logits = acc[:, lo:hi] / self.steps
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, labels[:, None], 1).mean()
    rate = self.count.value.sum() / (x.shape[0] * x.shape[1] * self.hidden)
    return nll, ((logits.argmax(1) == labels).sum(), rate)


# -- training ------------------------------------------------------------------

def train(args, log=print):
  """Trains; returns the losses, one per optimizer step."""
  optax = _cli.require("optax", "optax>=0.2", PROG)
  (xs, ys), (xt, yt) = load_task(args)
  mesh = jax.make_mesh((args.devices,), ("x",))
  t0 = time.perf_counter()
  net = Network(args, mesh)
  log(f"{net.lay.n_padded} neurons, {net.synapses} synapses on "
      f"{args.devices} device(s), built in {time.perf_counter() - t0:.1f} s")
  weight = net.net.weight
  opt = optax.adam(args.lr)  # elementwise: no sum across synapses
  opt_state = bs.State(opt.init(weight.value), name="adam")
  grad = bs.value_and_grad(net.loss, grad_states=weight, has_aux=True)

  @bs.jit
  def train_step(x, labels):
    (loss, aux), g = grad(x, labels)
    updates, opt_state.value = opt.update(g, opt_state.value)
    weight.value = weight.value + updates
    return loss, aux

  rng = np.random.default_rng(args.seed + 1)
  losses = []
  for i in range(args.train_steps):
    pick = rng.choice(ys.size, args.batch, replace=False)
    x = poisson(xs[pick], args.steps, rng)
    loss, (correct, rate) = train_step(jnp.asarray(x), jnp.asarray(ys[pick]))
    losses.append(float(loss))
    if (i + 1) % args.log == 0 or i == 0:
      log(f"step {i + 1:4d}  loss {losses[-1]:.4f}  batch accuracy "
          f"{int(correct) / args.batch:.2f}  hidden spikes/step "
          f"{float(rate):.3f}")
  if args.measure:
    measure(net, train_step, x, ys[pick], log)
  log(f"test accuracy {evaluate(net, xt, yt, args, rng):.3f}")
  return losses


def evaluate(net, xt, yt, args, rng):
  run = bs.jit(net.loss)
  n = yt.size // args.batch * args.batch
  correct = 0
  for k in range(0, n, args.batch):
    x = poisson(xt[k:k + args.batch], args.steps, rng)
    correct += int(run(jnp.asarray(x), jnp.asarray(yt[k:k + args.batch]))[1][0])
  return correct / max(n, 1)


def measure(net, train_step, x, labels, log, repeat=5):
  """Times a forward run and a gradient step of the same batch; the
  compiled programs' temporary memory."""
  forward = bs.jit(net.loss)
  grad = bs.jit(bs.value_and_grad(net.loss, grad_states=net.net.weight,
                                  has_aux=True))
  x, labels = jnp.asarray(x), jnp.asarray(labels)
  times = {}
  for name, f in (("forward", forward), ("gradient", grad)):
    jax.block_until_ready(f(x, labels))
    best = []
    for _ in range(repeat):
      t = time.perf_counter()
      jax.block_until_ready(f(x, labels))
      best.append(time.perf_counter() - t)
    times[name] = min(best)
    mem = f.lower(x, labels).compile().memory_analysis()
    log(f"{name}: {times[name] * 1e3:.1f} ms, temporaries "
        f"{mem.temp_size_in_bytes / 2**20:.1f} MiB")
  log(f"gradient / forward: {times['gradient'] / times['forward']:.2f}x")


def main(argv=None):
  args = parse_args(argv)
  _cli.use_devices(args.devices, PROG)
  t0 = time.perf_counter()
  losses = train(args)
  print(f"{args.train_steps} steps on {args.devices} device(s) in "
        f"{time.perf_counter() - t0:.1f} s; loss {losses[0]:.4f} -> "
        f"{losses[-1]:.4f}")
  return losses


if __name__ == "__main__":
  main()
