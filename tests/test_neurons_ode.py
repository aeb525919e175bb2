"""NEST's conductance and ODE neurons (``iaf_cond_exp``, ``iaf_cond_alpha``,
``aeif_cond_exp``, ``hh_psc_alpha``) against NEST 3.10, live.

Each model runs 1 s at 0.1 ms in NEST (in this process) and in brainshard
on the same input: an excitatory and an inhibitory ``spike_generator``
train (fixed times, delay 1 ms), a ``dc_generator`` on for half a second,
and ``I_e``; every spike crosses threshold steeply (no grazing drive). The
solver follows GSL's RKF45 step for step (``odeint.py``), so the spikes
are NEST's to the step in float64 and float32 alike. Measured (max over
all samples, spikes included; "away": more than 1 ms before or 2 ms after
a spike; "frac": samples with |dV_m| > 1e-3 mV):

================================ ======= ========== ========== ======
case                             spikes  |dV_m| f64 |dV_m| f32 frac
================================ ======= ========== ========== ======
IafCondExp                     23/23   1.4e-14    4.0e-05    0
IafCondAlpha                   10/10   1.1e-12    4.7e-05    0
AeifCondExp                    27/27   1.2e-11    3.7e-02    0.55 %
AeifCondExp, Delta_T = 0       24/24   3.3e-13    6.8e-04    0
HhPscAlpha                     24/24   2.1e-11    2.7e-02    1.7 %
================================ ======= ========== ========== ======

(float32 away from spikes: at most 1.3e-3 mV for aeif, 4.2e-3 for hh; the
mismatch fraction is float32's, float64 has none.) The tests assert the
same spike steps, |dV_m| <= 1e-6 mV (float64) or 0.1 mV (float32), and the
other traces within 1e-9 (float64) or 1e-3 (float32) of their peak.

The rest needs no NEST: NEST's parameter checks, dt and dtype handling,
a NaN neuron that neither hangs the solver nor touches its neighbours,
and the same numbers on 1 and 8 devices.
"""

import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._models.neurons import (
    AeifCondExp, HhPscAlpha, IafCondAlpha, IafCondExp)

from _util import reset_nest

DT, T, DELAY = 0.1, 1000.0, 1.0
N_STEPS = int(round(T / DT))
_RNG = np.random.default_rng(0)
# spike times on the grid, away from the start and the end
EX_TIMES, IN_TIMES = (
    np.round(np.sort(_RNG.choice(np.arange(10, 9900), k, False)) * DT, 1)
    for k in (400, 150))
DC = (150.0, 200.0, 700.0)  # pA, on from 200 ms to 700 ms

# case: model, its parameters, the excitatory and inhibitory weight, what
# to compare (NEST's recordable: brainshard's state variable)
CASES = {
    "iaf_cond_exp": (IafCondExp, {"I_e": 250.0}, 6.0, -20.0,
                     {"V_m": "V_m", "g_ex": "g_ex", "g_in": "g_in"}),
    "iaf_cond_alpha": (IafCondAlpha, {"I_e": 250.0}, 6.0, -20.0,
                       {"V_m": "V_m", "g_ex": "g_ex", "g_in": "g_in"}),
    "aeif_cond_exp": (AeifCondExp, {"I_e": 1000.0, "t_ref": 0.5}, 6.0,
                      -20.0, {"V_m": "V_m", "g_ex": "g_ex", "w": "w"}),
    # Delta_T = 0: an iaf neuron with adaptation, V_th is the peak
    "aeif_cond_exp-Delta_T=0": (
        AeifCondExp, {"I_e": 900.0, "Delta_T": 0.0, "t_ref": 2.0}, 6.0,
        -20.0, {"V_m": "V_m", "w": "w"}),
    "hh_psc_alpha": (HhPscAlpha, {"I_e": 400.0}, 150.0, -150.0,
                     {"V_m": "V_m", "Act_m": "Act_m", "I_syn_ex": "I_syn_ex",
                      "I_syn_in": "I_syn_in"}),
}
# Allowed: |dV_m| in mV, and other traces' differences over their peak.
# float64 follows GSL to rounding; float32's largest V_m differences sit on
# the steep flanks of spikes (measured: see the module doc).
V_TOL = {"float64": 1e-6, "float32": 0.1}
REL_TOL = {"float64": 1e-9, "float32": 1e-3}


def _nest_run(name, params, w_ex, w_in, record):
  """NEST's spike times and multimeter events for one neuron."""
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")
  nest = pytest.importorskip("nest")
  reset_nest(nest, DT)
  nrn = nest.Create(name, params=params)
  for times, w in ((EX_TIMES, w_ex), (IN_TIMES, w_in)):
    gen = nest.Create("spike_generator", params={"spike_times": times})
    nest.Connect(gen, nrn, syn_spec={"weight": w, "delay": DELAY})
  dc = nest.Create("dc_generator", params=dict(zip(
      ("amplitude", "start", "stop"), DC)))
  nest.Connect(dc, nrn, syn_spec={"delay": DELAY})
  mm = nest.Create("multimeter", params={"record_from": list(record),
                                         "interval": DT})
  nest.Connect(mm, nrn)
  rec = nest.Create("spike_recorder")
  nest.Connect(nrn, rec)
  nest.Simulate(T)
  return np.asarray(rec.get("events")["times"]), mm.get("events")


