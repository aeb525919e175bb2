"""Training steps with ``bs.value_and_grad`` against hand-written pure JAX.

Workloads (each a ratio to pure JAX timed interleaved in this process):

- ``train-N``: one optimisation step of an N-layer tanh network whose N
  weights are ``ParamState`` s: ``bs.jit`` of ``bs.value_and_grad(loss,
  grad_states=bs.ParamState)`` plus an optax Adam update written back into
  the States, against ``jax.jit`` of ``jax.value_and_grad`` + the same
  update with the weights as arguments (goal <= 1.10 at N = 10 and 100).
  The optimizer state lives in a State, so 'auto' donates it with the
  weights; rows beside show pure JAX donating the same buffers, and
  brainshard with the optimizer state passed as an argument (then only the
  weights are donated, which on XLA:CPU costs time in pure JAX as well:
  XLA copies weights the backward pass still reads).
- ``bptt``: ``bs.jit(bs.value_and_grad(loss))`` where ``loss`` runs a
  recurrent LIF network for 1000 steps in ``bs.for_loop`` with a surrogate
  spike gradient, against ``jax.jit(jax.value_and_grad)`` of ``lax.scan``
  (goal <= 1.05).

brainstate 0.5.x (``brainstate.transform.grad`` + ``jit`` / ``for_loop``)
runs the same workloads beside, when installed.

Usage:  python -m benchmarks autodiff [--repeats 15] [--json FILE]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import brainshard as bs
from benchmarks._harness import Case, compare, parser, write_json
from benchmarks._peers import Unavailable, _import

WIDTH, BATCH, LR = 32, 16, 1e-3


def _weights(n: int):
  keys = jax.random.split(jax.random.PRNGKey(0), n)
  return [jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH ** 0.5 for k in keys]


def _forward(ws, x):
  for w in ws:
    x = jnp.tanh(x @ w)
  return jnp.mean(x ** 2)


def _check(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-5,
                                                       atol=1e-6), a, b)


# -- train-N ----------------------------------------------------------------


def train_pure(n: int, x, donate: tuple = ()):
  """``donate``: which of (weights, optimizer state) the jit donates."""
  opt = optax.adam(LR)

  def step(ws, opt_state, x):
    loss, grads = jax.value_and_grad(_forward)(ws, x)
    updates, opt_state = opt.update(grads, opt_state)
    return optax.apply_updates(ws, updates), opt_state, loss

  step = jax.jit(step, donate_argnums=donate)

  box = [_weights(n), None, None]
  box[1] = opt.init(box[0])

  def run():
    box[0], box[1], box[2] = step(box[0], box[1], x)
  return Case(run, lambda: box[2]), lambda: box[0]


def train_bs(n: int, x, donate_states="auto", opt_in_state=True):
  """The optimizer state in a State (as brainshard recommends: 'auto' then
  donates it with the weights) or passed as an argument and returned."""
  opt = optax.adam(LR)
  params = [bs.ParamState(w) for w in _weights(n)]
  loss = lambda x: _forward([p.value for p in params], x)  # noqa: E731
  value_and_grad = bs.value_and_grad(loss, grad_states=bs.ParamState)
  opt_state = bs.State(opt.init({p: p.value for p in params}))

  def update(state, x):
    loss, grads = value_and_grad(x)
    updates, state = opt.update(grads, state)
    for p, u in updates.items():
      p.value = p.value + u
    return state, loss

  @bs.jit(donate_states=donate_states)
  def step_in_state(x):
    opt_state.value, loss = update(opt_state.value, x)
    return loss

  step_with_arg = bs.jit(update, donate_states=donate_states)
  box = [opt_state.value, None]

  def run():
    if opt_in_state:
      box[1] = step_in_state(x)
    else:
      box[0], box[1] = step_with_arg(box[0], x)
  return Case(run, lambda: box[1]), lambda: [p.value for p in params]


def train_bst(n: int, x):
  bst = _import("brainstate")
  opt = optax.adam(LR)
  params = [bst.ParamState(w) for w in _weights(n)]
  loss = lambda x: _forward([p.value for p in params], x)  # noqa: E731
  grad = bst.transform.grad(loss, grad_states=params, return_value=True)

  @bst.transform.jit
  def step(opt_state, x):
    grads, loss = grad(x)
    updates, opt_state = opt.update(grads, opt_state)
    for p, u in zip(params, updates):
      p.value = p.value + u
    return opt_state, loss

  box = [opt.init([p.value for p in params]), None]

  def run():
    box[0], box[1] = step(box[0], x)
  return Case(run, lambda: box[1]), lambda: [p.value for p in params]


# -- bptt -------------------------------------------------------------------


@jax.custom_jvp
def spike(v):
  return (v > 0).astype(v.dtype)


@spike.defjvp
def _spike_jvp(primals, tangents):
  (v,), (dv,) = primals, tangents
  return spike(v), dv / (1.0 + 10.0 * jnp.abs(v)) ** 2


def _lif(w_in, w_rec, v, s, x):
  v = 0.9 * v * (1.0 - s) + x @ w_in + s @ w_rec
  return v, spike(v - 1.0)


def _bptt_data(n: int, steps: int):
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(1), 3)
  n_in = 32
  w_in = jax.random.normal(k1, (n_in, n)) * 2.0 / n_in ** 0.5
  w_rec = jax.random.normal(k2, (n, n)) * 0.5 / n ** 0.5
  xs = (jax.random.uniform(k3, (steps, BATCH, n_in)) < 0.1).astype(jnp.float32)
  return w_in, w_rec, xs


def bptt_pure(n, steps):
  w_in, w_rec, xs = _bptt_data(n, steps)

  def loss(w_in, w_rec, xs):
    def body(c, x):
      v, s = _lif(w_in, w_rec, *c, x)
      return (v, s), s
    zeros = jnp.zeros((BATCH, n))
    _, ss = jax.lax.scan(body, (zeros, zeros), xs)
    return jnp.mean((ss.mean(0) - 0.1) ** 2)

  f = jax.jit(jax.value_and_grad(loss, (0, 1)))
  _LOWER["pure"] = lambda: f.lower(w_in, w_rec, xs)
  return _case(lambda: f(w_in, w_rec, xs)), lambda: f(w_in, w_rec, xs)


_LOWER = {}  # implementation -> () -> jax Lowered, for the HLO comparison


def _case(call):
  """A Case that blocks on the last result (the calls are asynchronous)."""
  box = [None]

  def run():
    box[0] = call()
  return Case(run, lambda: box[0])


def _stateful_bptt(lib, n, steps, loop, make_grad):
  w_in0, w_rec0, xs = _bptt_data(n, steps)
  w_in, w_rec = lib.ParamState(w_in0), lib.ParamState(w_rec0)
  v, s = (lib.ShortTermState(jnp.zeros((BATCH, n))) for _ in range(2))

  def step(x):
    v.value, s.value = _lif(w_in.value, w_rec.value, v.value, s.value, x)
    return s.value

  def loss(xs):
    v.value, s.value = jnp.zeros((BATCH, n)), jnp.zeros((BATCH, n))
    return jnp.mean((loop(step, xs).mean(0) - 0.1) ** 2)

  f = make_grad(loss, [w_in, w_rec])
  return _case(lambda: f(xs)), lambda: f(xs)


def bptt_bs(n, steps):
  def make_grad(loss, ws):
    f = bs.jit(bs.value_and_grad(loss, grad_states=ws))
    _LOWER["brainshard"] = lambda: f.lower(xs)
    return f
  xs = _bptt_data(n, steps)[2]
  return _stateful_bptt(bs, n, steps, bs.for_loop, make_grad)


def hlo_instructions(lowered) -> int:
  """Instructions in the optimised program (a different program shows up
  here directly, without timing noise)."""
  text = lowered.compile().as_text()
  return sum(" = " in l and "ENTRY" not in l for l in text.splitlines())


def bptt_bst(n, steps):
  bst = _import("brainstate")

  def make_grad(loss, ws):
    g = bst.transform.grad(loss, grad_states=ws, return_value=True)
    return bst.transform.jit(lambda xs: g(xs)[::-1])
  return _stateful_bptt(bst, n, steps, bst.transform.for_loop, make_grad)


# -- driver -----------------------------------------------------------------


def run_train(n: int, repeats: int) -> dict:
  x = jax.random.normal(jax.random.PRNGKey(2), (BATCH, WIDTH))
  cases, weights = {}, {}
  builders = {
      "pure": train_pure,
      "pure, donating all": lambda n, x: train_pure(n, x, (0, 1)),
      "pure, donating weights": lambda n, x: train_pure(n, x, (0,)),
      "brainshard": train_bs,
      "bs, opt state as arg": lambda n, x: train_bs(n, x, opt_in_state=False),
      "bs, donate_states=False": lambda n, x: train_bs(n, x, False),
      "brainstate": train_bst}
  for name, build in builders.items():
    try:
      cases[name], weights[name] = build(n, x)
    except Unavailable as e:
      print(f"  ({name}: {e})")
      continue
    cases[name].run()  # one step each: then the same weights
  ref = weights.pop("pure")()
  for get in weights.values():
    _check(get(), ref)
  return _report(f"train-{n}", compare(cases, "pure", repeats=repeats))


def run_bptt(n: int, steps: int, repeats: int) -> dict:
  cases, results = {}, {}
  for name, build in (("pure", bptt_pure), ("brainshard", bptt_bs),
                      ("brainstate", bptt_bst)):
    try:
      cases[name], full = build(n, steps)
    except Unavailable as e:
      print(f"  ({name}: {e})")
      continue
    results[name] = full()
  for name, (value, grads) in results.items():  # lists vs tuples
    _check((value, list(grads)), (results["pure"][0], list(results["pure"][1])))
  out = _report(f"bptt-{steps}", compare(cases, "pure", repeats=repeats))
  hlo = {k: hlo_instructions(lower()) for k, lower in _LOWER.items()}
  print(f"  optimised HLO instructions: {hlo} (brainshard also returns the "
        "final neuron States)")
  for k, count in hlo.items():
    out[k]["hlo_instructions"] = count
  return out


def _report(name: str, timings: dict) -> dict:
  print(f"{name}:")
  for impl, t in timings.items():
    print(f"  {impl:24s} {t.per_call_s * 1e3:9.3f} ms/call   ratio "
          f"{t.ratio:5.3f} [{t.ratio_lo:.3f}, {t.ratio_hi:.3f}]  "
          f"best-time ratio {t.ratio_best:5.3f}")
  return {impl: dict(per_call_s=t.per_call_s, ratio=t.ratio,
                     ratio_lo=t.ratio_lo, ratio_hi=t.ratio_hi,
                     ratio_best=t.ratio_best) for impl, t in timings.items()}


def main(argv=None) -> dict:
  ap = parser(__doc__, repeats=15, json=True)
  ap.add_argument("--states", default="10,100")
  ap.add_argument("--neurons", type=int, default=256)
  ap.add_argument("--steps", type=int, default=1000)
  args = ap.parse_args(argv)
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}; ratio = time "
        "/ pure JAX (median over interleaved repeats [quartiles])")
  out = {}
  for n in map(int, args.states.split(",")):
    out[f"train-{n}"] = run_train(n, args.repeats)
  out[f"bptt-{args.steps}"] = run_bptt(args.neurons, args.steps, args.repeats)
  write_json(args.json, out)
  return out
