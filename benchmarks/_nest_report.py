"""The tables of ``python -m benchmarks nest``: the side-by-side figures
per model and implementation (:func:`render`), where the time of a step
goes (:func:`render_profile`), and their places in docs/nest.md
(:func:`write_docs`). Sections measured in separate runs are kept
together in ``results/nest.json`` (:func:`merge`), each with its date and
load, so that one ``--docs`` writes them all.

Example (the figures of two runs, as the table cell gives them):
  >>> _median([dict(s_per_sim_s=1.0), dict(s_per_sim_s=3.0)], 's_per_sim_s')
  2.0
  >>> _median([dict(first_spike_s=None)], 'first_spike_s') is None
  True
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "nest.md"
MARKERS = {"table": ("<!-- nest-table:begin -->", "<!-- nest-table:end -->"),
           "profile": ("<!-- nest-profile:begin -->",
                       "<!-- nest-profile:end -->")}
FIGURES = (("build_s", "build (s)", "{:.2f}"),
           ("first_spike_s", "first spike (s)", "{:.1f}"),
           ("s_per_sim_s", "wall s / sim. s", "{:.3f}"),
           ("cpu_s_per_sim_s", "CPU s / sim. s", "{:.3f}"),
           ("syn_events_per_sim_s", "syn. events / sim. s", "{:.3g}"),
           ("peak_rss_mb", "peak RSS (MB)", "{:.0f}"),
           ("rate_hz", "rate (Hz)", "{:.2f}"))
ORDER = ("brunel", "microcircuit", "cuba")
# The profile's parts, in the order it switches them on.
PART_NAMES = (
    ("exchange", "exchange: the loop and the spike queue (ring buffer "
                 "clear and read; one device: no all-gather)"),
    ("update", "neuron update"),
    ("drive", "drive (the devices' draws)"),
    ("deliver", "delivery (synaptic events into the ring buffer)"),
    ("record", "recording (spikes into the recorders' words)"))


def name(column: str) -> str:
  """A column's name in the table.

  >>> name('twin'), name('nest-1'), name('nest-2')
  ('pure-JAX twin', 'NEST 1 thread', 'NEST 2 threads')
  """
  if column.startswith("nest-"):
    t = int(column.split("-")[1])
    return f"NEST {t} thread{'s' if t > 1 else ''}"
  return {"brainshard": "brainshard", "twin": "pure-JAX twin"}.get(
      column, column)


def _median(runs: list[dict], key: str) -> float | None:
  values = [r[key] for r in runs if r.get(key) is not None]
  return statistics.median(values) if values else None


def cell(value, fmt: str) -> str:
  return "-" if value is None else fmt.format(value)


def merge(old: list[dict], new: list[dict]) -> list[dict]:
  """The sections of an earlier run with this run's put in their place
  (by label), ordered by model (Brunel, microcircuit, CUBA).

  >>> [s['label'] for s in merge([dict(label='a', workload='cuba'),
  ...   dict(label='b', workload='brunel')], [dict(label='a',
  ...   workload='cuba', x=1)])]
  ['b', 'a']
  """
  by = {s["label"]: s for s in old}
  by.update({s["label"]: s for s in new})
  out = list(by.values())
  return sorted(out, key=lambda s: ORDER.index(s.get("workload", "cuba")))


def render(sections: list[dict], header: str) -> str:
  """The Markdown table: per section the median of each figure per
  implementation, then the ratios of the medians to brainshard's; under
  it, when and at what load each section ran."""
  head = ("| network | implementation | " +
          " | ".join(t for _, t, _ in FIGURES) + " | runs |")
  rows = [header, "", head, "|" + "---|" * (len(FIGURES) + 3)]
  blank = " |" * (len(FIGURES) + 1)
  for sec in sections:
    label = sec["label"]
    if sec.get("skip"):
      rows.append(f"| {label} | skipped: {sec['skip']} |" + blank)
      continue
    medians = {}
    for column, rs in sec["runs"].items():
      ok = [r for r in rs if "error" not in r and "skipped" not in r]
      if not ok:
        why = (rs[0].get("skipped") and f"not run: {rs[0]['skipped']}" or
               f"failed: {rs[0]['error']}") if rs else "not run"
        rows.append(f"| {label} | {name(column)}: {why} |" + blank)
        label = ""
        continue
      medians[column] = {k: _median(ok, k) for k, _, _ in FIGURES}
      cells = [cell(medians[column][k], fmt) for k, _, fmt in FIGURES]
      rows.append(f"| {label} | {name(column)} | " + " | ".join(cells) +
                  f" | {len(ok)} |")
      label = ""
    for other in medians:
      if other == "brainshard" or "brainshard" not in medians:
        continue
      a, b = medians["brainshard"], medians[other]
      cells = [f"{a[k] / b[k]:.2f}" if a[k] is not None and b[k] else "-"
               for k, _, _ in FIGURES[:-1]]
      rows.append(f"| | brainshard / {name(other)} | " + " | ".join(cells) +
                  " | | |")
  rows += ["", "Issue 42's goals (measured beside each other in the rounds "
           "above; not asserted by tests):", "", render_goals(sections)]
  rows += ["When each section ran (1-minute load average before each "
           "run, 2 cores):", ""]
  rows += [f"- {s['label']}: {s.get('date', '?')}, load "
           f"{_range(s.get('loads', []))}" for s in sections
           if not s.get("skip")]
  return "\n".join(rows) + "\n"


# Issue 42's goals: (what, workload, size, figure, column, at most).
GOALS = (
    ("Brunel A, CPU s / sim. s vs NEST 1 thread", "brunel", 1.0,
     "cpu_s_per_sim_s", "nest-1", 0.08),
    ("microcircuit 0.1 (full K), CPU s / sim. s vs NEST 1 thread",
     "microcircuit", 0.1, "cpu_s_per_sim_s", "nest-1", 0.06),
    ("microcircuit full scale, wall s / sim. s (2 cores)", "microcircuit",
     1.0, "s_per_sim_s", None, 8.0))


def _medians(sec: dict, column: str, key: str) -> float | None:
  ok = [r for r in sec.get("runs", {}).get(column, [])
        if "error" not in r and "skipped" not in r]
  return _median(ok, key) if ok else None


def _size(sec: dict) -> float | None:
  """A section's scale (or CUBA's neurons); from its label in results
  written before sections kept it.

  >>> _size(dict(label='microcircuit, scale 0.1, k-scale 1: ...'))
  0.1
  """
  if sec.get("size") is not None:
    return sec["size"]
  m = re.search(r"scale ([0-9.]+)", sec["label"])
  return float(m.group(1)) if m else None


def render_goals(sections: list[dict]) -> str:
  """The issue's goals beside this table's figures: brainshard's median,
  or its ratio to a column's; brainshard / twin (CPU) for every section.

  >>> run = dict(cpu_s_per_sim_s=1.0, s_per_sim_s=2.0)
  >>> sec = dict(label='B', workload='brunel', size=1.0, runs=dict(
  ...     brainshard=[run], twin=[run], **{'nest-1': [dict(run,
  ...     cpu_s_per_sim_s=10.0)]}))
  >>> print(render_goals([sec]).splitlines()[2])
  | Brunel A, CPU s / sim. s vs NEST 1 thread | 0.10 | <= 0.08 | no |
  """
  rows = ["| goal | measured | goal | met |", "|---|---|---|---|"]
  by = {(s["workload"], _size(s)): s for s in sections}
  for what, workload, size, key, column, limit in GOALS:
    sec = by.get((workload, size))
    ours = sec and _medians(sec, "brainshard", key)
    theirs = sec and column and _medians(sec, column, key)
    value = (ours / theirs if ours and theirs else None) if column else ours
    met = "-" if value is None else "yes" if value <= limit else "no"
    rows.append(f"| {what} | {cell(value, '{:.2f}')} | <= {limit:g} | "
                f"{met} |")
  for sec in sections:
    ours, twin = (_medians(sec, c, "cpu_s_per_sim_s")
                  for c in ("brainshard", "twin"))
    if ours and twin:
      rows.append(f"| {sec['label'].split(':')[0]}, brainshard / twin, CPU s "
                  f"/ sim. s | {ours / twin:.2f} | <= 1.05 | "
                  f"{'yes' if ours / twin <= 1.05 else 'no'} |")
  return "\n".join(rows) + "\n"


def _range(loads: list[float]) -> str:
  if not loads:
    return "-"
  return (f"{min(loads):.1f}-{max(loads):.1f} (median "
          f"{statistics.median(loads):.1f})")


def render_profile(profiles: list[dict]) -> str:
  """Where a step's time goes, per model: the CPU (and wall) microseconds
  per step of the twin with one more part switched on at a time, and each
  part's share (the difference it made)."""
  rows = []
  for p in profiles:
    if "error" in p:
      rows += [f"**{p['label']}**: failed: {p['error']}", ""]
      continue
    total = p["parts"]["total"]["cpu_us"]
    rows += [f"**{p['label']}** ({p['steps']} steps timed, median of "
             f"{p['repeats']} interleaved repeats, load {_range(p['loads'])}"
             f"; the real run {p['real']['cpu_us']:.0f} CPU µs per step, "
             f"the last variant {total:.0f}):", "",
             "| part | CPU µs per step | share | wall µs per step |",
             "|---|---|---|---|"]
    for part, label in PART_NAMES:
      d = p["parts"][part]
      rows.append(f"| {label} | {d['cpu_us']:.1f} | "
                  f"{d['cpu_us'] / total:.0%} | {d['wall_us']:.1f} |")
    rows += [f"| all | {total:.1f} | 100% | "
             f"{p['parts']['total']['wall_us']:.1f} |", ""]
    net = p.get("variants", {}).get("network drive")
    if net:  # where brainshard's own code differs from the twin's
      rows += [f"With the drive written as `bm.Network` writes it "
               f"(`Stimulus.add`, per device connection): "
               f"{net['cpu_us']:.1f} CPU µs per step against {total:.1f}.",
               ""]
  return "\n".join(rows) + "\n"


