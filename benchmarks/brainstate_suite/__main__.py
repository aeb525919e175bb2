"""Print brainstate 0.5.4's test pass counts under brainshard.

Usage: ``python -m benchmarks.brainstate_suite [AREA ...] [--download]
[--failures] [--run-slow]``.
"""

import sys

from benchmarks._harness import parser
from benchmarks.brainstate_suite import locate, run


def main(argv=None):
  ap = parser(__doc__, prog="python -m benchmarks.brainstate_suite")
  ap.add_argument("areas", nargs="*", choices=[[]] + list(run.AREAS),
                  help="areas to run (default: all)")
  ap.add_argument("--download", action="store_true",
                  help="pip download brainstate 0.5.4 if not installed")
  ap.add_argument("--failures", action="store_true",
                  help="list the failing tests and the deselected ones")
  ap.add_argument("--run-slow", action="store_true")
  args = ap.parse_args(argv)
  package = locate.find(download=args.download)
  if package is None:
    sys.exit("brainstate 0.5.4's tests not found (try --download)")
  counts = {}
  for area in args.areas or run.AREAS:
    counts[area] = run.run_area(package, run.AREAS[area],
                                run_slow=args.run_slow)
    if args.failures:
      c = counts[area]
      print(f"## {area}")
      for tid, why in c.failed.items():
        print("  FAIL", tid, "--", why)
      for tid, why in c.deselected.items():
        print("  SKIP", tid, "--", why)
  print(run.table(counts))


if __name__ == "__main__":
  main()
