"""The CUBA example against NEST 3.10 running the same network
(benchmarks/_nest_cuba.py: the example's connectivity table, initial
conditions and parameters in ``iaf_psc_exp``). Pins the mapping of the
example's conventions onto NEST's: its ``--delay D`` (steps) is NEST's
``(D - 1) * dt``, its ``ref_steps - 1`` held steps are NEST's
``t_ref - dt``. Skipped where nest cannot be imported."""

import math

import numpy as np
import pytest

from benchmarks import (_ei, _nest_children, _nest_cuba, _nest_profile,
                        _nest_report, bench_nest)

N = 1000  # 80 inputs each: the example's in-degree, 8% connectivity


def _nest():
  try:  # OMP_WAIT_POLICY=passive before the import (import_nest)
    return _nest_cuba.import_nest()
  except ImportError as err:
    pytest.skip(f"nest not importable: {err}")


def _first_difference(a, b) -> int:
  """The first step where two rasters differ (their length if none)."""
  rows = np.nonzero((a != b).any(1))[0]
  return int(rows[0]) if len(rows) else len(a)


def _example_float64(n: int, delay: int, steps: int, seed: int = 0):
  """The example's own ``neuron_update`` in float64, its delivery as dense
  counts: separates the mapping from float32 rounding."""
  import jax
  import jax.numpy as jnp
  from examples import cuba
  p = cuba.Params(n=n, delay=delay)
  pre, post = _nest_cuba._table(p, seed)
  counts = np.zeros((n, n))
  np.add.at(counts, (post.ravel(), pre.ravel()), 1)
  v0 = _nest_cuba._initial(p, seed)["V_m"]  # drawn as the example draws
  with jax.enable_x64(True):
    w_exc = jnp.asarray(counts[:, :p.n_exc])
    w_inh = jnp.asarray(counts[:, p.n_exc:])

    @jax.jit  # one dispatch a step: the update, then this step's arrivals
    def step(w_exc, w_inh, v, ge, gi, ref, x_exc, x_inh):
      v, ge, gi, ref, spikes = cuba.neuron_update(p, v, ge, gi, ref, x_exc, x_inh)
      fired = spikes.astype(jnp.float64)
      return (v, ge, gi, ref, spikes,
              (w_exc @ fired[:p.n_exc], w_inh @ fired[p.n_exc:]))

    v = jnp.asarray(v0)
    ge = gi = jnp.zeros(n)
    ref = jnp.zeros(n, jnp.int32)
    queue = [(jnp.zeros(n), jnp.zeros(n))] * delay  # arrivals, in order
    rows = []
    for t in range(steps):
      v, ge, gi, ref, spikes, arrivals = step(w_exc, w_inh, v, ge, gi, ref,
                                             *queue.pop(0))
      queue.append(arrivals)
      rows.append(spikes)
    out = np.asarray(jnp.stack(rows))
  return out


def test_mapping_values():
  assert _nest_cuba.nest_delay_ms(2) == 0.1
  assert _nest_cuba.nest_delay_ms(5, dt=0.1) == 0.4
  with pytest.raises(ValueError, match="no NEST equivalent"):
    _nest_cuba.nest_delay_ms(1)
  from examples import cuba
  p = cuba.Params()
  q = _nest_cuba.nest_params(p)
  assert q["t_ref"] == pytest.approx(p.t_ref - p.dt)
  assert q["C_m"] == q["tau_m"] == p.taum  # pA then means the example's mV
  assert (q["E_L"], q["V_th"], q["V_reset"]) == (p.el, p.v_th, p.v_reset)
  coba = _nest_cuba.nest_params(cuba.Params(model="coba"))
  assert coba["C_m"] / coba["g_L"] == p.taum and coba["I_e"] == 20.0


