"""What a ``bs.jit`` call's own Python costs, apart from JAX's.

The generated call (``brainshard/_core/program/fastcall.py``) of a step over N small
States is made again with the compiled program replaced by a Python stand-in
that returns the same list, and timed against the pure loop's line
(``box[0] = f(box[0])``) calling the same stand-in: what is left is
brainshard's Python per call, called directly and through the object's type
(as a user calls it). ANALYSIS.md's ninth and tenth passes quote these
figures. They are a floor: in a real loop the same code runs right after
JAX's dispatch, with colder caches (N=10: +0.43-0.52 µs there, +0.36-0.40
here).

``--spread`` times three identical pure ``jax.jit`` loops in one process
instead: how far apart two loops doing the same work read (ANALYSIS.md,
tenth pass).

Usage:  python -m benchmarks python-cost [N ...] [--spread]
"""

from __future__ import annotations

import itertools
import statistics
from typing import Callable

import jax.numpy as jnp

import brainshard as bs
from benchmarks import _models as M
from benchmarks._harness import Case, batch, parser
from brainshard._core.program import fastcall, held


def _batch_ns(fun: Callable[[], object], calls: int) -> float:
  """ns per call of one batch, timed as the suite times its cases."""
  return batch(Case(fun), calls) / calls * 1e9


def python_cost(n: int, calls: int = 20_000, batches: int = 15) -> dict:
  """``{"pure": ns, "entry": ns more, "object": ns more}`` for one call of
  an N-State step with the compiled program stood in for (best of
  ``batches`` interleaved batches of ``calls`` calls)."""
  states, step = M.dispatch_step(n)
  jitted = bs.jit(step)
  jitted()
  jitted()  # the steady state: this program's results in the slots
  core = jitted._core
  program = core.program
  real = program.j_all
  # The same list back, in the form the generated call passes the values;
  # each stand-in counts its calls (so does the pure line's: the same cost).
  stood_in, pure_calls = itertools.count(), itertools.count()

  def packed(vals):
    next(stood_in)
    return list(vals)

  def positional(*vals):
    next(stood_in)
    return list(vals)

  program.j_all = packed if program.packed else positional
  try:
    entry = fastcall.make_entry(program)
  finally:
    program.j_all = real
  # Arrays of its own: reading the States' would lend them (donation.py),
  # and the call would then test each one and pick a kept variant.
  box = [[jnp.zeros(4, jnp.float32) for _ in range(n)]]

  def same(vals):
    next(pure_calls)
    return list(vals)

  def pure_line():
    box[0] = same(box[0])

  core.on_entry(entry)  # what calling `jitted` runs, for the object's row
  try:
    cases = {"pure": pure_line, "entry": entry, "object": jitted}
    for fun in cases.values():
      for _ in range(1000):
        fun()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(batches):
      for name, fun in cases.items():
        times[name].append(_batch_ns(fun, calls))
  finally:
    held.flush_unheld()  # the stand-in returned the States' own arrays
    core.on_entry(core.entry)
  if next(stood_in) != next(pure_calls) * 2:  # (entry and object rows)
    raise RuntimeError(
        f"N={n}: some calls left the stood-in program (a kept variant or "
        "the generic path ran JAX): the figures would include JAX's cost.")
  pure = min(times["pure"])
  return {"pure": pure, "entry": min(times["entry"]) - pure,
          "object": min(times["object"]) - pure}


def spread(n: int, copies: int = 3, calls: int = 10_000,
           batches: int = 16) -> list[float]:
  """Median ratios of ``copies`` identical pure loops (each its own
  ``jax.jit`` and arrays) to the first, timed interleaved and rotated."""
  runs = [M.dispatch_pure(n)[0] for _ in range(copies)]
  for run in runs:
    for _ in range(10):
      run()
  times: list[list[float]] = [[] for _ in runs]
  for b in range(batches):
    for i in [(b + k) % copies for k in range(copies)]:
      times[i].append(_batch_ns(runs[i], calls))
  return [statistics.median(t / f for t, f in zip(ts, times[0]))
          for ts in times]


def main(argv: list[str] | None = None) -> None:
  ap = parser(__doc__)
  ap.add_argument("sizes", nargs="*", type=int, default=[1, 10, 30, 100])
  ap.add_argument("--spread", action="store_true",
                  help="three identical pure loops instead")
  args = ap.parse_args(argv)
  for n in args.sizes:
    if args.spread:
      print(f"N={n:<5} identical pure loops against the first: "
            + ", ".join(f"{r:.3f}" for r in spread(n)))
    else:
      r = python_cost(n)
      print(f"N={n:<5} pure line {r['pure']:.0f} ns; the generated call "
            f"+{r['entry']:.0f} ns, through the object +{r['object']:.0f} ns")
