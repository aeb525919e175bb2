"""A network written in NEST's terms gives NEST 3.10's numbers.

The same script, call for call, in NEST and in ``bs.models.Network``:
``iaf_psc_exp`` and ``iaf_psc_delta`` populations, a ``dc_generator``, a
``step_current_generator`` and a ``spike_generator`` as drive, connections
with delays of one step to several ms and both signs, a ``spike_recorder``
and a ``multimeter``. Run in float64, spike times must be NEST's and
``V_m`` within 1e-9 mV at every sample; on 2 devices too.

Skipped where NEST is not installed (``pip install nest-simulator``).
"""

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

T = 60.0
EXP = {"I_e": [0.0, 200.0, 380.0], "tau_syn_in": 4.0}
DELTA = {"I_e": 300.0, "t_ref": 1.0}
CONNECTIONS = [  # (pre, post, conn_spec, syn_spec)
    ("E", "E", "all_to_all", {"weight": 300.0, "delay": 0.1}),
    ("E", "D", "all_to_all", {"weight": 4.0, "delay": 2.3}),
    ("D", "E", "one_to_one", {"weight": -700.0, "delay": 1.0}),
    ("dc", "E", None, {"weight": 1.5, "delay": 0.7}),
    ("step", "D", None, {"weight": 1.0, "delay": 0.1}),
    ("gen", "E", None, {"weight": 1200.0, "delay": 0.4}),
]


def script(create, connect):
  """The network in NEST's calls, through ``create`` and ``connect``."""
  nodes = {
      "E": create("iaf_psc_exp", 3, EXP),
      "D": create("iaf_psc_delta", 3, DELTA),
      "dc": create("dc_generator", 1, {"amplitude": 120.0, "start": 5.0,
                                       "stop": 40.0}),
      "step": create("step_current_generator", 1, {
          "amplitude_times": [10.0, 20.0, 30.0],
          "amplitude_values": [150.0, -50.0, 90.0]}),
      "gen": create("spike_generator", 1, {
          "spike_times": [3.0, 3.1, 17.5, 33.3, 48.0]}),
  }
  for pre, post, conn, syn in CONNECTIONS:
    connect(nodes[pre], nodes[post], conn, syn)
  sr = create("spike_recorder", 1, None)
  mm = create("multimeter", 1, {"record_from": ["V_m"], "interval": 0.1})
  connect(nodes["E"] + nodes["D"], sr, None, None)
  connect(mm, nodes["E"] + nodes["D"], None, None)
  return sr, mm


def run_nest():
  reset_nest(nest, 0.1)
  nest.rng_seed = 1

  def create(model, n, params):
    return nest.Create(model, n, params=params)

  def connect(pre, post, conn, syn):
    nest.Connect(pre, post, conn, syn)

  sr, mm = script(create, connect)
  nest.Simulate(T + 1.0)  # NEST hands over a slice's samples a step late
  ev = sr.get("events")
  spikes = sorted(zip(np.round(ev["times"], 1).tolist(),
                      (ev["senders"] - 1).tolist()))
  ev = mm.get("events")
  order = np.lexsort((ev["senders"], ev["times"]))
  keep = ev["times"][order] <= T + 1e-9
  v = ev["V_m"][order][keep].reshape(-1, 6)
  return spikes, v


def run_brainshard(devices):
  mesh = make_mesh((devices,), ("x",))
  net = bm.Network(dt=0.1, seed=1, mesh=mesh, dtype=jnp.float64)

  def create(model, n, params):
    return net.create(model, n, params)

  def connect(pre, post, conn, syn):
    net.connect(pre, post, conn, syn)

  sr, mm = script(create, connect)
  net.simulate(T)
  spikes = sorted(zip(np.round(sr.events["times"], 1).tolist(),
                      sr.events["senders"].tolist()))
  return spikes, mm.traces["V_m"]


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_network_is_nest_step_for_step(devices):
  nest_spikes, nest_v = run_nest()
  with jax.enable_x64(True):
    spikes, v = run_brainshard(devices)
  assert len(nest_spikes) >= 8
  assert {s for _, s in nest_spikes} >= {1, 2, 3}  # E fires and so does D
  assert spikes == nest_spikes
  assert v.shape == nest_v.shape == (600, 6)
  np.testing.assert_allclose(v, nest_v, atol=1e-9, rtol=0)
