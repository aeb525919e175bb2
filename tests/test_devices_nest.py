"""NEST's stimulation devices against NEST 3.10, live.

* Deterministic devices (``dc_generator``, ``step_current_generator``,
  ``spike_generator``, one train or one per target) drive ``iaf_psc_exp``
  neurons in NEST and in brainshard (float64), with start/stop/origin at
  the edges, off-grid times, weights, multiplicities and delays of 1 to 20
  steps: the same spike steps, ``V_m`` within 1e-9 mV at every step.
* ``poisson_generator`` (NEST: into ``parrot_neuron`` s): the same active
  steps, exactly; per-step counts Poisson (chi-square); mean, variance,
  the Fano factor of 10 ms bins and the variance of the per-step sum over
  targets (1 for independent trains) within ``Z`` standard errors of
  theory, for NEST and for brainshard, at lam = 0.5 (the table) and lam =
  8e-4 (the exact loop).
* ``noise_generator`` (NEST: its ``I`` through a multimeter, one target
  per generator): the same active steps and change steps, exactly; the
  amplitudes' mean and std within ``Z`` standard errors, independent
  across targets; with ``std_mod``, each interval's variance across
  targets follows NEST's sine (the phase included) for both.

NEST's draws cannot be reproduced, so its numbers are checked against the
same bounds as brainshard's. Seeds are fixed: each bound is a ``Z``-sigma
(p ~ 1e-5) statistical bound that happens to pass, and passes again.
Skipped where NEST is not installed.
"""

import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from brainshard._models.devices import DEVICES, NoiseGenerator, PoissonGenerator
from brainshard._models.neurons import IafPscExp

from _util import reset_nest

DT = 0.1
Z = 4.5          # standard errors a statistic may stray
V_TOL = 1e-9     # mV


def fresh_nest(seed=1):
  """NEST, reset, at resolution DT (the test skips where it is missing)."""
  os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # NEST's threads spin
  nest = pytest.importorskip("nest")
  reset_nest(nest, DT)
  nest.rng_seed = seed
  return nest


def emit_all(dev, steps, targets, key=None, dtype=jnp.float64):
  """``dev.emit`` for steps ``0 .. steps - 1``: ``[steps, n]``."""
  c = dev.constants(DT)
  run = jax.jit(jax.vmap(lambda t: dev.emit(c, t, targets, key, dtype=dtype)))
  return np.asarray(run(jnp.arange(steps, dtype=jnp.int32)))


# ----------------------------------------------------------------------------
# Deterministic devices: V_m step for step

STEPS = 1000     # 100 ms
I_E = [300.0, 350.0, 200.0, 250.0, 320.0, 330.0]
# NEST model, params, target neurons, delay (ms), weight; a per-target
# spike_generator is one NEST generator per target, connected one to one.
CONNECTIONS = [
    ("dc_generator", {"amplitude": 300.0, "start": 20.0, "stop": 50.0,
                      "origin": 10.0}, [0], 0.1, 1.0),
    ("spike_generator", {"spike_times": [0.1, 1.0, 1.0, 5.0, 20.0, 20.1,
                                         33.3], "start": 1.0, "stop": 20.0},
     [0], 0.1, 500.0),
    ("dc_generator", {"amplitude": -100.0, "stop": 30.0}, [1], 1.5, 1.0),
    ("dc_generator", {"amplitude": 400.0, "start": 60.0, "stop": 60.0},
     [1], 0.1, 1.0),
    ("spike_generator", {"spike_times": [2.05, 7.0, 9.99, 15.0],
                         "allow_offgrid_times": True,
                         "spike_weights": [1.0, -2.0, 0.5, 3.0]},
     [1], 1.0, 400.0),
    ("step_current_generator", {
        "amplitude_times": [5.0, 25.3, 40.0, 70.0],
        "amplitude_values": [250.0, 500.0, -200.0, 350.0],
        "start": 10.0, "stop": 90.0, "origin": 5.0}, [2], 0.3, 1.0),
    ("spike_generator", {"spike_times": [0.0, 4.0, 8.0],
                         "shift_now_spikes": True, "origin": 3.0,
                         "spike_multiplicities": [2, 1, 3]},
     [2], 0.2, -300.0),
    ("step_current_generator", {
        "amplitude_times": [12.34, 30.05], "amplitude_values": [150.0, 300.0],
        "allow_offgrid_times": True}, [3], 2.0, 1.0),
    ("dc_generator", {"amplitude": 40.0, "stop": 80.0}, [3], 0.5, 2.5),
    ("step_current_generator", {"amplitude_times": [0.1, 50.0],
                                "amplitude_values": [100.0, 0.0]},
     [4], 0.1, 1.0),
    ("dc_generator", {"amplitude": 2000.0, "stop": 0.3}, [5], 0.1, 1.0),
    ("spike_generator", {"spike_times": [[0.1, 0.1, 12.0, 40.0],
                                         [3.0, 40.0, 40.1]],
                         "spike_weights": [[1.0, 2.0, 1.5, 1.0],
                                           [2.0, 1.0, -1.0]]},
     [4, 5], 0.4, 300.0),
]


