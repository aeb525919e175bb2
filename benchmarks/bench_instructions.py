"""Machine instructions per call of a ``bs.jit`` step and of the pure loop,
counted by valgrind: a measure that the machine's load does not move.

On a shared machine two identical loops read 2-4% apart from one process to
the next (ANALYSIS.md, tenth pass), the size of the dispatch goals' margins.
The number of instructions a call executes does not depend on the load: with
``PYTHONHASHSEED`` fixed, two runs of a case agree within ~0.1%. It is not a
time (a cache miss or a mispredicted branch costs more than an instruction;
``--caches`` adds callgrind's simulated L1 misses and mispredictions), but a
change that removes instructions and misses from the call does not make it
slower, and this shows such a change where the wall clock cannot.

Each case runs in a process of its own under ``valgrind --tool=callgrind``,
which counts only inside the timed loop: the loop is ``any(map(call,
range(K)))`` and callgrind collects only within the builtin ``any``. A loop
calling nothing is counted too and taken off, so a figure is one call of the
case: for the pure loop, ``box[0] = f(box[0])`` and JAX's dispatch; for
``bs.jit``, the call through the object's type, its generated Python and the
same dispatch. The cases are the suite's dispatch cases (``_dispatch.py``).

Usage:  python -m benchmarks instructions [N ...] [--calls K] [--caches]
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

from benchmarks._harness import device_env, parser

# The suite's dispatch cases, by short name: (its row in the suite, the row
# it is compared with).
CASES = {"pure": "jax.jit(donate_argnums)", "bs": "brainshard",
         "pure-kept": "jax.jit(donate_argnums, one kept)",
         "bs-kept": "brainshard (a reference kept)"}
BASELINE = {"bs": "pure", "bs-kept": "pure-kept"}
_EVENTS_CACHES = ("Ir", "D1mr", "D1mw", "I1mr", "Bcm", "Bim")


def _child(case: str, n: int, calls: int) -> None:
  """The timed loop of one case, as valgrind runs it (``--child``)."""
  import gc

  import jax

  import brainshard as bs
  from benchmarks import _dispatch, _models as M
  if case == "empty":
    run, sync = (lambda: None), (lambda: 0)
  elif case.startswith("pure"):
    run, sync = (M.dispatch_pure_kept if case == "pure-kept"
                 else M.dispatch_pure)(n)
  elif case == "bs-kept":
    case_ = _dispatch.kept_case(n)
    run, sync = case_.run, case_.sync
  else:
    states, step = M.dispatch_step(n)
    run, sync = bs.jit(step), (lambda: states[0].value)
  for _ in range(50):  # compiled, and the steady state reached
    run()
  jax.block_until_ready(sync())
  gc.disable()  # as the suite's batches
  any(map(lambda _: run(), range(calls)))  # counted: inside `any` only
  jax.block_until_ready(sync())


def count(case: str, n: int, calls: int, caches: bool = False) -> dict:
  """``{event: count}`` over ``calls`` calls of one case, in a valgrind
  child (events: instructions ``Ir``, and with ``caches`` the simulated
  misses and mispredictions of ``_EVENTS_CACHES``)."""
  valgrind = shutil.which("valgrind")
  if valgrind is None:
    raise RuntimeError(
        "python -m benchmarks instructions needs valgrind on PATH "
        "(apt install valgrind); it counts instructions with callgrind")
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "callgrind.out")
    cmd = [valgrind, "--tool=callgrind", "--collect-atstart=no",
           "--toggle-collect=builtin_any", f"--callgrind-out-file={out}"]
    if caches:
      cmd += ["--cache-sim=yes", "--branch-sim=yes"]
    cmd += [sys.executable, "-m", "benchmarks.bench_instructions", "--child",
            case, str(n), str(calls)]
    # A fixed hash seed: dict and set layouts, and so the counts, repeat.
    # Eight faked devices, as in the suite (run.py).
    env = device_env(8, dict(os.environ, PYTHONHASHSEED="0",
                             OPENBLAS_NUM_THREADS="1"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
      raise RuntimeError(f"{case} N={n} under valgrind failed:\n"
                         f"{done.stderr[-3000:]}")
    return _summary(out)


def _summary(path: str) -> dict:
  """The event totals of a callgrind output file."""
  events = totals = None
  with open(path) as f:
    for line in f:
      if line.startswith("events:"):
        events = line.split()[1:]
      elif line.startswith(("summary:", "totals:")) and totals is None:
        totals = [int(x) for x in line.split()[1:]]
  if not events or not totals:
    raise RuntimeError(f"no totals in {path}")
  return dict(zip(events, totals))


def per_call(sizes: list[int], calls: int, caches: bool = False,
             workers: int = 2, cases: tuple[str, ...] = tuple(CASES)) -> dict:
  """``{(case, n): {event: per call}}`` for the cases at every size, each
  less the empty loop's count (two valgrind children at a time)."""
  jobs = [("empty", 1)] + [(c, n) for n in sizes for c in cases]
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    futures = {job: pool.submit(count, *job, calls, caches) for job in jobs}
    got = {job: f.result() for job, f in futures.items()}
  empty = got.pop(("empty", 1))
  return {job: {e: (v - empty[e]) / calls for e, v in counts.items()}
          for job, counts in got.items()}


def table(result: dict, sizes: list[int]) -> list[str]:
  events = [e for e in _EVENTS_CACHES if e in next(iter(result.values()))]
  head = "| N | case | " + " | ".join(f"{e} per call" for e in events)
  lines = [head + " | instructions vs its baseline |",
           "|---" * (len(events) + 3) + "|"]
  for n in sizes:
    for case, row in CASES.items():
      if (case, n) not in result:  # a case not counted (per_call's cases)
        continue
      counts = result[(case, n)]
      base = BASELINE.get(case)
      ratio = (f"{counts['Ir'] / result[(base, n)]['Ir']:.4f}" if base
               else "")
      lines.append(f"| {n} | {row} | " + " | ".join(
          f"{counts[e]:,.0f}" for e in events) + f" | {ratio} |")
  return lines


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv[:1] == ["--child"]:
    _child(argv[1], int(argv[2]), int(argv[3]))
    return 0
  ap = parser(__doc__)
  ap.add_argument("sizes", nargs="*", type=int, default=[1, 10, 100],
                  help="numbers of States (default: 1 10 100)")
  ap.add_argument("--calls", type=int, default=2000,
                  help="calls counted per case (default: 2000)")
  ap.add_argument("--caches", action="store_true",
                  help="also simulated L1 misses and mispredictions")
  args = ap.parse_args(argv)
  result = per_call(args.sizes, args.calls, args.caches)
  print("\n".join(table(result, args.sizes)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
