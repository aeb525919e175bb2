"""``python -m examples.cuba``: see :mod:`examples.cuba.cli`."""

from examples.cuba.cli import main

main()
