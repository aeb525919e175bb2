"""The timings the training and ensemble guides quote, as workloads of
``python -m benchmarks`` (``--only autodiff,vmap``), so docs/training.md and
docs/ensemble.md point at generated figures instead of typing them.

``autodiff`` runs ``benchmarks.bench_autodiff`` (a training step with optax
at N = 10 and 100 weight States, BPTT over 1000 steps) and ``vmap`` runs
``benchmarks.bench_vmap`` (an ensemble of 64 LIF networks, one step and a
100-step loop per call), in this process, brainstate beside where installed.
Each figure is a ratio to hand-written pure JAX, timed interleaved.
"""

from __future__ import annotations

import contextlib
import io

TITLES = {
    "autodiff": ("## 8. Training: `bs.value_and_grad` + optax, and BPTT",
                 "`benchmarks/bench_autodiff.py`: one Adam step of an N-layer "
                 "tanh network whose weights are `ParamState`s and whose optax "
                 "state is a `State` (`train-N`; beside: pure JAX donating the "
                 "same buffers, and the optax state passed as an argument), and "
                 "`bs.value_and_grad` through a 1000-step `bs.for_loop` of 256 "
                 "LIF neurons (`bptt-1000`), against `jax.jit(jax.value_and_grad)` "
                 "with the arrays as arguments (`pure`). Guide: "
                 "[training](training.md)."),
    "vmap": ("## 9. Ensembles: `bs.vmap`",
             "`benchmarks/bench_vmap.py`: B = 64 LIF networks of n = 256 sharing "
             "one coupling matrix; `step` is one `bs.jit(bs.vmap(step))` call, "
             "`loop` a `bs.jit(bs.for_loop(bs.vmap(step)))` of 100 steps, "
             "against `jax.jit(jax.vmap(pure_step))` and `lax.scan` (`pure`). "
             "Guide: [ensembles](ensemble.md)."),
}


def _quiet(main, argv) -> dict:
  with contextlib.redirect_stdout(io.StringIO()):
    return main(argv)


def _rows(workload: str, data: dict) -> list[dict]:
  rows = []
  for case, impls in data.items():
    if not isinstance(impls, dict) or "pure" not in impls:
      continue  # run parameters, HLO statistics
    for impl, t in impls.items():
      if "per_call_s" not in t:  # e.g. bench_vmap's HLO statistics
        continue
      rows.append(dict(workload=workload, case=case, impl=impl,
                       baseline="pure", x=None, **t))
  return rows


def w_autodiff(ctx) -> list[dict]:
  from benchmarks import bench_autodiff
  repeats = 5 if ctx.quick else 15
  return _rows("autodiff", _quiet(bench_autodiff.main,
                                  ["--repeats", str(repeats)]))


def w_vmap(ctx) -> list[dict]:
  from benchmarks import bench_vmap
  repeats = 5 if ctx.quick else 15
  return _rows("vmap", _quiet(bench_vmap.main, ["--repeats", str(repeats)]))


def render_guides(results: list[dict]) -> list[str]:
  lines: list[str] = []
  for workload, (title, intro) in TITLES.items():
    rows = [r for r in results
            if r["workload"] == workload and "per_call_s" in r]
    if not rows:
      continue
    lines += [title, "", intro, "",
              "| case | implementation | ratio [IQR] | ratio of best times | time per call |",
              "| --- | --- | --- | --- | --- |"]
    for r in rows:
      iqr = (f" [{r['ratio_lo']:.2f}-{r['ratio_hi']:.2f}]"
             if "ratio_lo" in r else "")
      t = r["per_call_s"]
      per = f"{t * 1e3:.3f} ms" if t < 1 else f"{t:.2f} s"
      lines.append(f"| {r['case']} | {r['impl']} | {r['ratio']:.2f}{iqr} | "
                   f"{r['ratio_best']:.2f} | {per} |")
    lines += [""]
  return lines