def nest_run():
  """NEST's V_m [STEPS, n] and spikes [(step, neuron)]."""
  nest = fresh_nest()
  n = len(I_E)
  nrn = nest.Create("iaf_psc_exp", n)
  for k, i_e in enumerate(I_E):
    nrn[k].set(I_e=i_e)
  for name, params, targets, delay, weight in CONNECTIONS:
    syn = {"weight": weight, "delay": delay}
    if isinstance(params.get("spike_times", [0.0])[0], list):
      for k, target in enumerate(targets):
        one = {key: v[k] for key, v in params.items()}
        nest.Connect(nest.Create(name, params=one), nrn[target], syn_spec=syn)
    else:
      gen = nest.Create(name, params=params)
      for target in targets:
        nest.Connect(gen, nrn[target], syn_spec=syn)
  mm = nest.Create("multimeter", params={"record_from": ["V_m"],
                                         "interval": DT})
  sr = nest.Create("spike_recorder")
  nest.Connect(mm, nrn)
  nest.Connect(nrn, sr)
  # the multimeter stamps the state after step k with (k + 1) dt
  nest.Simulate(STEPS * DT + 1.0)
  ev = mm.get("events")
  steps = np.round(ev["times"] / DT).astype(int) - 1
  keep = steps < STEPS
  v = np.full((STEPS, n), np.nan)
  v[steps[keep], (ev["senders"] - nrn[0].global_id)[keep]] = ev["V_m"][keep]
  ev = sr.get("events")
  spikes = sorted(zip(np.round(ev["times"] / DT).astype(int).tolist(),
                      (ev["senders"] - nrn[0].global_id).tolist()))
  return v, [(s - 1, k) for s, k in spikes if s <= STEPS]


def drive(n):
  """``inputs [STEPS, 2, n]``, ``currents [STEPS, n]`` from the devices'
  emits: what step t sends arrives in step t + d (sign-routed receptors)."""
  inputs, currents = np.zeros((STEPS, 2, n)), np.zeros((STEPS, n))
  for name, params, targets, delay, weight in CONNECTIONS:
    dev = DEVICES[name](**params)
    ids = (np.arange(len(targets), dtype=np.int32)
           if name == "spike_generator" and dev.per_target else len(targets))
    sent = weight * emit_all(dev, STEPS, ids)
    d = int(round(delay / DT))
    arriving = np.zeros((STEPS, len(targets)))
    arriving[d:] = sent[:STEPS - d]
    if dev.emits == "current":
      currents[:, targets] += arriving
    else:
      inputs[:, 0, targets] += np.where(arriving > 0, arriving, 0.0)
      inputs[:, 1, targets] += np.where(arriving < 0, arriving, 0.0)
  return inputs, currents


@pytest.mark.slow
def test_deterministic_devices_match_nest_step_for_step():
  v_nest, spikes_nest = nest_run()
  with jax.enable_x64(True):
    inputs, currents = drive(len(I_E))
    model = IafPscExp(I_e=I_E)
    c = model.constants(model.params, DT)

    def step(s, x):
      s, spikes = model.update(c, s, *x)
      return s, (s["V_m"], spikes)

    v, spikes = jax.jit(lambda s, xs: jax.lax.scan(step, s, xs)[1])(
        model.init_state(len(I_E), jnp.float64),
        (jnp.asarray(inputs), jnp.asarray(currents)))
  steps, neurons = np.nonzero(np.asarray(spikes))
  assert len(spikes_nest) >= 10
  assert sorted(zip(steps.tolist(), neurons.tolist())) == spikes_nest
  assert not np.isnan(v_nest).any()
  dv = np.abs(np.asarray(v) - v_nest)
  assert dv.max() <= V_TOL, (dv.max(), np.unravel_index(dv.argmax(), dv.shape))


