"""Brunel's (2000) model A as NEST's ``brunel_delta_nest`` example builds
it, on ``bm.Network``: NEST's calls, one for one.

Example:
  >>> from examples.brunel.model import brunel
  >>> net, E, I, sr = brunel('AI', scale=0.02, seed=1)
  >>> len(E), len(I)
  (200, 50)
  >>> net.simulate(45.0)
  >>> sr.n_events > 0
  True
"""

from __future__ import annotations

# Brunel (2000) Fig. 8: (g, eta) of each regime.
REGIMES = {"SR": (3.0, 2.0), "SI-fast": (6.0, 4.0), "AI": (5.0, 2.0),
           "SI-slow": (4.5, 0.9)}
NEURON = {"C_m": 1.0, "tau_m": 20.0, "t_ref": 2.0, "E_L": 0.0,
          "V_reset": 0.0, "V_m": 0.0, "V_th": 20.0}   # NEST's example's


def add_brunel(net, regime: str = "AI", scale: float = 1.0, label: str = ""):
  """Adds one Brunel network to ``net`` (a ``bm.Network``, or anything with
  NEST's ``create`` and ``connect``); returns its populations ``(E, I)``:
  ``10000 * scale`` excitatory and ``2500 * scale`` inhibitory
  ``iaf_psc_delta`` neurons, each with 10 % of each population as inputs
  (``fixed_indegree``), J = 0.1 mV / scale: J * C_E stays the full
  network's, and so do the mean inputs and nu_th."""
  g, eta = REGIMES[regime]
  n_e, n_i = round(10_000 * scale), round(2_500 * scale)
  c_e, c_i = int(0.1 * n_e), int(0.1 * n_i)
  J = 0.1 / scale
  nu_th = NEURON["V_th"] / (J * c_e * NEURON["tau_m"])   # spikes per ms
  E = net.create("iaf_psc_delta", n_e, NEURON, label=f"E{label}")
  I = net.create("iaf_psc_delta", n_i, NEURON, label=f"I{label}")
  noise = net.create("poisson_generator", {"rate": 1000.0 * eta * nu_th * c_e})
  excitatory = {"weight": J, "delay": 1.5}
  inhibitory = {"weight": -g * J, "delay": 1.5}
  net.connect(noise, E + I, syn_spec=excitatory)
  net.connect(E, E + I, {"rule": "fixed_indegree", "indegree": c_e}, excitatory)
  net.connect(I, E + I, {"rule": "fixed_indegree", "indegree": c_i}, inhibitory)
  return E, I


def brunel(regime: str = "AI", scale: float = 1.0, *, seed: int = 1,
           dt: float = 0.1, **network):
  """``(net, E, I, spike_recorder)``: one Brunel network (``add_brunel``)
  recording every neuron's spikes. ``network`` goes to ``bm.Network``
  (``mesh``, ``record_to``, ...)."""
  from brainshard import models as bm   # add_brunel alone runs in NEST too
  net = bm.Network(dt=dt, seed=seed, **network)
  E, I = add_brunel(net, regime, scale)
  spikes = net.create("spike_recorder")
  net.connect(E + I, spikes)
  return net, E, I, spikes
