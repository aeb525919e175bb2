"""Plasticity rules without NEST: a user's pair rule against a plain
Python reference of NEST's lazy update, the history bound and its
detection, dtypes, and the same weights on 1, 2 and 4 shards bit for bit.
(``test_plasticity_nest.py`` checks stdp_synapse and tsodyks2 against NEST.)
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from brainshard._models.delivery.from_arrays import index_from_arrays
from brainshard._models.plasticity.history import post_history, record
from brainshard._models.plasticity.pair_rule import PairRule, pair_update
from brainshard._models.plasticity.rows import pair_rows
from brainshard._models.plasticity.stdp import StdpSynapse
from brainshard._models.plasticity.tsodyks2 import (
    Tsodyks2Synapse, tsodyks2_update)

from _util import mesh

DT = 0.1
TAU_PLUS, TAU_MINUS = 15.0, 25.0


def user_rule(xp):
  """A rule of one's own: soft-bounded, saturating facilitation; depression
  proportional to the weight. ``xp``: jnp for brainshard, math for the
  reference."""
  return (lambda w, k: w + 0.05 * (1.0 - w) * xp.tanh(2.0 * k),
          lambda w, k: w * (1.0 - 0.04 * k))


def reference(facilitate, depress, pre, post, delay, w, tau_plus=TAU_PLUS,
              tau_minus=TAU_MINUS):
  """NEST's stdp_synapse::send for one synapse in Python floats, with the
  post neuron's whole history: the weights after each pre spike."""
  hist, k, prev = [], 0.0, None
  for tp in post:
    k = (k * math.exp((prev - tp) * DT / tau_minus) if prev is not None
         else 0.0) + 1.0
    hist.append((tp, k))
    prev = tp
  kplus, t_last, out = 0.0, 0, []
  for t in pre:
    for tp, _ in hist:
      if t_last - delay < tp <= t - delay:
        w = facilitate(w, kplus * math.exp(
            (t_last - (tp + delay)) * DT / tau_plus))
    before = [(tp, km) for tp, km in hist if tp < t - delay]
    km = before[-1][1] * math.exp((before[-1][0] - (t - delay)) * DT
                                  / tau_minus) if before else 0.0
    w = depress(w, km)
    out.append(w)
    kplus = kplus * math.exp((t_last - t) * DT / tau_plus) + 1.0
    t_last = t
  return np.array(out)


def one_synapse(rule, pre, post, delay, w0, size, dtype=jnp.float64):
  """pair_update driven spike by spike: ``(weights after each pre spike,
  inexact updates)``. Post spikes are recorded up to each pre spike. Run
  twice, the window found by walking the history and from the synapse's
  ``seen`` (as a network keeps it): the same bits."""
  runs = [_one_synapse(rule, pre, post, delay, w0, size, dtype, kept)
          for kept in (False, True)]
  np.testing.assert_array_equal(runs[0][0], runs[1][0])
  assert runs[0][1] == runs[1][1]
  return runs[0]


def _one_synapse(rule, pre, post, delay, w0, size, dtype, kept):
  hist = post_history(1, size, dtype)
  w, kplus, t_last = jnp.asarray([w0], dtype), jnp.zeros(1, dtype), 0
  seen = jnp.zeros(1, jnp.int32)
  add = jax.jit(lambda h, t: record(h, jnp.array([True]), t, TAU_MINUS, DT))
  update = jax.jit(lambda w, kplus, t_last, t, h, seen: pair_update(
      rule, w, kplus, t_last, t, jnp.array([delay]), jnp.array([0]), h,
      TAU_MINUS, DT, seen if kept else None))
  out, bad, i = [], 0, 0
  for t in pre:
    while i < len(post) and post[i] <= t:
      hist = add(hist, int(post[i]))
      i += 1
    res = update(w, kplus, jnp.array([t_last]), int(t), hist, seen)
    w, kplus, t_last, seen = res.weight, res.kplus, int(t), res.seen
    out.append(float(w[0]))
    bad += int(~res.exact[0])
  return np.array(out), bad


def trains(seed, n, steps, rate_hz):
  rng = np.random.default_rng(seed)
  fired = rng.random((steps, n)) < rate_hz * DT / 1000.0
  fired[:5] = False
  return fired


@pytest.mark.slow  # compiles the scan and the loops (~2 s)
def test_a_user_rule_follows_nests_lazy_order():
  fac, dep = user_rule(jnp)
  rule = PairRule(fac, dep, TAU_PLUS)
  ref_fac, ref_dep = user_rule(math)
  with jax.enable_x64(True):
    fired = trains(1, 2, 10000, 100.0)
    pre, post = np.flatnonzero(fired[:, 0]), np.flatnonzero(fired[:, 1])
    for delay in (1, 17):
      ours, bad = one_synapse(rule, pre, post, delay, 0.4, size=64)
      want = reference(ref_fac, ref_dep, pre, post, delay, 0.4)
      assert bad == 0 and len(ours) > 80
      np.testing.assert_allclose(ours, want, rtol=1e-12, atol=0)


