"""Where a step's time goes (``python -m benchmarks nest --profile``): the
pure-JAX twin of each model (:mod:`._network_twin` for ``bm.Network``'s
Brunel and microcircuit, ``_ei.pure_block_run``'s block for CUBA: the same
kernels and spikes as brainshard) with its parts switched on one at a time.

In a child process per model: build, simulate a warm-up, then run
``window`` of the real network once and keep its spikes. Each variant is a
compiled chunk of that window from the same state: first the loop and the
ring buffer alone (its clear and the read of the next slots: on one device
the whole of the exchange), then with the neuron update, the devices'
drive, delivery and recording added. Every variant delivers and records
the *real* run's spikes (replayed), so a part switched off changes no
other part's work; the last variant does what the real chunk does (its
time is given beside). Each part's cost is the difference it made, in
CPU (all threads) and wall microseconds per simulated step, the median of
``repeats`` interleaved repeats. The host's share of recording (compaction
and decoding, once a chunk) is not in the chunk.

Example (a variant's parts):
  >>> from benchmarks._network_twin import cumulative_parts
  >>> len(cumulative_parts()), sorted(cumulative_parts()[-1])
  (5, ['deliver', 'drive', 'record', 'update'])
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from benchmarks._harness import clock

# The model and size each section is profiled at (--profile-at).
DEFAULT_AT = {"brunel": 1.0, "microcircuit": 0.1, "cuba": 40_000}


def _brunel(size: float, warmup_ms: float):
  from benchmarks import _nest_brunel
  net, sr, _ = _nest_brunel.network(dict(scale=size, warmup_ms=warmup_ms))
  return (f"Brunel A (AI), scale {size:g}",
          _nest_brunel.twin_arrays(net, sr))


def _microcircuit(size: float, warmup_ms: float):
  import jax
  from benchmarks import _network_twin
  from examples.microcircuit import model
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  mc = model.Microcircuit(mesh, n_scale=size, k_scale=1.0, seed=1)
  net = mc.network
  net.build(warmup_ms)
  ranges = [(int(r.ids()[0]), int(r.ids()[-1]) + 1)
            for r in mc.recorders.values()]
  stimuli = net._stimuli  # pylint: disable=protected-access
  return (f"microcircuit, scale {size:g}, k-scale 1",
          _network_twin.arrays(net, stimuli, ranges))


def _cuba_programs(n: int, delay: int = 2):
  """The CUBA twin's chunk (``_ei.pure_block_run``: one call is a block of
  ``delay`` steps whose input is the previous block's spikes) with parts
  switched off; ``(make(parts, calls, replay) -> program, carry)``. CUBA
  has no devices: no drive."""
  import jax
  import jax.numpy as jnp
  from benchmarks import _ei
  from examples import cuba
  p, count, (v0, ge0, gi0) = _ei._kernels("cuba", n, 80, "stored", 0)
  p = cuba.Params(model="cuba", n=n, k=80, delay=delay)
  carry = (v0, ge0, gi0, jnp.zeros(n, jnp.int32), jnp.zeros((delay, n), bool))

  def make(parts, calls: int, replay: bool):
    def block(c, x):
      v, ge, gi, ref, pending = c
      if "deliver" in parts:
        inputs = jax.lax.map(lambda f: jnp.stack(count(f)), pending)
      else:
        inputs = jnp.zeros((delay, 2, n), jnp.int32)

      def one(carry, counts):
        v, ge, gi, ref, spikes = cuba.neuron_update(p, *carry, counts[0],
                                                    counts[1])
        return (v, ge, gi, ref), spikes

      if "update" in parts:
        (v, ge, gi, ref), spikes = jax.lax.scan(one, (v, ge, gi, ref),
                                                inputs)
      else:
        spikes = jnp.zeros((delay, n), bool)
      spikes = x if replay else spikes
      return (v, ge, gi, ref, spikes), (spikes if "record" in parts else None)

    return jax.jit(lambda c, xs=None: jax.lax.scan(block, c, xs,
                                                   length=calls))

  return make, carry


def _cuba_profile(n: int, warmup_ms: float, window_ms: float):
  """``(label, {variant: () -> blocked run}, steps)`` of CUBA."""
  import jax
  from benchmarks._network_twin import PARTS, cumulative_parts
  make, carry = _cuba_programs(n)
  dt, delay = 0.1, 2
  real = make(frozenset(PARTS), int(round(window_ms / dt)) // delay, False)
  warm = make(frozenset(PARTS), int(round(warmup_ms / dt)) // delay, False)
  carry = jax.device_put(jax.tree.map(np.asarray, warm(carry)[0]))
  xs = real(carry)[1]  # the window's spikes, replayed
  calls = xs.shape[0]
  runs = {"real": lambda: real(carry)}
  for parts in cumulative_parts():
    if "drive" in parts and "deliver" not in parts:
      continue  # CUBA has no drive: the same program as the one before
    program = make(parts, calls, True)
    runs[",".join(sorted(parts)) or "none"] = (
        lambda program=program: program(carry, xs))
  return f"CUBA, {n:,} neurons", runs, calls * delay, int(xs.sum()), n * 80


def _network_profile(model: str, size: float, warmup_ms: float,
                     window_ms: float):
  """``(label, {variant: () -> blocked run}, steps, spikes, synapses)`` of
  a ``bm.Network`` model (Brunel, the microcircuit)."""
  import jax
  from benchmarks import _network_twin as tw
  label, a = MODELS[model](size, warmup_ms)
  every = a["every"]
  calls = int(round(window_ms / a["dt"])) // every
  twin = tw.Twin(a, calls)
  twin.run(warmup_ms)
  # fresh arrays of the state (a chunk's outputs keep the index's
  # one-device mesh in their type, which a new program refuses to mix)
  state = jax.device_put(jax.tree.map(np.asarray, twin.state))
  i0 = twin.pos
  steps, neurons = twin.run(calls * every * a["dt"])
  xs = jax.device_put(replayed(steps, neurons, i0 * every, calls, every,
                               a["n_padded"]))
  args = (state, a["index"], a["consts"], np.int32(i0))
  real = tw.chunk_program(a, tw.make_call(a), calls)
  runs = {"real": lambda: real(*args)}
  for parts in tw.cumulative_parts():
    program = tw.chunk_program(a, tw.make_call(a, parts), calls, replay=True,
                               record="record" in parts)
    runs[",".join(sorted(parts)) or "none"] = (
        lambda program=program: program(*args, xs))
  # the last variant with the drive as the network writes it
  program = tw.chunk_program(a, tw.make_call(a, network_drive=True), calls,
                             replay=True)
  runs["network drive"] = lambda: program(*args, xs)
  return label, runs, calls * every, int(len(steps)), a["n_synapses"]


MODELS = {"brunel": _brunel, "microcircuit": _microcircuit}
PROFILED = ("brunel", "microcircuit", "cuba")


def replayed(steps, neurons, start_step: int, calls: int, every: int,
             n: int) -> np.ndarray:
  """Spike events as the ``[calls, every, n]`` input a replaying chunk
  takes.

  >>> replayed([5, 7], [1, 0], 4, 2, 2, 3)[:, :, :2].astype(int).tolist()
  [[[0, 0], [0, 1]], [[0, 0], [1, 0]]]
  """
  out = np.zeros((calls * every, n), bool)
  out[np.asarray(steps) - start_step, np.asarray(neurons)] = True
  return out.reshape(calls, every, n)


def profile(model: str, size: float, warmup_ms: float = 100.0,
            window_ms: float = 50.0, repeats: int = 5) -> dict:
  """The profile of one model in this process (see the module)."""
  import jax
  if model == "cuba":
    label, runs, steps, spikes, synapses = _cuba_profile(
        int(size), warmup_ms, window_ms)
  else:
    label, runs, steps, spikes, synapses = _network_profile(
        model, size, warmup_ms, window_ms)
  for run in runs.values():  # compiled and run once, untimed
    jax.block_until_ready(run())
  samples: dict[str, list] = {k: [] for k in runs}
  loads, keys = [], list(runs)
  for r in range(repeats):
    loads.append(os.getloadavg()[0])
    for key in keys[r % len(keys):] + keys[:r % len(keys)]:
      with clock() as t:
        jax.block_until_ready(runs[key]())
      samples[key].append((t.cpu_s, t.s))
  med = {k: dict(cpu_us=statistics.median(c for c, _ in v) * 1e6 / steps,
                 wall_us=statistics.median(w for _, w in v) * 1e6 / steps)
         for k, v in samples.items()}
  return dict(label=label, model=model, size=size, steps=steps,
              repeats=repeats, loads=loads, real=med["real"], variants=med,
              parts=_differences(med), spikes=spikes, n_synapses=synapses)


def _differences(med: dict) -> dict:
  """Each part's cost: the variant with it less the one before."""
  from benchmarks._network_twin import cumulative_parts
  keys = [",".join(sorted(p)) or "none" for p in cumulative_parts()]
  names = ("exchange", "update", "drive", "deliver", "record")
  out, before = {}, {"cpu_us": 0.0, "wall_us": 0.0}
  for name, key in zip(names, keys):
    if key not in med:  # a part the model does not have (CUBA's drive)
      out[name] = {k: 0.0 for k in before}
      continue
    out[name] = {k: med[key][k] - before[k] for k in before}
    before = med[key]
  out["total"] = dict(med[keys[-1]])
  return out
