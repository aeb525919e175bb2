"""Plastic synapses in a ``bs.models.Network`` give NEST 3.10's numbers.

One small network, written in NEST's calls in both: ``spike_generator`` s
drive ``parrot_neuron`` s (NEST's own ``test_stdp_synapse.py`` set-up);
pre parrots connect to post parrots through ``stdp_synapse`` (on receptor
1, which a parrot does not repeat; two connections with different delays
and parameters, the post parrots with their own ``tau_minus``), and to
``iaf_psc_delta`` neurons through ``tsodyks2_synapse`` (facilitating and
depressing). Over 1 s in float64:

* the spike trains are identical;
* every ``weight_recorder`` event (the weight each presynaptic spike
  delivers: STDP's new weight, tsodyks2's ``x u weight``) matches NEST's to
  1e-9 relative, and so do the final weights and ``Kplus``;
* the ``iaf_psc_delta`` targets' ``V_m`` (tsodyks2's amplitudes landing)
  matches NEST's to 1e-9 mV;
* on 8 devices every number is the 1-device number, bit for bit, and a
  second ``simulate`` compiles nothing.

Skipped where NEST is not installed (``pip install nest-simulator``).
"""

import logging
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # NEST's threads spin
nest = pytest.importorskip("nest")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from brainshard import models as bm  # noqa: E402

from conftest import make_mesh  # noqa: E402
from _util import reset_nest  # noqa: E402

DT, T = 0.1, 1000.0
N_PRE, N_POST, N_DELTA = 4, 3, 2
STDP = [  # (pre slice, delay, parameters)
    (slice(0, 2), 1.0, {"weight": 2.0, "lambda": 0.02, "alpha": 1.05,
                        "mu_plus": 1.0, "mu_minus": 1.0, "tau_plus": 18.0,
                        "Wmax": 5.0}),
    (slice(2, 4), 2.3, {"weight": 0.5, "lambda": 0.01, "alpha": 0.85,
                        "mu_plus": 0.0, "mu_minus": 0.0, "tau_plus": 16.8,
                        "Wmax": 15.0}),
]
TSODYKS = [  # (pre slice, delay, parameters), onto the iaf_psc_delta
    (slice(0, 2), 1.5, {"weight": 3.0, "U": 0.1, "u": 0.1, "x": 1.0,
                        "tau_rec": 100.0, "tau_fac": 1000.0}),
    (slice(2, 4), 1.0, {"weight": 2.5, "U": 0.5, "u": 0.3, "x": 0.7,
                        "tau_rec": 800.0, "tau_fac": 20.0}),
]
DELTA = {"V_th": 1e6, "tau_m": 15.0, "C_m": 250.0}  # subthreshold


def trains():
  """Spike times (ms, on the grid) of the pre and post parrots' drive:
  Poisson at 20 (pre) and 30 Hz (post), at least 0.3 ms apart."""
  rng = np.random.default_rng(5)
  out = []
  for k in range(N_PRE + N_POST):
    rate = 20.0 if k < N_PRE else 30.0
    steps = np.cumsum(np.maximum(np.round(rng.exponential(
        1000.0 / rate / DT, 60)), 3)).astype(np.int64) + 10
    out.append(np.round(steps[steps < (T - 50.0) / DT] * DT, 1))
  return out


def script(create, connect, plastic):
  """The network through ``create``/``connect``; ``plastic(model, params,
  recorder)`` makes a plastic syn_spec with a weight recorder."""
  par = create("parrot_neuron", N_PRE + N_POST, {"tau_minus": 30.0})
  delta = create("iaf_psc_delta", N_DELTA, DELTA)
  for k, times in enumerate(trains()):
    gen = create("spike_generator", 1, {"spike_times": times})
    connect(gen, par[k], None, {"weight": 1.0, "delay": DT})
  wr = create("weight_recorder", 1, None)
  for pre, delay, syn in STDP:
    connect(par[pre], par[N_PRE:], "all_to_all", dict(
        plastic("stdp_synapse", syn, wr), delay=delay, receptor_type=1))
  for pre, delay, syn in TSODYKS:
    connect(par[pre], delta, "all_to_all", dict(
        plastic("tsodyks2_synapse", syn, wr), delay=delay))
  sr = create("spike_recorder", 1, None)
  connect(par, sr, None, None)
  mm = create("multimeter", 1, {"record_from": ["V_m"], "interval": DT})
  connect(mm, delta, None, None)
  return par, delta, wr, sr, mm


