"""``python -m benchmarks``: see benchmarks/run.py; ``--scale`` / ``--gpu``:
see benchmarks/bench_scale.py."""

import sys

if {"--scale", "--gpu"} & set(sys.argv[1:]):
  from benchmarks.bench_scale import main
else:
  from benchmarks.run import main

raise SystemExit(main())
