"""The E/I network for the scale benchmarks: the brainshard example
(examples.cuba), a hand-written pure-JAX program and a brainstate
program with the same connectivity representation and algorithm (the same
kernels), plus the spike statistics every implementation is compared on.

Example:
  >>> import numpy as np
  >>> spikes = np.zeros((100, 3), bool); spikes[::10, 0] = True
  >>> stats(spikes, 0.1)['active']
  0.3333333333333333
"""

from __future__ import annotations

import numpy as np

from benchmarks._harness import clock


def stats(spikes: np.ndarray, dt_ms: float) -> dict:
  """Mean rate (Hz), mean ISI CV over neurons with >= 3 spikes, and the
  fraction of neurons that fired, of a ``[steps, n]`` raster."""
  spikes = np.asarray(spikes)
  steps, n = spikes.shape
  rate = spikes.sum() / (n * steps * dt_ms * 1e-3)
  t, i = np.nonzero(spikes)
  return dict(rate_hz=float(rate), isi_cv=isi_cv(i, t * dt_ms, n),
              active=float((spikes.sum(0) > 0).mean()))


def isi_cv(neuron: np.ndarray, t_ms: np.ndarray, n: int) -> float:
  order = np.lexsort((t_ms, neuron))
  neuron, t_ms = neuron[order], t_ms[order]
  cvs = []
  bounds = np.searchsorted(neuron, np.arange(n + 1))
  for a, b in zip(bounds[:-1], bounds[1:]):
    if b - a >= 3:
      isi = np.diff(t_ms[a:b])
      cvs.append(isi.std() / isi.mean())
  return float(np.mean(cvs)) if cvs else float("nan")


def brainshard_run(model: str, n: int, k: int = 80, devices: int = 1,
                   connectivity: str = "stored", delay: int = 1,
                   exchange: str = "step", seed: int = 0):
  """Builds the example network; returns ``(build_s, run(ms) -> spikes)``."""
  import jax
  from examples import cuba
  mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices])
  with clock() as build:
    net = cuba.EINetwork(mesh, model, seed=seed, n=n, k=k, delay=delay,
                         connectivity=connectivity, exchange=exchange)
    jax.block_until_ready(net.v.value)
  return build.s, net.run


def _kernels(model: str, n: int, k: int, connectivity: str, seed: int):
  """The example's parameters, its delivery ``count(fired) -> (exc, inh)``
  input counts with the library kernels the example runs (on one device),
  and its initial ``(v, ge, gi)`` (the example's initial conditions)."""
  import jax
  import jax.numpy as jnp
  from examples import cuba
  from brainshard import models as bm
  p = cuba.Params(model=model, n=n, k=k)
  if connectivity == "stored":
    pre = jax.jit(lambda: bm.hashed_presynaptic(
        jnp.arange(n), k, n=n, n_exc=p.n_exc, k=k, seed=seed))()
    indptr, indices = jax.jit(bm.csr_from_table, static_argnums=1)(pre, n)
    del pre
    max_degree = int(jnp.diff(indptr).max())
    count = lambda f: bm.deliver_counts(  # noqa: E731
        f, indptr, indices, n_local=n, n_exc=p.n_exc, max_degree=max_degree)
  else:
    rows = jnp.arange(n)
    count = lambda f: bm.pull_counts(  # noqa: E731
        f, rows, n=n, n_exc=p.n_exc, k=k, seed=seed)
  import brainshard as bs  # only for the same initial conditions
  rng = bs.RandomState(seed)
  if model == "cuba":
    v0 = jnp.asarray(rng.uniform(p.v_reset, p.v_th, size=n), jnp.float32)
    ge0, gi0 = jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.float32)
  else:
    v0 = jnp.asarray(rng.normal(-55.0, 5.0, size=n), jnp.float32)
    ge0 = jnp.asarray(rng.normal(4.0, 1.5, size=n), jnp.float32)
    gi0 = jnp.asarray(rng.normal(20.0, 12.0, size=n), jnp.float32)
  return p, count, (v0, ge0, gi0)


def _network(model: str, n: int, k: int, connectivity: str, seed: int):
  """The example's parameters, its one-step transition of the carry
  ``(v, ge, gi, ref, inputs)`` as a pure function ``one(carry) -> (carry,
  spikes)`` with the library kernels the example runs, and the initial
  carry (the example's initial conditions)."""
  import jax.numpy as jnp
  from examples import cuba
  p, count, (v0, ge0, gi0) = _kernels(model, n, k, connectivity, seed)
  carry = (v0, ge0, gi0, jnp.zeros(n, jnp.int32), jnp.zeros((2, n), jnp.int32))

  def one(c):
    v, ge, gi, ref, inp = c
    v, ge, gi, ref, spikes = cuba.neuron_update(p, v, ge, gi, ref, inp[0],
                                                inp[1])
    return (v, ge, gi, ref, jnp.stack(count(spikes))), spikes

  return p, one, carry


