"""Plasticity as NEST 3.10 computes it, checked against NEST itself in
float64: ``stdp_synapse`` weights and ``tsodyks2_synapse``'s ``u``, ``x``
and delivered amplitudes, to 1e-9 relative.

As NEST's own ``test_stdp_synapse.py``: identical spike trains drive both
(in NEST ``spike_generator -> parrot_neuron``, the plastic synapse between
parrots on receptor 1, which a parrot does not repeat); NEST's
``weight_recorder`` gives the weight each presynaptic spike delivers over
1 s, and brainshard runs the same recorded spike stamps through the rules
on a ``SynapseIndex`` built from NEST's own connection table
(``GetConnections``), one ``lax.scan`` step per time step: record the post
spikes, then update the rows of the neurons that fired.

The network also runs in float32, the default, to 1e-5. Skipped where
NEST is not installed (``pip install nest-simulator``).
"""

import dataclasses
import functools
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # NEST's threads spin
nest = pytest.importorskip("nest")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from brainshard._models.delivery.from_arrays import index_from_arrays  # noqa: E402
from brainshard._models.plasticity import (  # noqa: E402
    history, rows, stdp, tsodyks2)

from _util import reset_nest  # noqa: E402

post_history, record = history.post_history, history.record
pair_rows, tsodyks2_rows = rows.pair_rows, rows.tsodyks2_rows
StdpSynapse, Tsodyks2Synapse = stdp.StdpSynapse, tsodyks2.Tsodyks2Synapse

DT, T_MS = 0.1, 1000.0
STEPS = int(round(T_MS / DT)) + 20
RTOL = 1e-9


def _quiet_reset():
  reset_nest(nest, DT)


def poisson_steps(rate_hz, seed, t_ms=T_MS - 50.0, gap=1):
  """Spike steps of a Poisson train on the grid, at least ``gap`` steps
  apart, in [10, t_ms / dt)."""
  rng = np.random.default_rng(seed)
  isi = rng.exponential(1000.0 / rate_hz / DT, size=int(rate_hz * 3) + 10)
  steps = np.cumsum(np.maximum(np.round(isi), gap)).astype(np.int64) + 10
  return steps[steps < t_ms / DT]


# Edge cases of NEST's own test (ms, shifted to the train's end): spikes at
# the same time and one step apart, pre before and after post.
EDGE_PRE = np.array([1, 5, 6, 7, 9, 11, 12, 13, 14.5, 16.1, 21, 25, 26, 27,
                     29, 31, 32, 33, 34.5, 36.1])
EDGE_POST = np.array([2, 3, 4, 8, 9, 10, 12, 12.2, 14.1, 15.4, 22, 23, 24, 28,
                      29, 30, 32, 33.2, 35.1, 36.4])


def trains(n, rate_hz, seed, edge=None):
  out = []
  for k in range(n):
    steps = poisson_steps(rate_hz, seed + k, T_MS - 60.0)
    if edge is not None:
      steps = np.union1d(steps, np.round((edge + T_MS - 45.0) / DT))
    out.append(steps.astype(np.int64))
  return out


