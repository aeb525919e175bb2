"""``python -m benchmarks`` writes its results, report and plot into
benchmarks/results/ and regenerates the committed docs only with --docs.
A fake one-row workload stands in for the real (minutes-long) ones."""

import os
import shutil

import pytest

from benchmarks import _workloads, run

_ROWS = [dict(workload="dispatch", case="N=1", impl=impl, baseline="jax.jit",
              goal=None, x=1, ratio=r, lo=r, hi=r, best=r, time_s=1e-5 * r,
              baseline_time_s=1e-5, number=10)
         for impl, r in (("jax.jit", 1.0), ("brainshard", 1.1))]


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
  monkeypatch.setattr(run, "_ROOT", str(tmp_path))
  monkeypatch.setitem(_workloads.WORKLOADS, "dispatch", lambda ctx: list(_ROWS))
  return tmp_path


def _files(path):
  return sorted(os.listdir(path)) if path.exists() else []


def test_default_paths_are_in_the_results_folder():
  paths = run.output_paths(run.parse_args(["--quick"]), root="/repo")
  assert paths == dict(json="/repo/benchmarks/results/quick.json",
                       report="/repo/benchmarks/results/quick.md",
                       plot="/repo/benchmarks/results/quick_states.png",
                       docs=None)
  assert run.output_paths(run.parse_args([]), root="/repo")["report"] == \
      "/repo/benchmarks/results/full.md"
  assert run.output_paths(run.parse_args(["--docs"]), root="/repo")["docs"] \
      == "/repo/docs"


def test_quick_run_leaves_the_docs_alone(fake_root):
  assert run.main(["--quick", "--no-peers", "--only", "dispatch"]) == 0
  results = fake_root / "benchmarks" / "results"
  assert _files(results) == ["quick.json", "quick.md", "quick_states.png"]
  assert "](quick_states.png)" in (results / "quick.md").read_text()
  assert _files(fake_root / "docs") == []


@pytest.mark.slow
def test_docs_flag_regenerates_the_docs(fake_root):
  assert run.main(["--quick", "--no-peers", "--only", "dispatch",
                   "--docs"]) == 0
  assert _files(fake_root / "docs") == ["benchmarks.md", "benchmarks_states.png"]
  text = (fake_root / "docs" / "benchmarks.md").read_text()
  assert "](benchmarks_states.png)" in text and "--docs" in text


@pytest.mark.slow
def test_partial_run_keeps_the_full_runs_header(fake_root, monkeypatch):
  """`--only demo --docs` re-measures one section: the page keeps the full
  run's date and mode and says which sections were re-measured when."""
  assert run.main(["--no-peers", "--only", "dispatch"]) == 0
  demo = [dict(workload="demo", case=f"{k} device(s)", impl="brainshard",
               baseline=None, x=k, runs=[t], output=["done"],
               per_sim_second_s=t) for k, t in ((1, 1.5), (8, 6.0))]
  monkeypatch.setitem(_workloads.WORKLOADS, "demo", lambda ctx: list(demo))
  assert run.main(["--no-peers", "--only", "demo", "--docs"]) == 0
  text = (fake_root / "docs" / "benchmarks.md").read_text()
  assert "Mode: full" in text and "Re-measured" in text and "`--only demo`" in text
  # the dispatch repeats are named only where dispatch was measured
  assert "(`--only demo`; 25 repeats; load average" in text
  assert "## 1. Dispatch" in text  # the earlier section is kept
  assert "| 8 | 6.00 s | 6.00 | 4.0x |" in text
  assert "runs **4.0 times faster**" in text
  # A second re-measure of the same section replaces the first's line; a
  # line naming other sections too stays, for those.
  assert run.main(["--no-peers", "--only", "dispatch,demo"]) == 0
  assert run.main(["--no-peers", "--only", "demo", "--docs"]) == 0
  text = (fake_root / "docs" / "benchmarks.md").read_text()
  assert text.count("`--only demo`") == 1
  assert text.count("`--only dispatch,demo`") == 1


