"""``python -m benchmarks [COMMAND] [options]``: see benchmarks/cli.py."""

from benchmarks.cli import main

raise SystemExit(main())