# ----------------------------------------------------------------------------
# poisson_generator: count statistics


def nest_poisson_counts(params, n, steps, delay_steps):
  """NEST's counts ``[steps, n]`` by the step the generator sent them in:
  a parrot stamps a spike sent in step j at j + d + 1."""
  nest = fresh_nest(seed=12)
  pg = nest.Create("poisson_generator", params=params)
  parrots = nest.Create("parrot_neuron", n)
  nest.Connect(pg, parrots, syn_spec={"delay": delay_steps * DT})
  sr = nest.Create("spike_recorder")
  nest.Connect(parrots, sr)
  nest.Simulate((steps + delay_steps + 1) * DT)
  ev = sr.get("events")
  sent = np.round(ev["times"] / DT).astype(int) - delay_steps - 1
  keep = sent < steps
  counts = np.zeros((steps, n), int)
  np.add.at(counts, (sent[keep], (ev["senders"] - parrots[0].global_id)[keep]),
            1)
  return counts


def check_poisson(counts, lam, first, last, who):
  """The bounds of the module doc for counts ``[steps, n]``."""
  from scipy import stats
  live = np.zeros(len(counts), bool)
  live[first:last + 1] = True
  assert not counts[~live].any(), who
  x = counts[live]
  n = x.size
  mean, var = x.mean(), x.var()
  assert abs(mean - lam) <= Z * np.sqrt(lam / n), (who, mean)
  assert abs(var - lam) <= Z * np.sqrt((lam + 2 * lam**2) / n), (who, var)
  # per-step counts: Poisson's pmf (chi-square over the counts seen > 5)
  observed = np.bincount(x.ravel())
  expected = stats.poisson.pmf(np.arange(len(observed)), lam) * n
  keep = expected > 5
  rest_o, rest_e = observed[~keep].sum(), n - expected[keep].sum()
  chi2 = ((observed[keep] - expected[keep])**2 / expected[keep]).sum()
  chi2 += (rest_o - rest_e)**2 / rest_e
  assert stats.chi2.sf(chi2, keep.sum()) > 1e-5, (who, observed, expected)
  # Fano factor of 10 ms bins, per target
  bins = x[:len(x) // 100 * 100].reshape(-1, 100, x.shape[1]).sum(1).ravel()
  mu = 100 * lam
  fano = bins.var() / bins.mean()
  assert abs(fano - 1) <= Z * np.sqrt((mu + 2 * mu**2) / bins.size) / mu, (
      who, fano)
  # independent trains: the per-step sum over targets has n * lam variance
  total = x.sum(1)
  ratio = total.var() / (x.shape[1] * lam)
  assert abs(ratio - 1) <= Z * np.sqrt(2 / len(total)), (who, ratio)
  return mean, var, fano, ratio


# rate (Hz), start, stop (ms), targets, steps, delay (steps)
POISSON = {"table, lam 0.5": (5000.0, 2.0, 150.0, 400, 1600, 5),
           "exact loop, lam 8e-4": (8.0, 0.0, 500.0, 1000, 5000, 1)}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(POISSON))
def test_poisson_generator_counts_match_nests(case):
  rate, start, stop, n, steps, d = POISSON[case]
  params = {"rate": rate, "start": start, "stop": stop}
  lam = DT * rate * 1e-3
  pg = PoissonGenerator(**params)
  c = pg.constants(DT)
  first, last = int(c["first"]), min(int(c["last"]), steps - 1)
  assert ("table" in c) == (lam >= 1e-3)
  nest_counts = nest_poisson_counts(params, n, steps, d)
  ours = emit_all(pg, steps, n, jax.random.key(3))
  a = check_poisson(nest_counts, lam, first, last, "NEST")
  b = check_poisson(ours, lam, first, last, "brainshard")
  if lam > 0.1:  # the edges of the window, seen in both
    for counts in (nest_counts, ours):
      seen = np.nonzero(counts.any(1))[0]
      assert (seen[0], seen[-1]) == (first, last)
  print(f"\n{case}: mean, var, Fano, sum ratio: NEST {np.round(a, 5)}, "
        f"brainshard {np.round(b, 5)}")


# ----------------------------------------------------------------------------
# noise_generator: intervals and amplitudes