@pytest.mark.slow  # ~1 s of eager ops
def test_stdp_is_a_pair_rule_of_nests_two_functions():
  syn = StdpSynapse(Wmax=4.0, mu_plus=0.5, mu_minus=1.0)
  lam, alpha = syn.params["lambda"], syn.params["alpha"]

  def facilitate(w, k):  # NEST's facilitate_, written by a user
    norm = (w / 4.0) + (lam * jnp.power(1.0 - (w / 4.0), 0.5) * k)
    return jnp.where(norm < 1.0, norm * 4.0, 4.0)

  def depress(w, k):
    norm = (w / 4.0) - (alpha * lam * jnp.power(w / 4.0, 1.0) * k)
    return jnp.where(norm > 0.0, norm * 4.0, 0.0)

  w = jnp.linspace(0.0, 4.0, 9, dtype=jnp.float32)
  k = jnp.linspace(0.0, 3.0, 9, dtype=jnp.float32)
  rule = syn.rule()
  assert (rule.facilitate(w, k) == facilitate(w, k)).all()
  assert (rule.depress(w, k) == depress(w, k)).all()
  assert rule.facilitate(w, k).dtype == jnp.float32


@pytest.mark.slow  # a program per ring size (~3 s)
def test_the_history_is_exact_until_an_entry_it_needs_is_overwritten():
  # pre spikes at 100 and 300 (delay 1): the second update needs the ten
  # post spikes in (99, 299], plus one before them that it does not need
  pre, post = [100, 300], [50] + list(range(150, 250, 10))
  rule = StdpSynapse(mu_plus=0.0, mu_minus=0.0, alpha=0.1, tau_plus=TAU_PLUS,
                     **{"lambda": 0.1}).rule()
  with jax.enable_x64(True):
    want = reference(rule.facilitate, rule.depress, pre, post, 1, 1.0)
    ours, bad = one_synapse(rule, pre, post, 1, 1.0, 11)  # all eleven held
    assert bad == 0
    np.testing.assert_allclose(ours, want, rtol=1e-12)
    # ten held: exact, but flagged (the ring no longer reaches back to
    # t_last - d = 99, so it cannot tell)
    ours, bad = one_synapse(rule, pre, post, 1, 1.0, 10)
    assert bad == 1
    np.testing.assert_allclose(ours, want, rtol=1e-12)
    ours, bad = one_synapse(rule, pre, post, 1, 1.0, 6)  # needed ones lost
    assert bad == 1 and ours[1] != want[1]


@pytest.mark.slow  # a few programs (~1-3 s on a busy machine)
def test_dtypes_follow_the_weights():
  rule = StdpSynapse().rule()
  hist = record(post_history(3), jnp.array([True, False, True]), 4, 20.0, DT)
  assert hist.kminus.dtype == jnp.float32 and hist.times.dtype == jnp.int32
  out = pair_update(rule, jnp.ones(3, jnp.float32), jnp.ones(3), 0, 9,
                    jnp.ones(3, jnp.uint8), jnp.arange(3), hist, 20.0, DT)
  assert out.weight.dtype == out.kplus.dtype == jnp.float32
  assert out.t_last.dtype == jnp.int32 and out.exact.all()
  syn = Tsodyks2Synapse()
  got = tsodyks2_update(syn, 1.0, jnp.float32(0.5), jnp.float32(1.0), 0, 5, DT)
  assert got.u.dtype == got.x.dtype == got.amplitude.dtype == jnp.float32
  with jax.enable_x64(True):
    got = tsodyks2_update(syn, 1.0, jnp.float64(0.5), jnp.float64(1.0), 0, 5,
                          DT)
    assert got.x.dtype == jnp.float64


def test_whole_exponents_are_cs_pow():
  from brainshard._models.plasticity.stdp import power
  with jax.enable_x64(True):
    x = np.random.default_rng(3).random(2000)
    for mu in (0.0, 1.0, 2.0):
      got = np.asarray(power(jnp.asarray(x), mu))
      assert (got == np.array([math.pow(v, mu) for v in x])).all(), mu
    assert np.asarray(power(jnp.asarray(x), 0.4)).dtype == np.float64


