"""A long microcircuit run recorded to disk with ``bs.Runner(record_to=...)``:
resident memory over simulated time, and the time recording to disk costs
against recording in memory.

The network is examples/microcircuit's ``Microcircuit`` (default: scale 0.1,
k-scale 0.1, 1 device), its step run by a ``bs.Runner`` of its own with
every spike recorded by one ``SpikeMonitor``.

- ``rss``: one run of ``--duration`` simulated seconds recording to a zarr
  record, in segments of ``--every`` s (the runner continues and appends).
  After each: wall time, resident memory (VmRSS), the peak since the first
  segment began (VmHWM), spikes on disk and the record's bytes on disk,
  beside the bytes those spikes would hold in memory (12 per spike). Flat
  RSS after the first segment: the records do not stay in memory.
  Also the time spent writing: the seconds in the record's appends and
  commits (zarr), per chunk and per simulated second.
- ``overhead``: ``--repeats`` interleaved runs of ``--overhead`` simulated
  seconds each, recording in memory (records reset before each run) and to
  disk (the record cleared before each run); the ratios of the median wall
  and CPU times, and of the minima (on a loaded machine the CPU ratio and
  the write time above are the steadier figures).
- the record read back with ``bs.load_records`` (after ``rss``, before
  ``overhead``): its steps and spikes, and each population's rate and CV
  of ISI (``bm.population_firing_rates``, ``bm.population_cv_isi``).

Usage:
  python -m benchmarks record [--duration 600] [--every 60] [--overhead 5]
      [--repeats 3] [--scale 0.1] [--k-scale 0.1] [--chunk 500]
      [--dir DIR] [--json out.json]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

from benchmarks._harness import (clock, fake_devices, parser, peak_rss_mib,
                                 reset_peak, rss_mib, write_json)


def _runner(bs, bm, mc, chunk: int, record_to):
  """A runner of the example's network step (``mc.network.step``), every
  spike recorded by one ``SpikeMonitor`` to ``record_to``: with ``every >
  1`` steps per call, one spike block per call."""
  net = mc.network
  if mc.every == 1:
    return bs.Runner(net.step, {"spikes": bs.SpikeMonitor()}, dt=net.dt,
                     chunk=chunk, progress=False, record_to=record_to)
  return bs.Runner(net.step, {"spikes": bs.SpikeMonitor(bm.block_spikes)},
                   dt=net.dt * mc.every, chunk=max(1, chunk // mc.every),
                   progress=False, record_to=record_to)


def _du(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f))
             for d, _, files in os.walk(path) for f in files)


def main(argv=None) -> dict:
  ap = parser(__doc__, repeats=3, json=True)
  ap.add_argument("--duration", type=float, default=600.0,
                  help="simulated seconds recorded to disk (default 600)")
  ap.add_argument("--every", type=float, default=60.0,
                  help="simulated seconds between RSS readings (default 60)")
  ap.add_argument("--overhead", type=float, default=5.0,
                  help="simulated seconds per timed run (default 5; 0: skip)")
  ap.add_argument("--scale", type=float, default=0.1)
  ap.add_argument("--k-scale", type=float, default=0.1)
  ap.add_argument("--chunk", type=int, default=5000,
                  help="steps per chunk (default 5000: 0.5 s simulated)")
  ap.add_argument("--seed", type=int, default=1)
  ap.add_argument("--dir", default=None,
                  help="folder for the records (default: a temporary one)")
  args = ap.parse_args(argv)

  fake_devices(1)
  import jax
  import brainshard as bs
  from brainshard import models as bm
  from examples.microcircuit.model import Microcircuit

  folder = args.dir or tempfile.mkdtemp(prefix="bench_record_")
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, "microcircuit.zarr")
  shutil.rmtree(path, ignore_errors=True)
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  with clock() as build:
    mc = Microcircuit(mesh, args.scale, args.k_scale, seed=args.seed)
  memory = _runner(bs, bm, mc, args.chunk, None)
  disk = _runner(bs, bm, mc, args.chunk, path)
  with clock() as warm:   # compiles both runners' chunk programs
    memory.run(duration=100.0)
    disk.compile(duration=args.every * 1e3)
    memory.compile(duration=args.overhead * 1e3 or 100.0)
  memory.reset_records()
  print(f"microcircuit, scale {args.scale:g} (k-scale {args.k_scale:g}): "
        f"{mc.layout.n} neurons, {mc.n_synapses} synapses, chunk "
        f"{disk.loop.chunk} calls of {mc.every} step(s); build {build.s:.1f} "
        f"s, warm-up and compile {warm.s:.1f} s; record: {path}")

  rows = _rss_rows(disk, args, path)
  res = bs.load_records(path)
  spikes = res.spikes
  if mc.every > 1:
    spikes = bm.unblock_spikes(spikes, mc.every)
  steps = res.steps * mc.every
  rates = bm.population_firing_rates(spikes, mc.layout, steps)
  cvs = bm.population_cv_isi(spikes, mc.layout)
  print(f"read back: {res.steps * res.dt / 1e3:g} s simulated, "
        f"{len(spikes)} spikes (from step {res.start * mc.every})")
  print("  " + "  ".join(f"{k} {rates[k]:.2f} Hz CV {cvs[k]:.2f}"
                         for k in rates))
  del res, spikes
  # Last: it clears the record before each of its runs.
  overhead = _overhead(memory, disk, args) if args.overhead > 0 else None
  result = {"scale": args.scale, "k_scale": args.k_scale,
            "neurons": mc.layout.n, "chunk_steps": disk.loop.chunk * mc.every,
            "build_s": build.s, "rss": rows, "overhead": overhead,
            "rates_hz": rates, "cv_isi": cvs,
            "platform": jax.devices()[0].platform}
  write_json(args.json, result)
  if args.dir is None:
    shutil.rmtree(folder, ignore_errors=True)
  return result


def _timed(store, spent: list) -> None:
  """Adds the seconds of each of ``store``'s appends and commits to
  ``spent[0]`` (an attribute on this store object only)."""
  for name in ("append", "commit"):
    method = getattr(store, name)

    def timed(*a, method=method, **kw):
      with clock() as t:
        out = method(*a, **kw)
      spent[0] += t.s
      return out
    setattr(store, name, timed)


def _rss_rows(disk, args, path: str) -> list[dict]:
  """Segments of ``--every`` s recorded to disk, memory read after each."""
  spent = [0.0]
  _timed(disk.result.store, spent)
  chunks0 = disk.chunks_done
  start_rss = rss_mib()
  reset_peak()
  rows, sim, wall = [], 0.0, 0.0
  print(f"{'simulated s':>11} {'wall s':>8} {'RSS MiB':>8} {'peak MiB':>9} "
        f"{'spikes':>10} {'on disk MiB':>11} {'in memory MiB':>13}")
  print(f"{0.0:11.0f} {0.0:8.1f} {start_rss:8.1f} {'':>9}")
  while sim < args.duration - 1e-9:
    seg = min(args.every, args.duration - sim)
    with clock() as t:
      disk.run(duration=seg * 1e3)
    sim, wall = sim + seg, wall + t.s
    spikes = disk.result.store.rows("spikes", "steps")
    row = {"simulated_s": sim, "wall_s": wall, "rss_mib": rss_mib(),
           "peak_mib": peak_rss_mib(), "spikes": spikes,
           "disk_mib": _du(path) / 2**20, "in_memory_mib": spikes * 12 / 2**20}
    rows.append(row)
    print(f"{sim:11.0f} {wall:8.1f} {row['rss_mib']:8.1f} "
          f"{row['peak_mib']:9.1f} {spikes:10d} {row['disk_mib']:11.1f} "
          f"{row['in_memory_mib']:13.1f}", flush=True)
  if len(rows) > 1:
    print(f"RSS growth after the first segment: "
          f"{rows[-1]['rss_mib'] - rows[0]['rss_mib']:+.1f} MiB (peak "
          f"{rows[-1]['peak_mib'] - rows[0]['peak_mib']:+.1f} MiB), while the "
          f"records grew by {rows[-1]['in_memory_mib'] - rows[0]['in_memory_mib']:.1f}"
          " MiB")
  chunks = max(1, disk.chunks_done - chunks0)
  print(f"writing to disk (appends and commits): {spent[0]:.1f} s of "
        f"{wall:.1f} s wall, {spent[0] / chunks * 1e3:.1f} ms per chunk, "
        f"{spent[0] / max(sim, 1e-9):.3f} s per simulated second")
  rows[-1]["write_s"] = spent[0]
  return rows


def _overhead(memory, disk, args) -> dict:
  """Interleaved runs of ``--overhead`` s: memory, disk, disk, memory, ..."""
  times = {"memory": [], "disk": []}
  cpu = {"memory": [], "disk": []}
  runners = {"memory": memory, "disk": disk}
  for r in range(args.repeats):
    for name in (("memory", "disk") if r % 2 == 0 else ("disk", "memory")):
      runners[name].reset_records()
      with clock() as t:
        runners[name].run(duration=args.overhead * 1e3)
      times[name].append(t.s)
      cpu[name].append(t.cpu_s)
  med = {k: statistics.median(v) for k, v in times.items()}
  med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
  out = {"simulated_s": args.overhead, "repeats": args.repeats,
         "wall_s": times, "cpu_s": cpu,
         "ratio": med["disk"] / med["memory"],
         "ratio_best": min(times["disk"]) / min(times["memory"]),
         "ratio_cpu": med_cpu["disk"] / med_cpu["memory"]}
  print(f"overhead, {args.repeats} interleaved runs of {args.overhead:g} s "
        f"simulated (medians): memory {med['memory']:.2f} s wall "
        f"{med_cpu['memory']:.2f} CPU s, disk {med['disk']:.2f} s wall "
        f"{med_cpu['disk']:.2f} CPU s; disk / memory: wall {out['ratio']:.3f} "
        f"(of the minima {out['ratio_best']:.3f}), CPU {out['ratio_cpu']:.3f}")
  return out