def machine(threads: list[int]) -> str:
  mem = ""
  try:
    with open("/proc/meminfo") as f:
      mem = f", {int(f.readline().split()[1]) / 2**20:.0f} GiB RAM"
  except OSError:
    pass
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
      "%Y-%m-%d %H:%M")
  return (f"Written {stamp} UTC on {platform.node()}: {os.cpu_count()} CPU "
          f"cores{mem}; jax {importlib.metadata.version('jax')}, NEST "
          f"{_nest_version()} with {' and '.join(map(str, threads))} "
          f"thread(s); brainshard and the twin on one JAX device "
          f"({_jax_device()}). Medians over the runs; each run a fresh "
          "process, the implementations interleaved.")


def _jax_device() -> str:
  """The device the children run on (a GPU where JAX has one)."""
  import jax  # pylint: disable=import-outside-toplevel
  return jax.devices()[0].device_kind


def _nest_version() -> str:
  if importlib.util.find_spec("nest") is None:
    return "(not installed)"
  out = subprocess.run([sys.executable, "-c",
                        "import nest; print(nest.__version__)"],
                       env=dict(os.environ, OMP_WAIT_POLICY="passive"),
                       capture_output=True, text=True, check=False)
  return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else "?"


def write_docs(text: str, which: str = "table",
               path: pathlib.Path = DOCS) -> None:
  """Replaces the text between ``which``'s markers in docs/nest.md."""
  begin, end = MARKERS[which]
  page = path.read_text()
  if begin not in page or end not in page:
    raise ValueError(f"{path} has no {begin} ... {end} markers")
  new = re.sub(re.escape(begin) + ".*?" + re.escape(end),
               lambda _: f"{begin}\n{text}{end}", page, flags=re.S)
  path.write_text(new)