def run_nest():
  reset_nest(nest, DT)
  copies = {}

  def create(model, n, params):
    return nest.Create(model, n, params=params)

  def connect(pre, post, conn, syn):
    nest.Connect(pre, post, conn, syn)

  def plastic(model, params, wr):
    name = f"{model}_rec{len(copies)}"
    nest.CopyModel(model, name, {"weight_recorder": wr})
    copies[name] = params
    return {**params, "synapse_model": name}

  par, delta, wr, sr, mm = script(create, connect, plastic)
  nest.Simulate(T + DT)  # NEST hands over a slice's samples a step late
  first = par[0].global_id
  ev = sr.events
  spikes = sorted(zip(np.round(ev["times"] / DT).astype(int).tolist(),
                      (ev["senders"] - first).tolist()))
  w = wr.events
  events = {"senders": w["senders"] - first, "targets": w["targets"] - first,
            "times": np.asarray(w["times"]), "weights": np.asarray(w["weights"])}
  conns = nest.GetConnections(par[:N_PRE], par[N_PRE:]).get(
      ["source", "target", "weight", "Kplus"])
  table = {k: np.asarray(v) for k, v in conns.items()}
  table["source"] -= first
  table["target"] -= first
  mv = mm.events
  order = np.lexsort((mv["senders"], mv["times"]))
  keep = mv["times"][order] <= T + 1e-9
  v = mv["V_m"][order][keep].reshape(-1, N_DELTA)
  return spikes, _sorted(events), table, v


def run_brainshard(devices):
  net = bm.Network(dt=DT, seed=1, mesh=make_mesh((devices,), ("x",)),
                   dtype=jnp.float64)
  handles = []

  def create(model, n, params):
    return net.create(model, n, params)

  def connect(pre, post, conn, syn):
    out = net.connect(pre, post, conn, syn)
    if out is not None and syn["synapse_model"] == "stdp_synapse":
      handles.append(out)

  def plastic(model, params, wr):
    return {**params, "synapse_model": model, "weight_recorder": wr}

  par, delta, wr, sr, mm = script(create, connect, plastic)
  net.simulate(T / 2)
  with _compile_log() as compiled:
    net.simulate(T / 2)
  ev = sr.events
  spikes = sorted(zip(np.round(ev["times"] / DT).astype(int).tolist(),
                      ev["senders"].tolist()))
  table = [h.get() for h in handles]
  table = {k: np.concatenate([t[k] for t in table]) for k in table[0]}
  return (spikes, _sorted(wr.events), table, mm.traces["V_m"],
          net.plasticity_overflow, compiled)


def _sorted(events):
  order = np.lexsort((events["targets"], events["senders"], events["times"]))
  return {k: np.asarray(v)[order] for k, v in events.items()}


class _compile_log:
  """The names of the programs compiled inside the block."""

  def __enter__(self):
    self.names = []
    names = self.names

    class Handler(logging.Handler):
      def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Compiling "):
          names.append(msg.split()[1])
    self.handler = Handler()
    logging.getLogger("jax").addHandler(self.handler)
    self.log = jax.log_compiles()
    self.log.__enter__()
    return self.names

  def __exit__(self, *exc):
    self.log.__exit__(*exc)
    logging.getLogger("jax").removeHandler(self.handler)


@pytest.mark.slow  # NEST 1 s, brainshard on 1 and 8 devices: ~1-2 min
def test_plastic_network_is_nest_and_the_same_on_8_devices():
  nest_spikes, nest_ev, nest_table, nest_v = run_nest()
  with jax.enable_x64(True):
    one = run_brainshard(1)
    eight = run_brainshard(8)
  spikes, events, table, v, overflow, compiled = one
  assert overflow == 0 and not compiled
  assert len(nest_spikes) > 100
  assert spikes == nest_spikes
  # every event: the same synapse, time, and the weight it delivered
  assert len(events["times"]) == len(nest_ev["times"]) > 300
  for k in ("senders", "targets"):
    np.testing.assert_array_equal(events[k], nest_ev[k])
  np.testing.assert_allclose(events["times"], nest_ev["times"], atol=1e-9)
  np.testing.assert_allclose(events["weights"], nest_ev["weights"],
                             rtol=1e-9, atol=0)
  stdp = nest_ev["targets"] < N_PRE + N_POST
  assert np.ptp(nest_ev["weights"][stdp]) > 0.1  # STDP did change them
  tso = ~stdp
  assert np.ptp(nest_ev["weights"][tso]) > 0.1  # and tsodyks2 did too
  # final weights and Kplus, synapse by synapse
  ours = np.lexsort((table["target"], table["source"]))
  theirs = np.lexsort((nest_table["target"], nest_table["source"]))
  for k, nk in (("source", "source"), ("target", "target")):
    np.testing.assert_array_equal(table[k][ours], nest_table[nk][theirs])
  for k, nk in (("weight", "weight"), ("Kplus", "Kplus")):
    np.testing.assert_allclose(table[k][ours], nest_table[nk][theirs],
                               rtol=1e-9, atol=0)
  # tsodyks2's amplitudes, landing on the targets' V_m
  assert v.shape == nest_v.shape == (int(T / DT), N_DELTA)
  assert np.ptp(nest_v) > 1.0
  np.testing.assert_allclose(v, nest_v, atol=1e-9, rtol=0)
  # 8 devices: the same bits
  assert eight[0] == spikes
  for k in events:
    np.testing.assert_array_equal(eight[1][k], events[k])
  for k in table:
    np.testing.assert_array_equal(eight[2][k][np.lexsort((
        eight[2]["target"], eight[2]["source"]))], table[k][ours])
  np.testing.assert_array_equal(eight[3], v)
  assert not eight[5]
