"""Which path do ``bs.jit`` calls take here? A diagnostic for new platforms.

``donate_states='auto'`` relies on exact reference counts (docs/donation.md).
If a JAX version or backend held an extra reference to a call's outputs, the
generated call would stop donating and dispatch would slow down without an
error. This probe calls a step of N small States many times and reports, per
N, how many calls left the generated fast path, which donation variants were
compiled and the reference count of a state's value against the calibrated
sole-owner count.

Usage:  python -m benchmarks dispatch-probe
"""

from __future__ import annotations

import sys

import jax

import brainshard as bs
from benchmarks import _models as M
from benchmarks._harness import parser
from brainshard._core import threads
from brainshard._core.program import donation, fastcall, program as _program


def probe(n: int, calls: int = 200, keep: bool = False) -> dict:
  """Counts generic-path calls over ``calls`` calls of an N-state step."""
  states, step = M.dispatch_step(n)
  jitted = bs.jit(step)
  for _ in range(3):
    jitted()
  generic = [0]
  original = _program.Program.call

  def counting(self, *args, **kwargs):
    generic[0] += 1
    return original(self, *args, **kwargs)

  _program.Program.call = counting
  try:
    # The generated call binds program.call when made: make it again.
    prog, core = jitted._core.program, jitted._core
    prog.entry = core.entry = fastcall.make_entry(prog)
    core.on_entry(core.entry)  # what calling `jitted` runs
    held = None
    for _ in range(calls):
      jitted()
      if keep:
        held = states[0].value
    jax.block_until_ready(states[0].value)
  finally:
    _program.Program.call = original
  del held
  value = states[0]._value
  return dict(n=n, keep=keep, generic_calls=generic[0], calls=calls,
              variants=[list(m) for m in jitted._core.program._jitted],
              refcount=sys.getrefcount(value) - 1, sole=donation.SOLE - 1)


def main(argv: list[str] | None = None) -> None:
  parser(__doc__).parse_args(argv)
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}, Python "
        f"{sys.version.split()[0]}; AUTO_SUPPORTED={donation.AUTO_SUPPORTED}; "
        f"GIL {threads.GIL_ENABLED}, this thread owns the slots "
        f"{threads.thread_frames.owner}, lock-free {threads.WINDOW.lockfree}")
  for keep in (False, True):
    for n in (1, 10, 100):
      r = probe(n, keep=keep)
      masks = sorted({"".join("D" if m else "-" for m in v)[:12]
                      for v in r["variants"]})
      print(f"  N={n:<4} keep a reference={keep!s:<5} generic-path calls "
            f"{r['generic_calls']}/{r['calls']}  refcount {r['refcount']} "
            f"(sole {r['sole']})  variants {masks}")