def _drive(w_ex, w_in, n_steps=N_STEPS):
  """The same input as NEST's buffers hold it: ``inputs [steps, 2, 1]``
  (a spike at t with delay d is read in the step ending at t + d) and
  ``currents [steps, 1]`` (a dc_generator on over (start, stop] reaches
  the buffer d later, one step before the ODE sees it)."""
  inputs = np.zeros((n_steps, 2, 1))
  for times, w in ((EX_TIMES, w_ex), (IN_TIMES, w_in)):
    steps = np.round((times + DELAY) / DT).astype(int) - 1
    np.add.at(inputs[:, 0 if w > 0 else 1, 0], steps[steps < n_steps], w)
  currents = np.zeros((n_steps, 1))
  delay = int(round(DELAY / DT))
  on, off = (int(round(t / DT)) + delay - 1 for t in DC[1:])
  currents[on:off, 0] = DC[0]
  return inputs, currents


def _run(model, inputs, currents, dtype):
  """Every step's state and spikes, one ``lax.scan`` under ``jit``."""
  c = model.constants(model.params, DT)
  state = model.init_state(inputs.shape[-1], dtype)

  def step(s, x):
    s, spikes = model.update(c, s, x[0], x[1])
    return s, (s, spikes)

  run = jax.jit(lambda s, i, cur: jax.lax.scan(step, s, (i, cur))[1])
  return run(state, jnp.asarray(inputs, dtype), jnp.asarray(currents, dtype))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_nest(case, dtype):
  model_cls, params, w_ex, w_in, record = CASES[case]
  nest_spikes, events = _nest_run(model_cls.nest_name, params, w_ex, w_in,
                                  record)
  with jax.enable_x64(dtype == "float64"):
    states, spikes = _run(model_cls(**params), *_drive(w_ex, w_in),
                          jnp.dtype(dtype))
    spikes = np.asarray(spikes[:, 0])
    states = {k: np.asarray(v[:, 0], np.float64) for k, v in states.items()}
  times = (np.flatnonzero(spikes) + 1) * DT  # NEST stamps the step's end
  assert len(nest_spikes) >= 10, "the drive should make the neuron fire"
  assert len(times) == len(nest_spikes)
  np.testing.assert_allclose(times, nest_spikes, atol=1e-9)
  # the multimeter's sample at t is the state after the step ending at t
  rows = np.round(events["times"] / DT).astype(int) - 1
  for nest_name, ours in record.items():
    diff = np.abs(states[ours][rows] - events[nest_name])
    tol = V_TOL[dtype] if nest_name == "V_m" else \
        REL_TOL[dtype] * np.abs(events[nest_name]).max()
    assert diff.max() <= tol, (nest_name, diff.max())


# ---- without NEST ----------------------------------------------------------

MODELS = (IafCondExp, IafCondAlpha, AeifCondExp, HhPscAlpha)


@pytest.mark.parametrize("model_cls", MODELS)
def test_refuses_unknown_and_non_finite_parameters(model_cls):
  with pytest.raises(ValueError, match="unknown parameter.*tau_m"):
    model_cls(tau_m=10.0)
  with pytest.raises(ValueError, match="C_m must be finite"):
    model_cls(C_m=float("nan"))
  with pytest.raises(ValueError, match="I_e must be finite"):
    model_cls(I_e=[0.0, float("inf")])
  model = model_cls()
  for dt in (0.0, -0.1, float("nan"), "0.1"):
    with pytest.raises(ValueError, match="dt must be a positive"):
      model.constants(model.params, dt)


@pytest.mark.parametrize("model_cls, params, message", [
    (IafCondExp, {"V_reset": -50.0}, "V_reset < V_th"),
    (IafCondAlpha, {"C_m": [250.0, 0.0]}, "Capacitance"),
    (IafCondExp, {"tau_syn_in": 0.0}, "time constants"),
    (IafCondAlpha, {"t_ref": -1.0}, "Refractory"),
    (AeifCondExp, {"V_peak": -55.0}, "V_peak >= V_th"),
    (AeifCondExp, {"Delta_T": 0.01}, "overflow"),
    (AeifCondExp, {"tau_w": 0.0}, "time constants"),
    (AeifCondExp, {"gsl_error_tol": 0.0}, "gsl_error_tol"),
    (HhPscAlpha, {"g_K": -1.0}, "conductances"),
])
def test_refuses_what_nest_refuses(model_cls, params, message):
  with pytest.raises(ValueError, match=message):
    model_cls(**params)