@pytest.mark.slow
@pytest.mark.parametrize("delay", [2, 3, 5])
def test_nest_is_the_example_in_float64(delay):
  """With the mapping, NEST gives the spikes of the example's update run in
  float64, step for step; a delay or t_ref one step off does not."""
  _nest()
  steps = 1000
  ref = _example_float64(N, delay, steps)
  assert ref.sum() > 400
  run = lambda **kw: _nest_cuba.nest_run(  # noqa: E731
      "cuba", N, delay_steps=delay, threads=1, **kw)[1](steps * 0.1)
  assert _first_difference(run(), ref) == steps
  later = run(delay_ms=round(delay * 0.1, 10))  # NEST's d = the example's d
  assert _first_difference(later, ref) < 50
  assert _first_difference(run(overrides={"t_ref": 5.0}), ref) < steps


@pytest.mark.slow
def test_cuba_spike_for_spike_then_statistics():
  """The example (float32) and NEST (float64) agree spike for spike until
  rounding first puts a neuron on the other side of the threshold (step
  403 here, after 273 spikes), then in their statistics."""
  _nest()
  duration = 1000.0
  a = _ei.brainshard_run("cuba", N, delay=2, exchange="delay")[1](duration)
  b = _nest_cuba.nest_run("cuba", N, delay_steps=2, threads=1)[1](duration)
  assert a[:400].sum() > 250
  assert _first_difference(a, b) >= 400
  sa, sb = _ei.stats(a, 0.1), _ei.stats(b, 0.1)
  assert 3.0 <= sa["rate_hz"] <= 10.0
  assert sb["rate_hz"] == pytest.approx(sa["rate_hz"], rel=0.1)
  assert sb["isi_cv"] == pytest.approx(sa["isi_cv"], abs=0.1)
  assert sb["active"] == pytest.approx(sa["active"], abs=0.05)


@pytest.mark.slow
def test_coba_statistics():
  """COBA maps onto iaf_cond_exp, but NEST integrates it with adaptive
  RKF45 and the example with exponential Euler (conductances held over a
  step): no spike-for-spike agreement, statistics only."""
  _nest()
  duration = 500.0
  a = _ei.brainshard_run("coba", N, delay=2, exchange="delay")[1](duration)
  b = _nest_cuba.nest_run("coba", N, delay_steps=2, threads=1)[1](duration)
  sa, sb = _ei.stats(a, 0.1), _ei.stats(b, 0.1)
  assert 10.0 <= sa["rate_hz"] <= 35.0
  assert sb["rate_hz"] == pytest.approx(sa["rate_hz"], rel=0.2)
  assert sb["isi_cv"] == pytest.approx(sa["isi_cv"], abs=0.15)
  assert not math.isnan(sb["isi_cv"])


@pytest.mark.slow
def test_twin_gives_the_examples_spikes():
  """The pure-JAX twin timed beside brainshard runs the same program: the
  example's spikes, step for step, across chunk boundaries."""
  ours = _ei.brainshard_run("cuba", 400, delay=2, exchange="delay")[1](80.0)
  _, twin = _ei.pure_block_run("cuba", 400, delay=2, chunk_steps=40)
  raster = np.concatenate([twin(20.0), twin(40.0)])
  assert ours[:600].sum() > 50 and ours[600:].sum() > 0
  np.testing.assert_array_equal(raster, ours[:600])
  assert twin(20.0, raster=False) == ours[600:].sum()


def test_table_medians_and_ratios():
  """The table gives each figure's median over the runs and the ratios of
  brainshard's medians to each other column's; a failed implementation, a
  NEST that cannot build the network and a skipped section say so."""
  keys = [k for k, _, _ in _nest_report.FIGURES]
  run = lambda x: {k: x * (i + 1) for i, k in enumerate(keys)}  # noqa: E731
  runs = {"brainshard": [run(1.0), run(3.0), run(2.0)],
          "twin": [run(4.0), run(4.0)],
          "nest-1": [dict(impl="nest", error="boom")],
          "nest-2": [dict(impl="nest", skipped="too many")]}
  case = dict(label="CUBA x", workload="cuba", runs=runs, loads=[1.0, 3.0])
  skipped = dict(label="microcircuit y", workload="microcircuit",
                 skip="no model")
  table = _nest_report.render([case, skipped], "header")
  rows = {r.split("|")[2].strip(): [c.strip() for c in r.split("|")[3:-1]]
          for r in table.splitlines() if r.startswith("|")}
  assert rows["brainshard"][2] == "6.000" and rows["brainshard"][-1] == "3"
  assert rows["pure-JAX twin"][2] == "12.000"
  assert rows["brainshard / pure-JAX twin"][:6] == ["0.50"] * 6
  assert "NEST 1 thread: failed: boom" in rows
  assert "NEST 2 threads: not run: too many" in rows
  assert "skipped: no model" in rows
  assert not [r for r in rows if r.startswith("brainshard / NEST")]
  assert "- CUBA x: ?, load 1.0-3.0 (median 2.0)" in table


