"""Old names of the E/I kernels, now in the library (``bs.models``).

Kept only for the peers that still import them (``benchmarks/bench_nest.py``,
``benchmarks/bench_brian2.py``); new code calls :mod:`brainshard.models`.

Example:
  >>> from examples.cuba import kernels
  >>> from brainshard import models as bm
  >>> kernels.deliver_events is bm.deliver_counts
  True
"""

from brainshard.models import (  # noqa: F401
    csr_from_table, deliver_counts as deliver_events,
    hashed_presynaptic as presynaptic, pull_counts as deliver_pull)