def test_a_partial_run_reports_its_own_time(fake_root, capsys):
  """After a merge into the full run's results, the time printed is this
  run's, not the full run's (which the page's header keeps)."""
  import json
  assert run.main(["--no-peers", "--only", "dispatch"]) == 0
  path = fake_root / "benchmarks" / "results" / "full.json"
  doc = json.loads(path.read_text())
  doc["meta"]["wall_s"] = 4321.0
  path.write_text(json.dumps(doc))
  capsys.readouterr()
  assert run.main(["--no-peers", "--only", "dispatch"]) == 0
  printed = capsys.readouterr().out
  assert "full.json in " in printed and "4321" not in printed
  assert json.loads(path.read_text())["meta"]["wall_s"] == 4321.0


def test_guide_sections_render_the_benchmark_scripts_figures():
  """docs/training.md and docs/ensemble.md quote no figures: the autodiff
  and vmap workloads put bench_autodiff's and bench_vmap's into the page."""
  from benchmarks import bench_guides
  data = {"members": 64, "hlo": {"pure": {"instructions": 69}},
          "step": {"pure": dict(per_call_s=1e-4, ratio=1.0, ratio_best=1.0),
                   "brainshard": dict(per_call_s=2e-4, ratio=2.0,
                                      ratio_best=1.9)}}
  rows = bench_guides._rows("vmap", data)
  assert [r["impl"] for r in rows] == ["pure", "brainshard"]
  text = "\n".join(bench_guides.render_guides(rows))
  assert "## 9. Ensembles" in text and "| step | brainshard | 2.00 | 1.90 | 0.200 ms |" in text
  assert "## 8." not in text  # no autodiff rows, no section


def test_scale_keeps_each_fastest_and_reports_failures(monkeypatch):
  """``--scale`` interleaves the implementations' processes and keeps each
  one's fastest; a run that failed (out of memory, peer missing) stays in
  the table as 'failed' with its error, not silently dropped."""
  from benchmarks import bench_scale
  times = {"brainshard": [0.30, 0.10, 0.20], "pure": [0.12, 0.11, 0.50]}
  calls = []

  def fake_child(argv, devices=1):
    impl, model, n, ms = argv
    calls.append(impl)
    if impl == "brainstate":
      return dict(impl=impl, model=model, n=n, devices=1, delay=1,
                  exchange="step", error="RESOURCE_EXHAUSTED: out of memory")
    return dict(impl=impl, model=model, n=n, devices=1, delay=1,
                exchange="step", s_per_sim_s=times[impl].pop(0),
                peak_bytes=2**20, build_s=0.0, rate_hz=5.0, isi_cv=0.5,
                active=1.0)

  monkeypatch.setattr(bench_scale, "child", fake_child)
  monkeypatch.setattr(bench_scale, "plan", lambda gpu, quick: [(4000, 1.0)])
  rows = bench_scale.scale_rows(False, False, rounds=3)
  # The failed one is not run again.
  assert calls == ["brainshard", "pure", "brainstate"] + \
      ["brainshard", "pure"] * 2
  by = {r["impl"]: r for r in rows}
  assert by["brainshard"]["s_per_sim_s"] == 0.10
  assert by["pure"]["s_per_sim_s"] == 0.11
  text = bench_scale.markdown(rows, [], quick=False)
  row = next(line for line in text.splitlines() if line.startswith("| 4,000"))
  assert row.split(" | ")[1:5] == ["0.100", "0.91", "0.110", "failed"]
  assert "- brainstate, N = 4,000: `RESOURCE_EXHAUSTED: out of memory`" in text


@pytest.mark.slow
def test_a_failed_scale_run_is_a_row_naming_its_case_and_error():
  from benchmarks import bench_scale
  r = bench_scale.child(["brainshard", "cuba", 40, 1.0, 1, 1, "step", "bogus"])
  assert r["error"].startswith("ValueError: connectivity must be")
  assert (r["impl"], r["n"], r["devices"], r["delay"], r["connectivity"]) == \
      ("brainshard", 40, 1, 1, "bogus")


def test_one_command_line_names_every_benchmark():
  """``python -m benchmarks COMMAND``: every bench_*.py module is a command
  of the table or a workload of the suite; no command means the suite."""
  import importlib
  import pathlib
  from benchmarks import cli
  assert cli.resolve(["--quick", "--only", "demo"]) == \
      ("suite", ["--quick", "--only", "demo"])
  assert cli.resolve(["scale", "--quick"]) == ("scale", ["--quick"])
  assert cli.resolve(["--gpu"]) == ("scale", ["--gpu"])  # older spelling
  modules = {m for m, _ in cli.COMMANDS.values()}
  for module in modules:
    assert callable(importlib.import_module(module).main), module
  in_suite = {f.__module__ for f in _workloads.WORKLOADS.values()}
  folder = pathlib.Path(cli.__file__).parent
  bench = {f"benchmarks.{p.stem}" for p in folder.glob("bench_*.py")}
  assert bench - modules - in_suite == set()
  assert all(name in cli.usage() for name in cli.COMMANDS)


