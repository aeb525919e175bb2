"""``--runs K``: the suite K times, each in a fresh process, and per figure
the median run (issue 24's "median of three runs").

One process's medians move together: its arrays' placement in memory, its
caches and the load while it ran shift every ratio it measures (N=10
dispatch: 1.04 in one process, 1.06 in the next, same code). A figure that
is the median of separate processes is the one a reader can reproduce.

Example:
  >>> a = dict(meta=dict(wall_s=1.0), results=[
  ...     dict(workload='d', case='N=1', impl='bs', ratio=1.10, best=1.0)])
  >>> b = dict(meta=dict(wall_s=1.0), results=[
  ...     dict(workload='d', case='N=1', impl='bs', ratio=1.02, best=1.0)])
  >>> c = dict(meta=dict(wall_s=1.0), results=[
  ...     dict(workload='d', case='N=1', impl='bs', ratio=1.05, best=1.1)])
  >>> row = combine([a, b, c])['results'][0]
  >>> row["ratio"], row["best"], row["run_ratios"]
  (1.05, 1.1, [1.1, 1.02, 1.05])
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any


def run_separately(argv: list[str], k: int) -> list[dict]:
  """The suite run ``k`` times with ``argv``, each in its own process, one
  after the other; their result documents, in order."""
  docs = []
  with tempfile.TemporaryDirectory(prefix="brainshard-runs-") as folder:
    for i in range(k):
      print(f"== run {i + 1} of {k} (a fresh process)", flush=True)
      subprocess.run([sys.executable, "-m", "benchmarks", "suite", *argv,
                      "--name", f"run{i}", "--out", folder], check=True)
      with open(os.path.join(folder, f"run{i}.json")) as f:
        docs.append(json.load(f))
  return docs


def combine(docs: list[dict]) -> dict:
  """One document: each row as measured by the run whose ratio is the
  median (the lower one of an even count), with every run's ratio in
  ``run_ratios``; rows without a ratio (memory, unavailable peers) from the
  middle run that has them. Meta: the first run's, with ``runs``, the
  total ``wall_s``, and the last run's date and load."""
  by_key: dict[tuple, list[dict]] = {}
  for doc in docs:
    for r in doc["results"]:
      by_key.setdefault(_key(r), []).append(r)
  results = [_median_row(rows) for rows in by_key.values()]
  meta = dict(docs[0]["meta"], runs=len(docs),
              wall_s=sum(d["meta"].get("wall_s", 0.0) for d in docs))
  for key in ("date", "load_avg"):  # as the last run ended
    if key in docs[-1]["meta"]:
      meta[key] = docs[-1]["meta"][key]
  out = dict(meta=meta, results=results)
  if "profile" in docs[0]:
    out["profile"] = docs[0]["profile"]
  return out


def _key(r: dict) -> tuple:
  return r["workload"], r.get("case"), r.get("impl"), r.get("x")


def _median_row(rows: list[dict]) -> dict[str, Any]:
  timed = [r for r in rows if "ratio" in r]
  if not timed:
    return rows[len(rows) // 2]
  ranked = sorted(timed, key=lambda r: r["ratio"])
  return dict(ranked[(len(ranked) - 1) // 2],
              run_ratios=[r["ratio"] for r in timed])