def test_sections_of_earlier_runs_are_kept():
  old = [dict(label="CUBA a", workload="cuba", runs={}),
         dict(label="Brunel b", workload="brunel", runs={})]
  new = [dict(label="CUBA a", workload="cuba", runs={"x": []})]
  merged = _nest_report.merge(old, new)
  assert [s["label"] for s in merged] == ["Brunel b", "CUBA a"]
  assert merged[1]["runs"] == {"x": []}


def test_columns_per_nest_thread_count_and_nests_limit():
  """NEST runs once per thread count; the full microcircuit's 299 M
  synapses exceed what NEST 3.10 builds with fewer than 3 threads."""
  args = bench_nest.parse(["--only", "microcircuit,brunel", "--scales",
                           "0.1,1.0", "--brunel-scales", "1.0",
                           "--nest-threads", "1,2,3"])
  brunel, small, full = bench_nest.cases(args)
  if "nest" not in args.impls:
    pytest.skip("nest not installed: no NEST columns")
  assert [s["column"] for s in brunel["specs"]] == [
      "brainshard", "twin", "nest-1", "nest-2", "nest-3"]
  assert "15.6 M synapses" in brunel["label"]
  assert not any(s.get("skipped") for s in small["specs"])
  why = {s["column"]: s.get("skipped") for s in full["specs"]}
  assert "need >= 3 threads" in why["nest-2"] and why["nest-3"] is None
  quick = bench_nest.parse(["--quick"])
  assert (quick.brunel_scales, quick.scales, quick.sizes) == (
      [0.1], [0.1], [4000])
  assert quick.repeats == 1 and quick.brunel_duration == 0.1


CHILDREN = {"brunel": dict(scale=0.02, regime="AI"),
            "microcircuit": dict(scale=0.01, k_scale=0.1)}
# Brunel's three children, and the microcircuit's NEST child (the committed
# reference's nest_reference.run_nest). CUBA's three run in
# test_cli_times_each_in_its_own_process; the microcircuit's example and
# twin in tests/test_microcircuit*.py.
CHILD_RUNS = [("brunel", "brainshard"), ("brunel", "twin"),
              ("brunel", "nest"), ("microcircuit", "nest")]


@pytest.mark.slow  # a process each: JAX's import, a build and a compile
@pytest.mark.parametrize("workload, impl", CHILD_RUNS)
def test_each_child_reports_the_fields(workload, impl):
  """At a tiny size, every child runs and reports every figure."""
  spec = dict(CHILDREN[workload], workload=workload, impl=impl,
              duration_ms=20.0, warmup_ms=10.0, threads=1)
  if impl == "nest":
    _nest()
  r = _nest_children.in_child(spec)
  assert "error" not in r, r.get("stderr")
  for key, _, _ in _nest_report.FIGURES:
    assert r[key] is not None and r[key] > 0, key
  assert r["child_cpu_s"] > 0 and r["first_spike_s"] < r["child_wall_s"]
  assert r["jax_imported"] == (impl != "nest")
  if workload == "brunel":  # fixed in-degrees: the same count
    assert r["n_synapses"] == 250 * 25