def _chunked(dt: float, chunk: int, make):
  """``run(ms) -> spikes``: ``ms`` in chunks of at most ``chunk`` steps;
  ``make(length)`` compiles a chunk of that many steps once, as a callable
  that runs it and returns its spikes."""
  chunks = {}

  def run(ms):
    steps = int(round(ms / dt))
    lengths = [chunk] * (steps // chunk) + [steps % chunk] * bool(steps % chunk)
    out = []
    for length in lengths:
      if length not in chunks:
        chunks[length] = make(length)
      out.append(chunks[length]())
    return np.concatenate([np.asarray(s) for s in out])

  return run


def pure_run(model: str, n: int, k: int = 80, connectivity: str = "stored",
             seed: int = 0, chunk: int = 1000):
  """The same network as one ``jax.jit(lax.scan)`` per chunk of steps on
  one device, with the library kernels the example runs; returns
  ``(build_s, run(ms) -> spikes)``."""
  import jax
  with clock() as build:
    p, one, init = _network(model, n, k, connectivity, seed)
    jax.block_until_ready(init)
  carry = [init]

  def make(length):
    scan = jax.jit(lambda c: jax.lax.scan(lambda c, _: one(c), c, None,
                                          length=length), donate_argnums=0)

    def run_chunk():
      carry[0], spikes = scan(carry[0])
      return spikes

    return run_chunk

  return build.s, _chunked(p.dt, chunk, make)


def pure_block_run(model: str, n: int, k: int = 80, delay: int = 2,
                   seed: int = 0, chunk_steps: int = 1000):
  """The pure-JAX twin of ``cuba.EINetwork(exchange='delay')`` on one
  device (what ``bench_nest`` times): one call advances ``delay`` steps
  with the spikes of the previous block as its input (the example's
  ``step.one_block``), ``chunk_steps // delay`` calls per ``jax.jit`` of a
  ``lax.scan``, no donation (``bs.ChunkedLoop`` donates nothing by
  default), the next chunk dispatched before the last one's spikes are
  copied to the host (as ``ChunkedLoop.iterate`` does). Returns
  ``(build_s, run(ms, raster=True))``: ``run`` gives the spikes ``[steps,
  n]``, or with ``raster=False`` only their number.

  >>> _, run = pure_block_run('cuba', 400, delay=2, chunk_steps=10)
  >>> run(2.6).shape  # 13 calls of 2 steps: chunks of 5, 5 and 3 calls
  (26, 400)
  """
  import jax
  import jax.numpy as jnp
  from examples import cuba
  with clock() as build:
    p, count, (v0, ge0, gi0) = _kernels(model, n, k, "stored", seed)
    p = cuba.Params(model=model, n=n, k=k, delay=delay)
    state = [(v0, ge0, gi0, jnp.zeros(n, jnp.int32),
              jnp.zeros((delay, n), bool))]
    jax.block_until_ready(state[0])

  def block(c, _):
    v, ge, gi, ref, pending = c
    inputs = jax.lax.map(lambda f: jnp.stack(count(f)), pending)

    def one(carry, counts):
      v, ge, gi, ref, spikes = cuba.neuron_update(p, *carry, counts[0],
                                                  counts[1])
      return (v, ge, gi, ref), spikes

    carry, spikes = jax.lax.scan(one, (v, ge, gi, ref), inputs)
    return (*carry, spikes), spikes

  programs = {}

  def chunk(calls):
    if calls not in programs:
      programs[calls] = jax.jit(lambda c: jax.lax.scan(block, c, None,
                                                       length=calls))
    state[0], spikes = programs[calls](state[0])
    return spikes

  def run(ms: float, raster: bool = True):
    steps = int(round(ms / p.dt))
    if steps % delay:
      raise ValueError(f"{ms} ms is not a multiple of the delay")
    per = max(1, chunk_steps // delay)
    calls = [per] * (steps // delay // per) + (
        [steps // delay % per] if steps // delay % per else [])
    out, previous = [], None
    for length in calls:
      spikes = chunk(length)
      if previous is not None:
        out.append(np.asarray(previous))
      previous = spikes
    if previous is not None:
      out.append(np.asarray(previous))
    if not raster:
      return int(sum(int(o.sum()) for o in out))
    if not out:
      return np.zeros((0, n), bool)
    return np.concatenate(out).reshape(steps, n)

  return build.s, run


def brainstate_run(model: str, n: int, k: int = 80,
                   connectivity: str = "stored", seed: int = 0,
                   chunk: int = 1000):
  """The same network written the brainstate way: its five variables are
  ``brainstate.ShortTermState``s, one step reads and writes them, and each
  chunk of steps is ``brainstate.transform.jit(brainstate.transform.for_loop)``
  (one device); returns ``(build_s, run(ms) -> spikes)``."""
  import brainstate
  import jax
  import jax.numpy as jnp
  with clock() as build:
    p, one, init = _network(model, n, k, connectivity, seed)
    states = [brainstate.ShortTermState(x) for x in init]
    jax.block_until_ready([s.value for s in states])

  def step(_):
    new, spikes = one(tuple(s.value for s in states))
    for s, x in zip(states, new):
      s.value = x
    return spikes

  def make(length):
    loop = brainstate.transform.jit(
        lambda xs: brainstate.transform.for_loop(step, xs))
    xs = jnp.arange(length)
    return lambda: loop(xs)

  return build.s, _chunked(p.dt, chunk, make)


def time_run(run, duration_ms: float, warm_ms: float | None = None,
             repeats: int = 3) -> dict:
  """Compiles and warms up (``warm_ms``, default ``duration_ms``: the same
  programs as the timed runs), then times ``duration_ms`` ``repeats`` times
  (each continuing the simulation) and keeps the fastest: one timed run on a
  shared 2-core machine varies by tens of percent. ``spikes`` are the first
  timed run's."""
  warm_ms = duration_ms if warm_ms is None else warm_ms
  run(warm_ms)
  best, spikes = float("inf"), None
  for _ in range(repeats):
    with clock() as t:
      out = run(duration_ms)
    best = min(best, t.s)
    spikes = out if spikes is None else spikes
  return dict(s_per_sim_s=best / (duration_ms * 1e-3), spikes=spikes)
