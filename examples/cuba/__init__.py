"""The CUBA / COBA benchmark network, sharded over devices with brainshard.

The network of Vogels & Abbott (2005) as specified for Benchmarks 1 and 2 of
the simulator review of Brette et al. (2007): 4000 leaky integrate-and-fire
neurons (by default), 80% excitatory, each receiving 80 inputs (2%), 5 ms refractory period, dt = 0.1 ms, no external input (the
activity is self-sustained from random initial potentials).

- CUBA (Benchmark 2): current-based exponential synapses,
  ``dv/dt = (ge + gi - (v - El)) / taum``, El = -49 mV, taum = 20 ms,
  taue = 5 ms, taui = 10 ms, Vt = -50 mV, Vr = -60 mV,
  we = 60 * 0.27 / 10 = 1.62 mV, wi = -20 * 4.5 / 10 = -9 mV,
  v(0) uniform in [Vr, Vt]. Parameters as in Brian 2's "CUBA" example
  (https://brian2.readthedocs.io/en/stable/examples/CUBA.html) and PyNN's
  ``VAbenchmarks.py``; subthreshold dynamics integrated exactly.
- COBA (Benchmark 1): conductance-based synapses,
  ``dv/dt = (El - v + ge (Ee - v) + gi (Ei - v) + I) / taum`` with
  El = -60 mV, Ee = 0 mV, Ei = -80 mV, ge/gi in units of the leak
  conductance, we = 0.6, wi = 6.7; v(0) ~ N(-55, 5) mV, ge(0) ~ N(4, 1.5),
  gi(0) ~ N(20, 12) as in Brette's Brian script for the review. Without
  input that activity dies out within ~30 ms, so, like the ANNarchy and
  BrainPy versions of this benchmark, a constant drive I = 20 mV keeps the
  network active; exponential-Euler integration.

Reference firing rates: the review gives no single number for the mean
rate; executed reference implementations report a mean rate of about 5.6 Hz
for CUBA and about 20 Hz for COBA over 1 s (ANNarchy's "COBA and CUBA
networks" notebook, https://annarchy.github.io/notebooks/COBA.html). The
mean rate depends on the random connectivity and initial conditions (the
network is chaotic), so :data:`RATE_RANGE` accepts 3-10 Hz for CUBA and
10-35 Hz for COBA around those references.

How it is sharded: the neuron state is split over the mesh axis ``'x'``
(``P('x')``). Connectivity has a fixed in-degree (``--in-degree K``, 80 =
2% of the original 4000; weights scale with 80 / K so the rate stays in range
at any ``--neurons N``), drawn from a hash of (seed, neuron, slot) by
the library's integer-count kernels (``bs.models.hashed_presynaptic``,
``deliver_counts``, ``pull_counts``: one weight per receptor, applied in
the neuron update): either stored per shard as a push index built in place by
``bs.sharded_init`` (delivery visits only the neurons that fired) or
regenerated every step (``--connectivity onthefly``, nothing in memory).
Spikes are all-gathered every step, or every ``--delay D`` steps (the
min-delay rule: ``--exchange delay``). Initial conditions and connectivity
are global functions of the seed and inputs are counted as integers, so the
same seed gives bit-identical spikes on any number of devices and with
either connectivity or exchange. See docs/scale.md.

The package, one idea per module: :mod:`~examples.cuba.params` (parameters,
the neuron update, the mean rate), :mod:`~examples.cuba.network`
(the States and how to run them), :mod:`~examples.cuba.step` (what a shard
computes per step), :mod:`~examples.cuba.plots` and :mod:`~examples.cuba.cli`.

Usage, from the repository root (``--duration`` in seconds; a bare
``--plot`` file name goes into ``results/``):
  python -m examples.cuba --devices 8 --duration 1.0 --plot raster.png
  python -m examples.cuba --neurons 400000 --connectivity onthefly
  python -m examples.cuba --devices 8 --delay 10
  python -m examples.cuba --model coba --devices 4
"""

from examples.cuba.params import (
    RATE_RANGE, Params, mean_rate, neuron_update, valid_device_counts)

# The network, plots and CLI import JAX and brainshard; a peer that only
# needs the parameters (NEST's process in benchmarks/_nest_children.py) must not.
_LAZY = {"EINetwork": "network", "save_figure": "plots",
         "save_raster": "plots", "main": "cli"}


def __getattr__(name):
  if name in _LAZY:
    import importlib
    return getattr(importlib.import_module(f"examples.cuba.{_LAZY[name]}"), name)
  raise AttributeError(f"module 'examples.cuba' has no attribute {name!r}")

__all__ = ["RATE_RANGE", "Params", "EINetwork", "main", "mean_rate",
           "neuron_update", "save_figure", "save_raster",
           "valid_device_counts"]