def run_nest(pre_trains, post_trains, model, syn, delays, tau_minus,
             extra=(), probe=None):
  """NEST: parrots fed ``pre_trains``/``post_trains`` (steps), every pre
  parrot -> every post parrot through ``model`` with ``syn`` and
  ``delays[i][j]`` (ms). Returns the parrots' spike stamps (steps), the
  weight recorder's events, the connection table (with the ``extra``
  keys' final values) and, with ``probe = {'at': steps, 'keys': [...]}``,
  the synapses' ``keys`` read after running to each of ``steps``."""
  _quiet_reset()
  n_pre, n_post = len(pre_trains), len(post_trains)
  gens = nest.Create("spike_generator", n_pre + n_post, params=[
      {"spike_times": np.round(s * DT, 10)}
      for s in list(pre_trains) + list(post_trains)])
  par = nest.Create("parrot_neuron", n_pre + n_post,
                    params={"tau_minus": tau_minus})
  nest.Connect(gens, par, "one_to_one", syn_spec={"delay": DT})
  wr = nest.Create("weight_recorder")
  nest.CopyModel(model, "plastic_rec", {"weight_recorder": wr})
  for i in range(n_pre):
    for j in range(n_post):
      nest.Connect(par[i], par[n_pre + j], syn_spec=dict(
          syn, synapse_model="plastic_rec", receptor_type=1,
          delay=delays[i][j]))
  sr = nest.Create("spike_recorder")
  nest.Connect(par, sr)
  probed = []
  if probe:
    conns = nest.GetConnections(par[:n_pre], par[n_pre:])
    nest.Prepare()
    done = 0
    for at in probe["at"]:  # read the synapses between spikes
      nest.Run(round(at * DT - done, 10))
      done = at * DT
      got = conns.get(probe["keys"])
      probed.append([np.atleast_1d(got[k]) for k in probe["keys"]])
    nest.Run(round(T_MS - done, 10))
    nest.Cleanup()
  else:
    nest.Simulate(T_MS)
  ev = sr.events
  first = par[0].global_id
  stamps = [np.round(ev["times"][ev["senders"] == first + k] / DT).astype(
      np.int64) for k in range(n_pre + n_post)]
  table = nest.GetConnections(par[:n_pre], par[n_pre:]).get(
      ["source", "target", "delay", "weight", *extra])
  table = {k: np.atleast_1d(v) for k, v in table.items()}
  table["source"] = table["source"] - first
  table["target"] = table["target"] - first
  w = {k: np.asarray(v) for k, v in wr.events.items()}
  w["senders"], w["targets"] = w["senders"] - first, w["targets"] - first
  w["steps"] = np.round(w["times"] / DT).astype(np.int64)
  return stamps, w, table, probed


def index_of(table, n):
  """The index of NEST's connection table (ids 0..n-1) and, per table row,
  its slot. Static sizes fixed so that every test compiles one program."""
  delay = np.round(table["delay"] / DT).astype(np.int64)
  idx = index_from_arrays(table["source"], table["target"], table["weight"],
                          delay, n=n)
  idx = dataclasses.replace(idx, min_delay=1, max_delay=1)
  slot = np.empty(len(delay), np.int64)
  slot[np.argsort(table["source"], kind="stable")] = np.arange(len(delay))
  return idx, slot


def spike_matrix(stamps, n):
  out = np.zeros((STEPS, n), bool)
  for k, s in enumerate(stamps):
    out[s, k] = True
  return out


@functools.partial(jax.jit, static_argnames="static")
def run_stdp(params, tau_minus, index, weight, pre, post, static=()):
  """brainshard: per step (stamp s) record the post spikes, then update
  the rows of the neurons that fired. Returns the weights after each
  step ``[T, capacity]`` and the count of inexact updates. ``params``
  are traced (one program for all cases), ``static`` ones numbers."""
  params = {**params, **dict(static)}
  rule = StdpSynapse(**params).rule()
  n = pre.shape[1]
  hist = post_history(n, dtype=weight.dtype)
  kplus = jnp.full((n,), params["Kplus"], weight.dtype)
  t_last = jnp.zeros((n,), jnp.int32)

  def step(carry, x):
    weight, kplus, t_last, hist, bad, seen = carry
    s, pre_s, post_s = x
    hist = record(hist, post_s, s, tau_minus, DT)
    ids = jnp.nonzero(pre_s, size=n, fill_value=n)[0]
    # each synapse's windows start where its last ended (as a network's)
    out = pair_rows(rule, ids, s, index, weight, kplus, t_last, hist,
                    tau_minus, DT, seen=seen)
    carry = (out.weight, out.kplus, out.t_last, hist, bad + out.inexact,
             out.seen)
    return carry, out.weight

  carry = (weight, kplus, t_last, hist, jnp.int32(0),
           jnp.zeros(weight.shape, jnp.int32))
  xs = (jnp.arange(STEPS, dtype=jnp.int32), pre, post)
  carry, ws = jax.lax.scan(step, carry, xs)
  return ws, carry[1], carry[4]


