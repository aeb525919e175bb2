"""bs.vmap: batched States, shared States, write-back rules, random draws,
and compositions, each compared with jax.vmap of the hand-threaded step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from tests._util import mesh as cached_mesh

B, N = 8, 3


def close(a, b, tol=1e-6):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


class Ensemble:
  """B leaky integrators with per-member tau and a shared coupling W."""

  def __init__(self, b=B, n=N):
    self.V = bs.State(jnp.zeros((b, n)), name="V")
    self.tau = bs.ParamState(jnp.linspace(5.0, 20.0, b), name="tau")
    self.W = bs.State(jnp.eye(n) * 0.1 + 0.05, name="W")
    self.traces = 0

  def step(self, I):
    self.traces += 1
    V = self.V.value
    self.V.value = V + (-V + self.W.value @ V + I) / self.tau.value
    return self.V.value.sum()


def pure_step(V, tau, W, I):
  V = V + (-V + W @ V + I) / tau
  return V, V.sum()


def pure_run(V, tau, W, Is, in_axes=(0, 0, None, None)):
  outs = []
  for I in Is:
    V, out = jax.vmap(pure_step, in_axes=in_axes)(V, tau, W, I)
    outs.append(out)
  return V, outs


@pytest.mark.slow
def test_ensemble_eager_matches_pure_vmap_and_does_not_retrace():
  net = Ensemble()
  I = jnp.arange(N, dtype=jnp.float32)
  tau0, W0 = net.tau.value, net.W.value
  f = bs.vmap(net.step, in_axes=None,
              state_in_axes={net.V: 0, net.tau: 0})
  outs = [f(I) for _ in range(3)]
  # Made afresh on every call (as in a notebook): the same cached program.
  outs += [bs.vmap(net.step, in_axes=None,
                   state_in_axes={net.V: 0, net.tau: 0})(I) for _ in range(2)]
  V, ref = pure_run(jnp.zeros((B, N)), tau0, W0, [I] * 5)
  close(net.V.value, V)
  for a, b in zip(outs, ref):
    close(a, b)
  assert net.traces == 2  # discovery + the one compiled program
  assert net.tau.value is tau0 and net.W.value is W0  # read only: untouched


def test_batched_argument_and_type_key():
  net = Ensemble()
  Is = jnp.arange(B * N, dtype=jnp.float32).reshape(B, N)
  f = bs.vmap(net.step, state_in_axes={bs.ParamState: 0, net.V: 0})
  out = f(Is)
  V, ref = jax.vmap(pure_step, in_axes=(0, 0, None, 0))(
      jnp.zeros((B, N)), net.tau.value, net.W.value, Is)
  close(out, ref)
  close(net.V.value, V)


def test_bs_jit_of_vmap_traces_once():
  net = Ensemble()
  I = jnp.ones(N)
  f = bs.jit(bs.vmap(net.step, in_axes=None,
                     state_in_axes=lambda_dict(net)))
  outs = [f(I) for _ in range(4)]
  V, ref = pure_run(jnp.zeros((B, N)), net.tau.value, net.W.value, [I] * 4)
  close(net.V.value, V)
  close(outs[-1], ref[-1])
  assert net.traces == 2


def lambda_dict(net):
  # A predicate key: every State whose leading axis is the ensemble.
  return {lambda s: s is not net.W: 0}


def test_int_state_in_axes_batches_every_state_read():
  V = bs.State(jnp.arange(6.0).reshape(3, 2), name="V")
  g = bs.State(jnp.array([1.0, 2.0, 3.0]), name="g")

  def step():
    V.value = V.value * g.value
    return V.value.sum()

  out = bs.vmap(step, state_in_axes=0)()
  close(out, jnp.array([1.0, 10.0, 27.0]))
  close(V.value, jnp.array([[0.0, 1.0], [4.0, 6.0], [12.0, 15.0]]))


def test_state_axis_other_than_zero_and_negative():
  V = bs.State(jnp.arange(6.0).reshape(2, 3), name="V")  # members on axis 1
  k = bs.State(jnp.array([[1.0], [2.0], [3.0]]), name="k")  # (3, 1)

  def step():
    V.value = V.value * k.value[0]
    return V.value

  out = bs.vmap(step, state_in_axes={V: 1, k: 0}, out_axes=-1)()
  ref = jnp.arange(6.0).reshape(2, 3) * jnp.array([1.0, 2.0, 3.0])
  close(V.value, ref)
  close(out, ref)
  V.value = jnp.arange(6.0).reshape(2, 3)
  bs.vmap(step, state_in_axes={V: -1, k: -2})()
  close(V.value, ref)


def test_pytree_state_and_collective_over_axis_name():
  S = bs.State({"a": jnp.arange(4.0), "b": jnp.ones((4, 2))}, name="S")

  def step(x):
    s = S.value
    S.value = {"a": s["a"] + x, "b": s["b"] * 2}
    return jax.lax.pmean(s["a"], "ens")

  out = bs.vmap(step, state_in_axes={S: 0}, axis_name="ens")(jnp.ones(4))
  close(out, jnp.full(4, 1.5))
  close(S.value["a"], jnp.arange(4.0) + 1)
  close(S.value["b"], jnp.full((4, 2), 2.0))


def test_unbatched_write_of_unbatched_value_is_allowed():
  V = bs.State(jnp.zeros((4, 2)), name="V")
  t = bs.State(jnp.zeros(()), name="t")

  def step():
    V.value = V.value + 1.0
    t.value = t.value + 0.5  # the same for every member
    return V.value

  f = bs.vmap(step, state_in_axes={V: 0})
  f(); f()
  close(t.value, 1.0)
  close(V.value, jnp.full((4, 2), 2.0))


def test_batched_write_into_unbatched_state_is_an_error_and_changes_nothing():
  V = bs.State(jnp.arange(4.0), name="V")
  last = bs.State(jnp.zeros(()), name="last")

  def step():
    V.value = V.value + 1.0
    last.value = V.value  # differs per member
    return V.value

  before = (V.value, last.value)
  for f in (bs.vmap(step, state_in_axes={V: 0}),
            bs.jit(bs.vmap(step, state_in_axes={V: 0}))):
    with pytest.raises(ValueError, match=r"State 'last'.*state_out_axes"):
      f()
    assert V.value is before[0] and last.value is before[1]


def test_write_only_batched_state_needs_state_out_axes():
  V = bs.State(jnp.arange(4.0), name="V")
  rec = bs.State(jnp.zeros((4, 2)), name="rec")  # written, never read
  seen = []

  def step():
    rec.value = jnp.stack([V.value, 2 * V.value])  # per member: (2,)
    seen.append(jax.typeof(rec.value).shape)
    return V.value

  with pytest.raises(ValueError, match="'rec'"):
    bs.vmap(step, state_in_axes=0)()
  bs.vmap(step, state_in_axes=0, state_out_axes={rec: 0})()
  assert seen[-1] == (2,)  # seen unbatched inside each member
  close(rec.value, jnp.stack([jnp.arange(4.0), 2 * jnp.arange(4.0)], 1))
  # Naming it in state_in_axes also gives it its batch axis.
  rec.value = jnp.zeros((4, 2))
  bs.vmap(step, state_in_axes={V: 0, rec: 0})()
  close(rec.value, jnp.stack([jnp.arange(4.0), 2 * jnp.arange(4.0)], 1))


def test_batch_size_from_axis_size_when_nothing_else_is_batched():
  w = bs.State(jnp.arange(3.0), name="w")
  out = bs.vmap(lambda: w.value.sum(), axis_size=5)()
  close(out, jnp.full(5, 3.0))
  with pytest.raises(ValueError, match="nothing is batched"):
    bs.vmap(lambda: w.value.sum())()


def test_state_axis_beyond_rank_names_the_state_and_shape():
  tau = bs.ParamState(jnp.ones(4), name="tau")
  with pytest.raises(ValueError, match=r"ParamState 'tau'.*axis 1.*float32\[4\]"):
    bs.vmap(lambda: tau.value * 2, state_in_axes={tau: 1})()
  close(tau.value, jnp.ones(4))


def test_inconsistent_batch_sizes_name_the_state():
  V = bs.State(jnp.zeros((4, 2)), name="V")
  with pytest.raises(ValueError, match=r"State 'V'.*size 4.*size 3"):
    bs.vmap(lambda x: V.value + x, state_in_axes={V: 0},
            in_axes=None, axis_size=3)(jnp.ones(2))
  with pytest.raises(ValueError, match=r"argument.*size 5.*State 'V'"):
    bs.vmap(lambda x: V.value * x, state_in_axes={V: 0})(jnp.ones(5))


def test_bad_arguments():
  s = bs.State(jnp.ones(2))
  with pytest.raises(TypeError, match="state_in_axes"):
    bs.vmap(lambda: s.value, state_in_axes=[s])
  with pytest.raises(TypeError, match="ints"):
    bs.vmap(lambda: s.value, state_in_axes={s: "0"})
  with pytest.raises(ValueError, match="in_axes has 2 entries"):
    bs.vmap(lambda x: x, in_axes=(0, 0))(jnp.ones(2))


def test_foreign_jax_jit_around_a_writing_vmap_is_refused():
  V = bs.State(jnp.zeros(3), name="V")

  def step():
    V.value = V.value + 1.0

  with pytest.raises(bs.StateTraceError, match="'V'"):
    jax.jit(bs.vmap(step, state_in_axes=0))()
  close(V.value, jnp.zeros(3))


def test_jax_vmap_of_bs_jit_reading_states():
  W = bs.State(jnp.arange(6.0).reshape(2, 3), name="W")
  f = bs.jit(lambda x: W.value @ x)
  xs = jnp.arange(12.0).reshape(4, 3)
  close(jax.vmap(f)(xs), xs @ W.value.T)
  close(jax.vmap(bs.vmap(f, in_axes=0))(xs[None]), (xs @ W.value.T)[None])


def test_vmap_of_for_loop():
  net = Ensemble()
  Is = jnp.linspace(0.0, 1.0, 5 * N).reshape(5, N)

  def run(Is):
    return bs.for_loop(net.step, Is)

  out = bs.vmap(run, in_axes=None, state_in_axes={net.V: 0, net.tau: 0})(Is)
  V, ref = pure_run(jnp.zeros((B, N)), net.tau.value, net.W.value, Is)
  close(net.V.value, V)
  close(out, jnp.stack(ref, axis=1))


def test_for_loop_of_vmap_under_jit():
  net = Ensemble()
  Is = jnp.linspace(0.0, 1.0, 5 * N).reshape(5, N)
  step = bs.vmap(net.step, in_axes=None,
                 state_in_axes={net.V: 0, net.tau: 0})
  out = bs.jit(lambda Is: bs.for_loop(step, Is))(Is)
  V, ref = pure_run(jnp.zeros((B, N)), net.tau.value, net.W.value, Is)
  close(net.V.value, V)
  close(out, jnp.stack(ref))


def test_nested_vmap():
  V = bs.State(jnp.zeros((2, 3)), name="V")
  def inner(x):
    V.value = V.value + x
    return V.value
  outer = bs.vmap(bs.vmap(inner, state_in_axes={V: 0}), in_axes=None,
                  state_in_axes={V: 0})
  out = outer(jnp.arange(3.0))
  close(V.value, jnp.broadcast_to(jnp.arange(3.0), (2, 3)))
  close(out, V.value)


@pytest.mark.slow
@pytest.mark.parametrize("devices", [2, 8])
def test_ensemble_sharded_with_shard_map_matches_unsharded(devices):
  b = 16
  mesh = cached_mesh((devices,), ("x",))
  Is = jnp.linspace(0.0, 1.0, 4 * N).reshape(4, N)

  def run(net, sharded):
    step = bs.vmap(net.step, in_axes=None,
                   state_in_axes={net.V: 0, net.tau: 0})
    if sharded:
      step = bs.shard_map(step, mesh=mesh, in_specs=P(), out_specs=P("x"),
                          state_in_specs={net.V: P("x"), net.tau: P("x")})
    return bs.jit(lambda Is: bs.for_loop(step, Is))(Is)

  ref_net, net = Ensemble(b), Ensemble(b)
  # Placed where the sharded program keeps it (bs.jit donates V's buffer).
  net.V.value = jax.device_put(net.V.value, NamedSharding(mesh, P("x")))
  ref = run(ref_net, False)
  out = run(net, True)
  close(out, ref)
  close(net.V.value, ref_net.V.value)
  assert net.V.value.sharding.spec[0] == "x"
  V, pure_out = pure_run(jnp.zeros((b, N)), ref_net.tau.value,
                         ref_net.W.value, Is)
  close(net.V.value, V)


# -- random numbers -----------------------------------------------------------


@pytest.mark.slow
def test_members_draw_independent_reproducible_numbers():
  rng = bs.RandomState(3, name="rng")
  V = bs.State(jnp.zeros((4, 2)), name="V")

  def step():
    V.value = V.value + rng.normal(size=2)
    return V.value

  f = bs.vmap(step, state_in_axes=0)  # the int leaves the RandomState shared
  a = f()
  assert len({tuple(np.asarray(r)) for r in a}) == 4
  assert rng.value.shape == ()  # still one key
  # Hand-written: split the key once, fold in each member's index.
  key, sub = jax.random.split(jax.random.key(3))
  ref = jax.vmap(lambda i: jax.random.normal(
      jax.random.fold_in(sub, i), (2,)))(jnp.arange(4))
  close(a, ref)
  assert (jax.random.key_data(rng.value) == jax.random.key_data(key)).all()
  b = f()
  assert not np.allclose(np.asarray(b - a), np.asarray(a))  # advanced
  rng.seed(3)
  V.value = jnp.zeros((4, 2))
  close(f(), a)  # reproducible from the seed


@pytest.mark.slow
def test_explicitly_batched_keys():
  keys = jax.random.split(jax.random.key(0), 4)
  rng = bs.RandomState(0, name="rng")
  rng.value = keys

  def draw():
    return rng.uniform(size=3)

  out = bs.vmap(draw, state_in_axes={rng: 0})()
  assert rng.value.shape == (4,)

  def member(k, i):
    k2, sub = jax.random.split(k)
    return k2, jax.random.uniform(jax.random.fold_in(sub, i), (3,))
  new_keys, ref = jax.vmap(member)(keys, jnp.arange(4))
  close(out, ref)
  assert (jax.random.key_data(rng.value) == jax.random.key_data(new_keys)).all()


@pytest.mark.slow
def test_random_draws_sharded_ensemble_equal_unsharded():
  mesh = cached_mesh((8,), ("x",))
  rng = bs.RandomState(0, name="rng")
  V = bs.State(jnp.zeros((16, 2)), name="V")

  def step():
    V.value = V.value + bs.random.normal(size=2, key=rng)
    return V.value

  ens = bs.vmap(step, state_in_axes={V: 0})
  a = ens()
  rng.seed(0)
  V.value = jnp.zeros((16, 2))
  b = bs.shard_map(ens, mesh=mesh, in_specs=(), out_specs=P("x"),
                   state_in_specs={V: P("x")})()
  close(a, b)
  assert len({tuple(np.asarray(r)) for r in a}) == 16


@pytest.mark.slow
def test_write_only_states_give_the_batch_size_and_kwargs_are_batched():
  V = bs.State(jnp.zeros((4, 2)), name="V")
  rng = bs.RandomState(1, name="rng")

  def reset():
    V.value = rng.uniform(size=2)

  bs.vmap(reset, state_out_axes={V: 0})()  # size 4, from V's own shape
  key, sub = jax.random.split(jax.random.key(1))
  close(V.value, jax.vmap(lambda i: jax.random.uniform(
      jax.random.fold_in(sub, i), (2,)))(jnp.arange(4)))

  def scaled(x, *, scale):
    return V.value * x * scale

  out = bs.vmap(scaled, state_in_axes={V: 0})(jnp.ones(4), scale=jnp.arange(4.0))
  close(out, V.value * jnp.arange(4.0)[:, None])


# -- the example --------------------------------------------------------------


def _ensemble_example():
  from examples import ensemble
  return ensemble


@pytest.mark.slow
def test_ensemble_example_runs_and_sharding_changes_nothing(tmp_path):
  ensemble = _ensemble_example()
  plot = tmp_path / "rates.png"
  result = ensemble.main(["--n", "40", "--members", "8", "--duration", "0.02",
                          "--devices", "4", "--plot", str(plot)])
  assert plot.stat().st_size > 1000
  rates = result["rates"]
  assert rates.shape == (8,) and (rates > 0).all()
  one = ensemble.Ensemble(result["weights"], None, n=40).run(20.0)
  np.testing.assert_array_equal(one, rates)  # same draws, same spikes
  assert rates[-1] > rates[0]  # more excitation, more spikes


@pytest.mark.slow
def test_jax_grad_around_a_reading_vmap_and_cond_inside_members():
  W = bs.State(jnp.array([1.0, 2.0, 3.0]), name="W")
  g = jax.grad(lambda x: bs.vmap(lambda xi: (W.value * xi).sum())(x).sum())
  close(g(jnp.ones((4, 3))), jnp.broadcast_to(W.value, (4, 3)))

  n = bs.State(jnp.zeros(4, jnp.int32), name="n")

  def member(x):
    return bs.cond(x > 0, lambda: bump(x), lambda: x)

  def bump(x):
    n.value = n.value + 1
    return 2 * x

  out = bs.vmap(member, state_in_axes={n: 0})(jnp.array([1.0, -1.0, 2.0, 0.0]))
  close(out, jnp.array([2.0, -1.0, 4.0, 0.0]))
  np.testing.assert_array_equal(n.value, [1, 0, 1, 0])


@pytest.mark.slow
def test_states_sharded_along_the_batch_axis_at_top_level(axis_type):
  # An ensemble laid out over a 2-D mesh (members over 'x', neurons over
  # 'y'), stepped by bs.vmap without shard_map: the compiler shards it.
  mesh = cached_mesh((4, 2), ("x", "y"), axis_type)
  net = Ensemble(8, 4)
  net.V.value = jax.device_put(jnp.arange(32.0).reshape(8, 4) / 32,
                               NamedSharding(mesh, P("x", "y")))
  net.tau.value = jax.device_put(net.tau.value, NamedSharding(mesh, P("x")))
  V0 = net.V.value
  f = bs.vmap(net.step, in_axes=None, state_in_axes={net.V: 0, net.tau: 0})
  with jax.set_mesh(mesh):
    outs = [f(jnp.ones(4)), bs.jit(f)(jnp.ones(4))]
  V, ref = pure_run(V0, net.tau.value, net.W.value, [jnp.ones(4)] * 2)
  close(net.V.value, V, tol=1e-5)
  close(outs[1], ref[1], tol=1e-5)
  assert net.V.value.sharding.spec[0] == "x"


@pytest.mark.slow
def test_random_draws_in_a_loop_inside_members_match_hand_written():
  rng = bs.RandomState(0, name="rng")
  V = bs.State(jnp.zeros((4, 2)), name="V")

  def step(_):
    V.value = V.value + rng.normal(size=2)

  def run():
    bs.for_loop(step, jnp.arange(3))
    return V.value

  a = bs.vmap(run, state_in_axes={V: 0})()
  key, v = jax.random.key(0), jnp.zeros((4, 2))
  for _ in range(3):  # per step: one split, each member folds in its index
    key, sub = jax.random.split(key)
    v = v + jax.vmap(lambda i: jax.random.normal(
        jax.random.fold_in(sub, i), (2,)))(jnp.arange(4))
  close(a, v, tol=1e-5)
  rng.seed(0)
  V.value = jnp.zeros((4, 2))
  close(bs.vmap(bs.jit(run), state_in_axes={V: 0})(), a)


def test_random_draw_in_shard_map_inside_vmap_says_where_to_put_vmap():
  # JAX cannot combine the member index of a vmap around a shard_map with
  # the per-shard key (a bare AssertionError in jax.lax.pvary before).
  mesh = cached_mesh((8,), ("x",))
  rng = bs.RandomState(0)
  v = bs.State(jnp.zeros((16, 4)))
  key_before, v_before = rng.value, v.value

  def body():
    v.value = v.value + rng.normal(size=v.value.shape)
    return v.value.sum()

  step = bs.vmap(bs.shard_map(body, mesh=mesh, in_specs=(), out_specs=P(),
                              state_in_specs={v: P("x")}),
                 state_in_axes={v: 1})
  with pytest.raises(NotImplementedError, match="Put bs.vmap inside"):
    step()
  assert rng.value is key_before and v.value is v_before
