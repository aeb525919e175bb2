"""One command line for every benchmark: ``python -m benchmarks COMMAND
[options]`` from the repository root; ``python -m benchmarks COMMAND
--help`` lists a command's options. Without a command (options first, or
nothing) it runs ``suite``, the goal suite of docs/benchmarks.md.

:data:`COMMANDS` is the table: a command is a module with ``main(argv)``,
so adding a benchmark is one entry. benchmarks/README.md maps each command
and module to the figure or table it produces.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module with main(argv), what it measures and where that goes)
COMMANDS = {
    "suite": ("benchmarks.run", "the goal suite: every figure of "
              "docs/benchmarks.md (--quick, --only W1,W2, --docs)"),
    "scale": ("benchmarks.bench_scale", "CUBA/COBA at 4,000 to 4M neurons "
              "against pure JAX, brainstate and Brian2 (docs/scale.md; --gpu)"),
    "brian2": ("benchmarks.bench_brian2", "the CUBA/COBA example's spike "
               "statistics and speed against Brian2 (docs/scale.md)"),
    "nest": ("benchmarks.bench_nest", "CUBA (4k-400k) and the microcircuit: "
             "brainshard vs its pure-JAX twin vs NEST 3, build, speed, CPU, "
             "memory (docs/nest.md; --docs)"),
    "brunel-nest": ("benchmarks.bench_brunel_nest", "NEST's rates and CVs "
                    "of Brunel's model A over seeds, the reference of "
                    "tests/test_brunel.py (examples/brunel/nest_reference."
                    "json); --speed: the example against NEST"),
    "connectivity": ("benchmarks.bench_connectivity", "bs.models.connect: "
                     "build time and peak memory against the index's bytes "
                     "(docs/models.md)"),
    "delivery": ("benchmarks.bench_delivery", "delivery alone: CPU ns per "
                 "synaptic event of bm.deliver's kernels (Brunel, the "
                 "microcircuit) beside this machine's limit "
                 "(docs/models_delivery.md)"),
    "random": ("benchmarks.bench_random", "bs.random inside and outside "
               "bs.shard_map against the draws it replaced and jax.random "
               "(docs/simulation.md)"),
    "brainstate-suite": ("benchmarks.brainstate_suite.__main__", "brainstate "
                         "0.5.4's own tests mapped onto brainshard "
                         "(docs/migrating-from-brainstate.md)"),
    "runner": ("benchmarks.bench_runner", "a monitored bs.Runner against one "
               "bs.jit(bs.for_loop) (docs/runner.md)"),
    "record": ("benchmarks.bench_record", "the microcircuit recorded to disk "
               "with bs.Runner(record_to=...): RSS over simulated time, time "
               "against recording in memory (docs/runner.md)"),
    "for-loop": ("benchmarks.bench_for_loop", "bs.for_loop against "
                 "jax.lax.scan (docs/simulation.md)"),
    "autodiff": ("benchmarks.bench_autodiff", "a training step and BPTT with "
                 "bs.value_and_grad (docs/training.md; in the suite)"),
    "vmap": ("benchmarks.bench_vmap", "an ensemble with bs.vmap "
             "(docs/ensemble.md; in the suite)"),
    "checkpoint": ("benchmarks.bench_checkpoint", "bs.save_states / "
                   "restore_states against orbax direct (printed)"),
    "task": ("benchmarks.bench_task", "two areas as sub-mesh tasks against "
             "one SPMD program (docs/submesh.md)"),
    "plasticity": ("benchmarks.bench_plasticity", "an STDP network's step "
                   "against the same network with static synapses "
                   "(docs/plasticity.md)"),
    "dispatch-probe": ("benchmarks.bench_dispatch_probe", "which path "
                       "bs.jit calls take on this platform (a diagnostic)"),
    "python-cost": ("benchmarks.bench_python_cost", "a bs.jit call's own "
                    "Python per call, JAX stood in for (ANALYSIS.md)"),
    "instructions": ("benchmarks.bench_instructions", "machine instructions "
                     "per dispatch call, bs.jit against pure JAX, counted by "
                     "valgrind (ANALYSIS.md)"),
}
DEFAULT = "suite"


def usage() -> str:
  width = max(map(len, COMMANDS))
  rows = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
  return "\n".join([
      "usage: python -m benchmarks [COMMAND] [options]", "",
      "commands (python -m benchmarks COMMAND --help for its options):",
      *rows, "",
      f"Without a command: {DEFAULT} (python -m benchmarks --quick, ...)."])


def resolve(argv: list[str]) -> tuple[str, list[str]]:
  """The command ``argv`` names and the arguments it gets."""
  if argv and argv[0] in COMMANDS:
    return argv[0], argv[1:]
  if {"--scale", "--gpu"} & set(argv):  # the older spelling of `scale`
    return "scale", argv
  return DEFAULT, argv


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv in (["-h"], ["--help"], ["help"]):
    print(usage())
    return 0
  name, rest = resolve(argv)
  # argparse names the program after argv[0]: the command as typed.
  prog, sys.argv[0] = sys.argv[0], f"python -m benchmarks {name}"
  try:
    result = importlib.import_module(COMMANDS[name][0]).main(rest)
  finally:
    sys.argv[0] = prog
  return result if isinstance(result, int) else 0