def check_stdp(n_pre, n_post, syn, delays, tau_minus, pre_rate, post_rate,
               seed, edge=False, lag=None, dtype=jnp.float64, rtol=RTOL,
               static=False):
  """NEST and brainshard on the same trains (``lag``: the post train is
  the first pre train ``lag`` steps later, plus Poisson spikes); the
  weights of every synapse at every pre spike must agree to ``rtol``
  (brainshard computing in ``dtype``, with the parameters as numbers if
  ``static``, as NEST's whole exponents then multiply). Returns
  NEST's weight records and the largest relative error."""
  pre_t = trains(n_pre, pre_rate, seed, EDGE_PRE if edge else None)
  post_t = trains(n_post, post_rate, seed + 100, EDGE_POST if edge else None)
  if lag is not None:
    post_t = [np.union1d(p, pre_t[0] + lag) for p in post_t]
  stamps, rec, table, _ = run_nest(pre_t, post_t, "stdp_synapse", syn,
                                   delays, tau_minus, extra=["Kplus"])
  n = n_pre + n_post
  index, slot = index_of(table, n)
  params = StdpSynapse(**syn).params
  traced = {} if static else {k: jnp.asarray(v, dtype)
                              for k, v in params.items()}
  weight = jnp.zeros(index.capacity, dtype).at[slot].set(syn["weight"])
  pre = spike_matrix(stamps[:n_pre] + [[]] * n_post, n)
  post = spike_matrix([[]] * n_pre + stamps[n_pre:], n)
  ws, kplus, bad = run_stdp(
      traced, jnp.asarray(tau_minus, dtype), index, weight, pre, post,
      static=tuple(sorted(params.items())) if static else ())
  assert int(bad) == 0
  ws = np.asarray(ws)
  errors = []
  for k, (src, tgt) in enumerate(zip(table["source"], table["target"])):
    sel = (rec["senders"] == src) & (rec["targets"] == tgt)
    steps = rec["steps"][sel]
    np.testing.assert_array_equal(steps, stamps[src])  # one per pre spike
    ours = ws[steps, slot[k]]
    np.testing.assert_allclose(ours, rec["weights"][sel], rtol=rtol, atol=0)
    errors.append(np.max(np.abs(ours - rec["weights"][sel])
                         / np.maximum(np.abs(rec["weights"][sel]), 1e-300)))
  # the trace each presynaptic neuron ends with: NEST's Kplus, per synapse
  np.testing.assert_allclose(np.asarray(kplus)[table["source"]],
                             table["Kplus"], rtol=rtol, atol=0)
  return rec, max(errors)


# (name, parameters, delay in ms, tau_minus, post lag in steps): NEST's own
# test's additive rule; multiplicative; mixed exponents; additive rules
# driven into Wmax (no depression, post spikes 2 ms after the pre spikes)
# and into 0 (depression twice facilitation): clipping; delays of 0.1 to
# 5 ms.
STDP_CASES = [
    ("nest_test", {"lambda": 0.01, "alpha": 0.85, "mu_plus": 0.0,
                   "mu_minus": 0.0, "tau_plus": 16.8, "Wmax": 15.0,
                   "weight": 0.5}, 1.0, 33.7, None),
    ("multiplicative", {"lambda": 0.05, "alpha": 1.1, "mu_plus": 1.0,
                        "mu_minus": 1.0, "tau_plus": 20.0, "Wmax": 10.0,
                        "weight": 5.0}, 0.1, 20.0, None),
    ("mixed_mu", {"lambda": 0.03, "alpha": 0.9, "mu_plus": 0.4,
                  "mu_minus": 0.7, "tau_plus": 15.0, "Wmax": 3.0,
                  "weight": 1.2, "Kplus": 0.5}, 5.0, 25.0, None),
    ("clip_wmax", {"lambda": 0.2, "alpha": 0.0, "mu_plus": 0.0,
                   "mu_minus": 0.0, "tau_plus": 20.0, "Wmax": 2.0,
                   "weight": 1.0}, 2.3, 20.0, 20),
    ("clip_zero", {"lambda": 0.1, "alpha": 2.0, "mu_plus": 0.0,
                   "mu_minus": 0.0, "tau_plus": 20.0, "Wmax": 2.0,
                   "weight": 1.0}, 0.7, 30.0, None),
]


@pytest.mark.slow  # NEST and one program for all cases: ~2 s for the first
@pytest.mark.parametrize("case", range(len(STDP_CASES)),
                         ids=[c[0] for c in STDP_CASES])
def test_stdp_synapse_pair_matches_nest(case):
  name, syn, delay, tau_minus, lag = STDP_CASES[case]
  with jax.enable_x64(True):
    rec, err = check_stdp(1, 1, syn, [[delay]], tau_minus, 40.0, 20.0,
                          seed=11 * case, edge=True, lag=lag)
  w = rec["weights"]
  assert len(w) > 30
  if name == "clip_wmax":
    assert (w == syn["Wmax"]).any()
  if name == "clip_zero":
    assert (w == 0.0).any()
  assert not ((w == 0) | (w == syn["Wmax"])).all()