NOISE_STEPS = 1000
NOISE = {"mean": 50.0, "std": 30.0, "dt": 0.5, "start": 5.0, "stop": 85.0}
MODULATED = {**NOISE, "std_mod": 24.0, "frequency": 100.0, "phase": 45.0}


def nest_noise_currents(n):
  """NEST's ``I`` ``[steps, n]`` of ``n`` plain and ``n`` modulated noise
  generators (one target each), by the step that sent it, and of a
  ``dc_generator`` with the same window (which sets the multimeter's
  offset: it stamps step k's current (k + 1) dt)."""
  nest = fresh_nest(seed=5)
  window = {k: NOISE[k] for k in ("start", "stop")}
  gens = (nest.Create("noise_generator", n, params=NOISE)
          + nest.Create("noise_generator", n, params=MODULATED)
          + nest.Create("dc_generator", params={"amplitude": 1.0, **window}))
  nrn = nest.Create("iaf_psc_exp", len(gens))
  nest.Connect(gens, nrn, "one_to_one")
  mm = nest.Create("multimeter", params={"record_from": ["I"],
                                         "interval": DT})
  nest.Connect(mm, gens)
  nest.Simulate(NOISE_STEPS * DT + 1.0)
  ev = mm.get("events")
  steps = np.round(ev["times"] / DT).astype(int) - 1
  keep = steps < NOISE_STEPS
  current = np.zeros((NOISE_STEPS, len(gens)))
  current[steps[keep], (ev["senders"] - gens[0].global_id)[keep]] = ev["I"][
      keep]
  return current[:, :n], current[:, n:2 * n], current[:, -1]


def intervals(current, t0, interval):
  """The steps where the current changes (its first active step among
  them), and the amplitudes ``[intervals, n]`` (at each one's first step)."""
  changed = np.nonzero((current[1:] != current[:-1]).any(1))[0] + 1
  return changed, current[t0::interval][:(len(current) - t0) // interval]


def modulation_misfit(amps, c):
  """Mean squared z of each interval's variance across targets against
  NEST's ``std**2 + std_mod**2 sin(omega h (m D + 1) + phase)`` (about 1
  where it fits)."""
  m = np.arange(len(amps))
  y1 = np.sin(c["omega_h"] * (m * c["interval"] + 1) + c["phase"])
  want = c["std"]**2 + y1 * c["std_mod"]**2
  n = amps.shape[1]
  z = (amps.var(1, ddof=1) - want) / (want * np.sqrt(2 / (n - 1)))
  return float(np.mean(z**2))


@pytest.mark.slow
def test_noise_generator_matches_nests_intervals_and_amplitudes():
  n = 200
  plain, modulated, dc = nest_noise_currents(n)
  noise = NoiseGenerator(**NOISE)
  c = noise.constants(DT)
  modulated_c = NoiseGenerator(**MODULATED).constants(DT)
  first, last, t0, every = (int(c[k]) for k in ("first", "last", "t0",
                                                 "interval"))
  active = np.zeros(NOISE_STEPS, bool)
  active[first:last + 1] = True
  np.testing.assert_array_equal(dc != 0, active)  # the multimeter's offset
  with jax.enable_x64(True):
    ours = emit_all(noise, NOISE_STEPS, n, jax.random.key(8))
    ours_mod = emit_all(NoiseGenerator(**MODULATED), NOISE_STEPS, n,
                        jax.random.key(9))
  for who, current in (("NEST", plain), ("brainshard", ours),
                       ("NEST mod", modulated), ("brainshard mod", ours_mod)):
    assert ((current != 0) == active[:, None]).all(), who
    changed, amps = intervals(current[:last + 1], t0, every)
    assert changed.tolist() == list(range(t0, last + 1, every)), who
    if "mod" in who:
      misfit = modulation_misfit(amps, modulated_c)
      assert abs(misfit - 1) <= Z * np.sqrt(2 / len(amps)), (who, misfit)
      continue
    x = amps.ravel()
    assert abs(x.mean() - NOISE["mean"]) <= Z * NOISE["std"] / np.sqrt(x.size)
    assert abs(x.std() - NOISE["std"]) <= Z * NOISE["std"] / np.sqrt(
        2 * x.size), (who, x.std())
    # independent across targets: each interval's mean has std**2 / n
    ratio = amps.mean(1).var() / (NOISE["std"]**2 / n)
    assert abs(ratio - 1) <= Z * np.sqrt(2 / len(amps)), (who, ratio)