@pytest.mark.slow  # ~10 s: a network built and run twice
def test_brunel_twin_gives_the_networks_spikes():
  """The twin of bm.Network does the network's work: the same spikes,
  across chunks and exchange intervals of 5 steps."""
  from benchmarks import _nest_brunel, _network_twin
  net, sr, _ = _nest_brunel.network(dict(scale=0.02, warmup_ms=100.0))
  twin = _network_twin.Twin(_nest_brunel.twin_arrays(net, sr), 20)
  net.runner.chunk = 20
  assert net.exchange_every == 5
  for ms in (100.0, 50.0):
    net.simulate(ms)
  events = [twin.run(100.0), twin.run(50.0)]
  want = sr.spikes
  assert len(want.steps) > 1000
  np.testing.assert_array_equal(np.concatenate([e[0] for e in events]),
                                np.asarray(want.steps))
  np.testing.assert_array_equal(np.concatenate([e[1] for e in events]),
                                np.asarray(want.neurons))


@pytest.mark.slow  # ~10 s: six programs compiled
def test_profile_parts_add_up_to_the_last_variant():
  p = _nest_profile.profile("brunel", 0.02, warmup_ms=10.0, window_ms=5.0,
                            repeats=1)
  parts = p["parts"]
  assert [k for k, _ in _nest_report.PART_NAMES] == list(parts)[:-1]
  total = sum(parts[k]["cpu_us"] for k, _ in _nest_report.PART_NAMES)
  assert total == pytest.approx(parts["total"]["cpu_us"])
  assert p["real"]["cpu_us"] > 0 and p["spikes"] > 0 and p["steps"] == 50
  text = _nest_report.render_profile([p, dict(label="x", error="boom")])
  assert "| neuron update |" in text and "**x**: failed: boom" in text


@pytest.mark.slow
def test_cli_times_each_in_its_own_process(monkeypatch, tmp_path):
  _nest()
  monkeypatch.setattr(bench_nest, "RESULTS", tmp_path)
  out = bench_nest.main(["--only", "cuba", "--sizes", "400", "--duration",
                         "0.02", "--warmup", "10", "--repeats", "1",
                         "--nest-threads", "1"])
  (section,) = out["sections"]
  runs = section["runs"]
  assert sorted(runs) == ["brainshard", "nest-1", "twin"]
  nest, ours, twin = runs["nest-1"][0], runs["brainshard"][0], runs["twin"][0]
  assert not nest["jax_imported"] and ours["jax_imported"]
  for row in (nest, ours, twin):
    assert row["build_s"] > 0 and row["s_per_sim_s"] > 0
    assert row["child_cpu_s"] >= row["cpu_s_per_sim_s"] * 0.02 > 0
    assert row["peak_rss_mb"] > 0 and row["rate_hz"] > 0
  assert ours["rate_hz"] == twin["rate_hz"]  # the same spikes
  assert "brainshard / NEST 1 thread" in (tmp_path / "nest.md").read_text()


def test_render_writes_the_stored_results_and_runs_nothing(monkeypatch,
                                                           tmp_path):
  import json
  monkeypatch.setattr(bench_nest, "RESULTS", tmp_path)
  monkeypatch.setattr(_nest_report, "_nest_version", lambda: "3.x")
  monkeypatch.setattr(bench_nest, "run_case", None)  # nothing runs
  run = dict(build_s=1.0, s_per_sim_s=2.0, cpu_s_per_sim_s=2.0)
  (tmp_path / "nest.json").write_text(json.dumps([dict(
      label="Brunel A (AI), scale 1: x", workload="brunel", size=1.0,
      loads=[2.0], runs={"brainshard": [run], "nest-1": [dict(
          run, cpu_s_per_sim_s=20.0)]})]))
  cost = dict(cpu_us=1.0, wall_us=1.0)
  parts = {k: cost for k, _ in _nest_report.PART_NAMES}
  (tmp_path / "nest_profile.json").write_text(json.dumps([dict(
      label="P", steps=10, repeats=1, loads=[1.0], real=cost,
      parts=dict(parts, total=dict(cpu_us=5.0, wall_us=5.0)))]))
  out = bench_nest.main(["--render"])
  assert "| Brunel A, CPU s / sim. s vs NEST 1 thread | 0.10 | <= 0.08 | no |" \
      in out["table"]
  assert "| neuron update | 1.0 | 20% | 1.0 |" in out["profile"]
  assert (tmp_path / "nest.md").exists() and not out["sections"]