def test_nest_names_and_initial_state():
  assert IafCondAlpha.receptors == ("ex", "in") and \
      IafCondAlpha.sign_routed
  state = HhPscAlpha().init_state(2)
  assert state["V_m"].tolist() == [-65.0, -65.0]  # NEST's, not E_L
  # NEST's GetDefaults('hh_psc_alpha'): the gates at rest at -65 mV
  np.testing.assert_allclose(
      [state[k][0] for k in ("Act_m", "Inact_h", "Act_n")],
      [0.05293248525724958, 0.5961207535084603, 0.3176769140606974],
      rtol=1e-7)
  assert state["r"].dtype == np.int32 and state["V_m"].dtype == np.float32
  assert AeifCondExp().recordable() == ("V_m", "g_ex", "g_in", "w")
  state = AeifCondExp(E_L=-65.0).init_state(1)
  assert state["V_m"][0] == -65.0 and state["IntegrationStep"][0] == 0.0


@pytest.mark.parametrize("model_cls", MODELS)
def test_keeps_the_state_dtype(model_cls):
  """float32 stays float32 with x64 on and float64 input (and the other
  way round): the host's float64 constants never widen the state."""
  model = model_cls()
  c = model.constants(model.params, DT)
  with jax.enable_x64(True):
    for dtype in (jnp.float32, jnp.float64):
      state = model.init_state(3, dtype)
      out, spikes = jax.eval_shape(model.update, c, state,
                                   np.zeros((2, 3)), np.zeros(3))
      assert spikes.dtype == jnp.bool_ and spikes.shape == (3,)
      for name, value in out.items():
        assert value.dtype == (jnp.int32 if name == "r" else dtype), name
        assert value.shape == (3,)


@pytest.mark.slow
def test_a_nan_neuron_stays_alone():
  """A NaN input ends the solver's loop (GSL's NaN-skipping error norm)
  and leaves the other neurons' numbers exactly as they are alone."""
  model = AeifCondExp(I_e=1000.0)
  inputs, currents = _drive(6.0, -20.0, n_steps=300)
  pair = np.concatenate([inputs, inputs], axis=2)
  pair[5, 0, 0] = np.nan
  states, spikes = _run(model, pair, np.tile(currents, (1, 2)), jnp.float32)
  alone, alone_spikes = _run(model, inputs, currents, jnp.float32)
  assert np.isnan(states["V_m"][-1, 0])
  np.testing.assert_array_equal(states["V_m"][:, 1], alone["V_m"][:, 0])
  np.testing.assert_array_equal(spikes[:, 1], alone_spikes[:, 0])


@pytest.mark.slow
@pytest.mark.parametrize("model_cls", [AeifCondExp, HhPscAlpha])
def test_same_numbers_on_8_devices(model_cls):
  """Each neuron's substeps are its own: 16 neurons with different input
  give the same bits on one device and split over 8."""
  model = model_cls(I_e=1200.0)
  c = model.constants(model.params, DT)
  n, steps = 16, 300
  rng = np.random.default_rng(1)
  inputs = rng.uniform(0.0, 30.0, (steps, 2, n)) * (rng.random((steps, 2, n))
                                                   < 0.05)
  inputs[:, 1] *= -1
  state = model.init_state(n)

  def run(s, i):
    def step(s, x):
      s, spikes = model.update(c, s, x, jnp.zeros_like(x[0]))
      return s, (s["V_m"], spikes)
    return jax.lax.scan(step, s, i)[1]

  mesh = jax.make_mesh((8,), ("x",))
  sharded = jax.jit(jax.shard_map(
      run, mesh=mesh, in_specs=(P("x"), P(None, None, "x")),
      out_specs=P(None, "x")))
  inputs = jnp.asarray(inputs, jnp.float32)
  v1, s1 = jax.jit(run)(state, inputs)
  v8, s8 = sharded(
      jax.device_put(state, NamedSharding(mesh, P("x"))),
      jax.device_put(inputs, NamedSharding(mesh, P(None, None, "x"))))
  assert int(s1.sum()) > 0
  np.testing.assert_array_equal(np.asarray(v1), np.asarray(v8))
  np.testing.assert_array_equal(np.asarray(s1), np.asarray(s8))


@pytest.mark.slow
def test_one_value_per_neuron():
  """Per-neuron parameters (NEST's ``Create(..., params=[...])``): each
  neuron as the model with its own numbers alone (3 neurons: padded)."""
  i_e, t_ref = [300.0, 500.0, 900.0], [0.5, 2.0, 1.0]
  inputs, currents = _drive(6.0, -20.0, n_steps=300)
  both, spikes = _run(IafCondExp(I_e=i_e, t_ref=t_ref),
                      np.tile(inputs, (1, 1, 3)), np.tile(currents, (1, 3)),
                      jnp.float32)
  assert spikes[:, 2].sum() > spikes[:, 0].sum()
  alone, _ = _run(IafCondExp(I_e=i_e[1], t_ref=t_ref[1]), inputs, currents,
                  jnp.float32)
  np.testing.assert_array_equal(both["V_m"][:, 1], alone["V_m"][:, 0])
  model = IafCondExp(t_ref=t_ref)
  assert model.constants(model.params, DT)["ref_steps"].tolist() == [5, 20, 10]