@pytest.mark.slow
def test_command_help_names_the_command():
  import pathlib
  import subprocess
  import sys
  root = pathlib.Path(__file__).resolve().parents[1]
  for argv, first in ((["--help"], "usage: python -m benchmarks [COMMAND]"),
                      (["for-loop", "--help"],
                       "usage: python -m benchmarks for-loop")):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", *argv],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(first), proc.stdout


def test_runs_report_the_median_process_of_each_figure(fake_root, monkeypatch):
  """``--runs 3`` (issue 24's "median of three runs"): each run is a fresh
  process with the same workloads and options; each figure is the median
  run's, and the goals table shows every run's ratio."""
  from benchmarks import _runs
  asked = []

  def fake_runs(argv, k):
    asked.append((argv, k))
    docs = []
    for r in (1.12, 1.03, 1.06):
      rows = [dict(row, ratio=r, lo=r, hi=r, best=r)
              if row["impl"] == "brainshard" else dict(row) for row in _ROWS]
      docs.append(dict(meta=dict(run._meta(run.parse_args(["--quick"])),
                                 wall_s=2.0), results=rows))
    return docs

  monkeypatch.setattr(_runs, "run_separately", fake_runs)
  assert run.main(["--quick", "--no-peers", "--only", "dispatch",
                   "--runs", "3"]) == 0
  assert asked == [(["--only", "dispatch", "--repeats", "9", "--quick",
                     "--no-peers"], 3)]
  text = (fake_root / "benchmarks" / "results" / "quick.md").read_text()
  assert "N=1: 1.06 (1.12, 1.03, 1.06)" in text
  assert "the median of 3 runs in separate processes" in text
  with pytest.raises(SystemExit):
    run.parse_args(["--runs", "0"])


def test_a_missed_goal_shows_the_ratio_past_the_rounding():
  """A median of 1.054 against 1.05 must not read "1.05 > 1.05"."""
  from benchmarks import _report
  rows = [dict(row, goal=1.05, ratio=1.054) if row["impl"] == "brainshard"
          else dict(row) for row in _ROWS]
  text = "\n".join(_report._goal_summary(rows))
  assert "N=1: 1.054 > 1.05" in text, text


@pytest.mark.parametrize("n", [3, "PACK_FROM"])
def test_python_cost_times_the_generated_call_without_jax(n):
  """`python -m benchmarks python-cost`: every timed call of the generated
  call (positional, and holding its results) reached the stand-in, never
  JAX (it raises otherwise), and nothing is left held afterwards."""
  from benchmarks import bench_python_cost
  from brainshard._core.program import held, program
  n = program.PACK_FROM if n == "PACK_FROM" else n
  r = bench_python_cost.python_cost(n, calls=50, batches=2)
  assert set(r) == {"pure", "entry", "object"} and r["pure"] > 0
  assert held.WINDOW.held is None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None,
                    reason="`instructions` counts with valgrind")
@pytest.mark.skipif(not os.environ.get("BRAINSHARD_VALGRIND"), reason=(
    "opt-in: BRAINSHARD_VALGRIND=1 (its valgrind children take 75-135 s of "
    "both cores, a quarter of the suite's time)"))
def test_instructions_counts_one_call_of_each_case():
  """`python -m benchmarks instructions`: a per-call count for each case
  (the setup and the loop's own cost not counted), and bs.jit's call a few
  percent over the pure one's: JAX's dispatch is most of both. (Two cases
  only: each valgrind child costs ~30 s of startup.)"""
  from benchmarks import bench_instructions
  r = bench_instructions.per_call([3], calls=50, cases=("pure", "bs"))
  assert set(r) == {("pure", 3), ("bs", 3)}
  assert 1.0 < r[("bs", 3)]["Ir"] / r[("pure", 3)]["Ir"] < 1.2
