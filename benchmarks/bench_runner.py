"""A monitored, chunked ``bs.Runner`` run against one unmonitored
``bs.jit(bs.for_loop)`` of the same length, on the CUBA network.

Both run in the same process on the same network (examples.cuba),
interleaved; the figure is the ratio of the medians. Goal: <= 1.05.

- ``runner``: ``bs.Runner`` with a SpikeMonitor (sparse events), a
  RateMonitor and the voltage of 4 neurons, chunked (``--chunk``, default:
  the runner's own choice), records copied to the host every chunk.
- ``for_loop``: ``bs.jit(bs.for_loop(net.step, length=N))``, which stacks
  the step's dense boolean spikes ``[N, 4000]`` on the device (what
  examples.cuba did before the runner).
- ``for_loop, no output``: the same loop with the step's output dropped:
  nothing recorded at all, the strictest baseline.

``--long`` also runs 10^6 steps (100 s simulated) with a spike monitor and
reports device memory (bytes of live arrays, sampled) and host memory
(process RSS and the bytes of the recorded events), to show the first is
bounded by the chunk and the second grows with the spike count only.

Beside them, when ``brian2`` is installed (``pip install brian2``, in the
``bench`` extra): Brian2's own CUBA example (same network, same duration,
``SpikeMonitor``), with its ``cython`` code generation target, timed on its
second run (after code generation and compilation).

Usage:
  python -m benchmarks runner [--devices 1] [--duration 1.0]
      [--repeats 7] [--chunk K] [--long] [--json out.json]
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks._harness import clock, fake_devices, parser, rss_mib, write_json


def _rss() -> int:
  return int(rss_mib() * 2**20)


def _live_bytes(jax) -> int:
  return sum(x.nbytes for x in jax.live_arrays())


def main(argv=None) -> dict:
  ap = parser(__doc__, repeats=7, json=True)
  ap.add_argument("--devices", type=int, default=1)
  ap.add_argument("--duration", type=float, default=1.0, help="seconds")
  ap.add_argument("--chunk", type=int, default=None)
  ap.add_argument("--long", action="store_true",
                  help="also run 10^6 steps and report memory")
  args = ap.parse_args(argv)

  fake_devices(max(args.devices, 1))  # before JAX starts
  import jax
  import brainshard as bs
  from examples import cuba

  mesh = jax.make_mesh((args.devices,), ("x",),
                       devices=jax.devices()[:args.devices])
  net = cuba.EINetwork(mesh, "cuba", seed=0)
  n = int(round(args.duration * 1e3 / net.params.dt))
  runner = net.runner(chunk=args.chunk, progress=False)
  dense = bs.jit(lambda: bs.for_loop(net.step, length=n))
  bare = bs.jit(lambda: bs.for_loop(lambda: (net.step(), None)[1], length=n))

  def time_runner():
    runner.reset_records()
    with clock() as t:
      res = runner.run(n)
    return t.s, len(res.spikes)

  def time_loop(loop):
    def run():
      with clock() as t:
        out = jax.block_until_ready(loop())
        jax.block_until_ready(net.v.value)  # the loop without output
      return t.s, (None if out is None else int(np.asarray(out).sum()))
    return run

  cases = {"runner": time_runner, "for_loop": time_loop(dense),
           "for_loop, no output": time_loop(bare)}
  # Same spikes first (from the same initial conditions).
  net.reset()
  _, spikes_runner = time_runner()
  net.reset()
  _, spikes_loop = time_loop(dense)()
  assert spikes_runner == spikes_loop, (spikes_runner, spikes_loop)
  net.reset()
  time_loop(bare)()  # compile
  times = {k: [] for k in cases}
  names = list(cases)
  for r in range(args.repeats):
    for name in names[r % 3:] + names[:r % 3]:
      net.reset()
      times[name].append(cases[name]()[0])
  med = {k: statistics.median(v) for k, v in times.items()}
  best = {k: min(v) for k, v in times.items()}
  result = {
      "devices": args.devices, "steps": n, "chunk": runner.loop.chunk,
      "repeats": args.repeats, "platform": jax.devices()[0].platform,
      "median_s": med, "min_s": best, "spikes": spikes_runner,
      "ratio_best_vs_for_loop": best["runner"] / best["for_loop"],
      "ratio_best_vs_no_output": best["runner"] / best["for_loop, no output"],
      "ratio_vs_for_loop": med["runner"] / med["for_loop"],
      "ratio_vs_no_output": med["runner"] / med["for_loop, no output"],
  }
  print(f"CUBA, {net.params.n} neurons, {n} steps on {args.devices} "
        f"{result['platform']} device(s), chunk {runner.loop.chunk}, "
        f"{args.repeats} interleaved repeats (medians)")
  for k in med:
    print(f"  {k:22s} median {med[k]:8.3f} s   min {best[k]:8.3f} s")
  print(f"  runner / for_loop            {result['ratio_vs_for_loop']:.3f} "
        f"(of the minima: {result['ratio_best_vs_for_loop']:.3f})  goal <= 1.05")
  print(f"  runner / for_loop, no output {result['ratio_vs_no_output']:.3f} "
        f"(of the minima: {result['ratio_best_vs_no_output']:.3f})")
  brian = brian2_cuba(args.duration)
  result["brian2"] = brian
  if "error" in brian:
    print(f"  Brian2: not usable here ({brian['error'][:80]})")
  else:
    print(f"  Brian2 {brian['version']} ({brian['target']}): "
          f"{brian['second_run_s']:.3f} s for the same {args.duration:g} s "
          f"(first run with code generation {brian['first_run_s']:.1f} s; "
          f"{brian['rate_hz']:.1f} Hz); runner / Brian2 "
          f"{med['runner'] / brian['second_run_s']:.2f}")
  if args.long:
    result["long"] = long_run(jax, net, runner)
  write_json(args.json, result)
  return result


def brian2_cuba(duration_s: float) -> dict | None:
  """Brian2's CUBA example (cython target): seconds for its second run, or
  ``{'error': ...}`` where brian2 cannot be imported. (Here, Python 3.11 with
  NumPy 2.4: pip's newest brian2 for 3.11, 2.9.0, fails on import because
  it uses ``ndarray.ptp``; brian2 >= 2.10 needs Python >= 3.12.)"""
  try:
    import brian2 as b2
  except Exception as e:  # noqa: BLE001 - e.g. brian2 2.9 on NumPy >= 2.4
    return {"error": f"{type(e).__name__}: {e}"}
  b2.prefs.codegen.target = "cython"
  b2.start_scope()
  ms, mV = b2.ms, b2.mV
  ns = dict(taum=20 * ms, taue=5 * ms, taui=10 * ms, Vt=-50 * mV, Vr=-60 * mV,
            El=-49 * mV, we=(60 * 0.27 / 10) * mV, wi=(-20 * 4.5 / 10) * mV)
  eqs = """
  dv/dt  = (ge+gi-(v-El))/taum : volt (unless refractory)
  dge/dt = -ge/taue : volt
  dgi/dt = -gi/taui : volt
  """
  b2.defaultclock.dt = 0.1 * ms
  group = b2.NeuronGroup(4000, eqs, threshold="v>Vt", reset="v = Vr",
                         refractory=5 * ms, method="exact", namespace=ns)
  group.v = "Vr + rand() * (Vt - Vr)"
  ce = b2.Synapses(group, group, on_pre="ge += we", namespace=ns)
  ci = b2.Synapses(group, group, on_pre="gi += wi", namespace=ns)
  ce.connect("i<3200", p=0.02)
  ci.connect("i>=3200", p=0.02)
  spikes = b2.SpikeMonitor(group)
  net = b2.Network(group, ce, ci, spikes)
  with clock() as first:
    net.run(duration_s * b2.second)
  n0 = spikes.num_spikes
  with clock() as second:
    net.run(duration_s * b2.second)
  return {"version": b2.__version__, "target": "cython",
          "first_run_s": first.s, "second_run_s": second.s,
          "rate_hz": (spikes.num_spikes - n0) / (4000 * duration_s)}


def long_run(jax, net, runner, steps: int = 1_000_000) -> dict:
  """10^6 steps with monitors: device memory vs host memory, sampled on the
  main thread each time a chunk's records are collected (then one chunk is
  being copied and the next one computed)."""
  net.reset()
  runner.reset_records()
  base_dev, base_rss = _live_bytes(jax), _rss()
  device, rss = [], []
  collect = runner.recorder.collect

  def sampled(*args):
    device.append(_live_bytes(jax))
    rss.append(_rss())
    return collect(*args)
  runner.recorder.collect = sampled
  try:
    with clock() as t:
      res = runner.run(steps)
    wall = t.s
  finally:
    runner.recorder.collect = collect
  events = len(res.spikes)
  out = {"steps": steps, "wall_s": wall, "spikes": events,
         "chunk": runner.loop.chunk,
         "device_bytes_max_above_start": max(device) - base_dev,
         "device_bytes_first_chunk_above_start": device[0] - base_dev,
         "rss_growth_bytes": max(rss) - base_rss,
         "event_bytes": int(res.spikes.steps.nbytes + res.spikes.neurons.nbytes),
         "dense_raster_bytes": steps * net.params.n}
  print(f"10^6 steps: {wall:.0f} s wall, {events} spikes, chunk {out['chunk']}")
  print(f"  device memory (live arrays) at most "
        f"{out['device_bytes_max_above_start'] / 2**20:.2f} MiB above the start "
        f"(first chunk: {out['device_bytes_first_chunk_above_start'] / 2**20:.2f} MiB); "
        f"a dense raster would be {out['dense_raster_bytes'] / 2**30:.1f} GiB")
  print(f"  host RSS grew {out['rss_growth_bytes'] / 2**20:.1f} MiB; the events take "
        f"{out['event_bytes'] / 2**20:.1f} MiB (12 bytes per spike)")
  return out
