"""The one harness every benchmark measures with:

- :mod:`.timing`: interleaved comparisons (:func:`compare`,
  :func:`compare_once`) and :class:`clock`, the wall and CPU clock of every
  other timing;
- :mod:`.memory`: resident memory from the kernel's accounting
  (:func:`peak_rss_mib`, never ``getrusage``'s peak);
- :mod:`.devices`: faked CPU devices for this process or a child
  (:func:`fake_devices`, :func:`device_env`);
- :mod:`.options`: the parser every command starts from (:func:`parser`).

Commands are ``bench_*.py`` (``python -m benchmarks COMMAND``), helpers
``_*.py``; a number printed or written by a benchmark is measured here.
"""

from benchmarks._harness.devices import device_env, fake_devices, with_devices
from benchmarks._harness.memory import peak_rss_mib, reset_peak, rss_mib
from benchmarks._harness.options import parser, write_json
from benchmarks._harness.timing import (Case, Timing, against, batch, clock,
                                        compare, compare_once, once, release)

__all__ = ["Case", "Timing", "against", "batch", "clock", "compare",
           "compare_once", "device_env", "fake_devices", "once", "parser",
           "peak_rss_mib", "release", "reset_peak", "rss_mib", "with_devices",
           "write_json"]