def test_parameters_are_nests():
  with pytest.raises(ValueError, match="unknown parameter.*'tau_minus'"):
    StdpSynapse(tau_minus=20.0)  # the post neuron's, not the synapse's
  with pytest.raises(ValueError, match="same sign"):
    StdpSynapse(weight=-1.0)
  with pytest.raises(ValueError, match="'U'|U must"):
    Tsodyks2Synapse(U=1.5)
  assert StdpSynapse(**{"lambda": 0.5}).params["lambda"] == 0.5


def _network(n, seed=0):
  """n neurons, each onto 5 random others with delays of 1-20 steps."""
  rng = np.random.default_rng(seed)
  pre = np.repeat(np.arange(n), 5)
  post = np.concatenate([rng.choice(np.delete(np.arange(n), i), 5, False)
                         for i in range(n)])
  return pre, post, rng.integers(1, 21, pre.size)


def run_sharded(shards, fired, pre, post, delay, w0):
  """The network's STDP over ``fired [T, n]`` (each neuron both pre and
  post) in a ``jax.shard_map`` over ``shards`` devices: the final weights
  in the given synapse order and the inexact count."""
  n = fired.shape[1]
  m = mesh((shards,), ("x",))
  index = index_from_arrays(pre, post, np.full(pre.size, w0), delay, n=n,
                            n_shards=shards, mesh=m)
  rule = StdpSynapse(Wmax=3.0, tau_plus=TAU_PLUS, **{"lambda": 0.05}).rule()

  def shard(index, fired):
    n_local = index.n_local
    first = jax.lax.axis_index("x") * n_local
    weight = index.weight.astype(jnp.float64)
    state = (weight, jnp.zeros(n, jnp.float64), jnp.zeros(n, jnp.int32),
             post_history(n_local, 16, jnp.float64), jnp.int32(0),
             jnp.zeros(weight.shape, jnp.int32))
    # per-shard state: each shard's own (as States sharded P('x') are)
    state = (state[0],) + jax.tree.map(
        lambda a: jax.lax.pcast(a, ("x",), to="varying"), state[1:])

    def step(state, x):
      weight, kplus, t_last, hist, bad, seen = state
      s, spikes = x
      mine = jax.lax.dynamic_slice_in_dim(spikes, first, n_local)
      hist = record(hist, mine, s, TAU_MINUS, DT)
      ids = jnp.nonzero(spikes, size=8, fill_value=n)[0]
      out = pair_rows(rule, ids, s, index, weight, kplus, t_last, hist,
                      TAU_MINUS, DT, seen=seen)
      return (out.weight, out.kplus, out.t_last, hist, bad + out.inexact,
              out.seen), None

    xs = (jnp.arange(fired.shape[0], dtype=jnp.int32), fired)
    state, _ = jax.lax.scan(step, state, xs)
    return state[0], state[4][None]

  run = jax.jit(jax.shard_map(shard, mesh=m, in_specs=(P("x"), P()),
                              out_specs=(P("x"), P("x"))))
  weight, bad = run(index, jnp.asarray(fired))
  # slots back to the given order: per shard, by pre, given order kept
  weight = np.asarray(weight).reshape(shards, -1)
  n_local = n // shards
  out = np.empty(pre.size)
  for s in range(shards):
    sel = np.flatnonzero(post // n_local == s)
    sel = sel[np.argsort(pre[sel], kind="stable")]
    out[sel] = weight[s, :sel.size]
  return out, int(np.asarray(bad).sum())


@pytest.mark.slow  # three shard_map programs (~3 s)
def test_weights_are_the_same_on_1_2_and_4_shards_bit_for_bit():
  pre, post, delay = _network(16)
  fired = trains(2, 16, 3000, 60.0)
  with jax.enable_x64(True):
    ref, bad = run_sharded(1, fired, pre, post, delay, 1.0)
    assert bad == 0 and np.ptp(ref) > 0.1
    for shards in (2, 4):
      got, bad = run_sharded(shards, fired, pre, post, delay, 1.0)
      assert bad == 0
      np.testing.assert_array_equal(got, ref)
    # and they are NEST's rule: synapse by synapse, the Python reference
    rule = StdpSynapse(Wmax=3.0, tau_plus=TAU_PLUS, **{"lambda": 0.05}).rule()
    f = lambda w, k: float(rule.facilitate(jnp.float64(w), k))  # noqa: E731
    d = lambda w, k: float(rule.depress(jnp.float64(w), k))  # noqa: E731
    for k in range(0, pre.size, 13):
      want = reference(f, d, np.flatnonzero(fired[:, pre[k]]),
                       np.flatnonzero(fired[:, post[k]]), delay[k], 1.0)
      assert ref[k] == pytest.approx(want[-1], rel=1e-12)