@pytest.mark.slow  # two programs (float64 with numbers, float32): ~3-5 s
def test_stdp_synapse_network_from_nests_table():
  # 5 pre parrots -> 3 post parrots, all to all, 15 delays of 0.1-2.9 ms
  delays = [[round(0.1 * (1 + (7 * i + 3 * j) % 29), 1) for j in range(3)]
            for i in range(5)]
  syn = {"lambda": 0.02, "alpha": 1.05, "mu_plus": 1.0, "mu_minus": 1.0,
         "tau_plus": 18.0, "Wmax": 5.0, "weight": 2.0}
  with jax.enable_x64(True):  # mu = 1 given as numbers: multiplied
    rec, err = check_stdp(5, 3, syn, delays, 25.0, 20.0, 30.0, seed=7,
                          static=True)
  assert len(rec["weights"]) > 5 * 3 * 10
  # float32, the default: the same trajectories to float32's precision
  check_stdp(5, 3, syn, delays, 25.0, 20.0, 30.0, seed=7, dtype=jnp.float32,
             rtol=1e-5)


@jax.jit
def run_tsodyks2(params, index, weight, pre):
  """brainshard: per step, the rows of the neurons that fired through
  tsodyks2 (state per presynaptic neuron). Returns ``u``, ``x`` after each
  step ``[T, n]`` and the amplitudes delivered ``[T, n, max_degree]``."""
  model = Tsodyks2Synapse(**params)
  n = pre.shape[1]
  u = jnp.full((n,), params["u"], weight.dtype)
  x = jnp.full((n,), params["x"], weight.dtype)

  def step(carry, xs):
    u, x, t_last = carry
    s, pre_s = xs
    ids = jnp.nonzero(pre_s, size=n, fill_value=n)[0]
    out = tsodyks2_rows(model, ids, s, index, weight, u, x, t_last, DT)
    return (out.u, out.x, out.t_last), (out.u, out.x, out.delivered)

  carry = (u, x, jnp.full((n,), -1, jnp.int32))
  xs = (jnp.arange(STEPS, dtype=jnp.int32), pre)
  return jax.lax.scan(step, carry, xs)[1]


# NEST's own test (depression only), a facilitating synapse, and both with
# a negative weight and non-default initial u and x.
TSODYKS2_CASES = [
    {"U": 1.0, "u": 1.0, "x": 1.0, "tau_rec": 100.0, "tau_fac": 0.0,
     "weight": 1.0},
    {"U": 0.1, "u": 0.1, "x": 1.0, "tau_rec": 100.0, "tau_fac": 1000.0,
     "weight": 2.5},
    {"U": 0.5, "u": 0.3, "x": 0.7, "tau_rec": 800.0, "tau_fac": 20.0,
     "weight": -1.5},
]


@pytest.mark.slow  # one program for all cases: ~1 s for the first
@pytest.mark.parametrize("case", range(len(TSODYKS2_CASES)))
def test_tsodyks2_synapse_matches_nest(case):
  syn = TSODYKS2_CASES[case]
  pre = poisson_steps(30.0, seed=3 + case, gap=10)  # >= 1 ms apart
  probe_at = np.append((pre[:-1] + pre[1:]) // 2, pre[-1] + 5)
  stamps, rec, table, probed = run_nest(
      [pre], [np.array([], np.int64)], "tsodyks2_synapse", syn, [[0.1]], 20.0,
      probe={"at": probe_at, "keys": ["u", "x"]})
  s = stamps[0]
  assert len(s) == len(pre) > 15
  np.testing.assert_array_equal(rec["steps"], s)
  with jax.enable_x64(True):
    index, slot = index_of(table, 2)
    weight = jnp.zeros(index.capacity, jnp.float64).at[slot].set(syn["weight"])
    params = {k: jnp.float64(v) for k, v in syn.items()}
    u, x, amp = run_tsodyks2(params, index, weight, spike_matrix([s, []], 2))
    u, x, amp = (np.asarray(a) for a in (u, x, amp))
  nest_u = np.array([p[0][0] for p in probed])
  nest_x = np.array([p[1][0] for p in probed])
  np.testing.assert_allclose(u[s, 0], nest_u, rtol=RTOL, atol=0)
  np.testing.assert_allclose(x[s, 0], nest_x, rtol=RTOL, atol=0)
  np.testing.assert_allclose(amp[s, 0, 0], rec["weights"], rtol=RTOL, atol=0)
  assert np.ptp(nest_x) > 0.1  # the synapse did depress
