"""RandomState and bs.random: reproducibility, fresh numbers under every
transform, and independent numbers on every shard."""

import ast
import inspect
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard._simulation.random import state as _random
from conftest import make_mesh


def test_seed_reproduces_and_draws_advance():
  bs.random.seed(3)
  a = bs.random.normal(size=5)
  b = bs.random.normal(size=5)
  bs.random.seed(3)
  np.testing.assert_array_equal(bs.random.normal(size=5), a)
  assert not np.array_equal(a, b)


@pytest.mark.parametrize("seed", [7, jax.random.key(7), jax.random.PRNGKey(7)])
def test_random_state_seeds(seed):
  rng = bs.RandomState(seed)
  assert jnp.issubdtype(rng.value.dtype, jax.dtypes.prng_key)
  x = rng.uniform(size=4)
  np.testing.assert_array_equal(bs.RandomState(7).uniform(size=4), x)


def test_random_state_lists_every_draw_in_its_class():
  # RandomState is whole in one place: every draw of bs.random is a method
  # defined in its class body (none bound onto it from another module),
  # drawing from the state through the module-level function.
  body = ast.parse(textwrap.dedent(inspect.getsource(bs.RandomState))).body[0]
  defined = {node.name for node in body.body
             if isinstance(node, ast.FunctionDef)} | {
                 target.id for node in body.body
                 if isinstance(node, ast.Assign) for target in node.targets}
  draws = set(bs.random.__all__) - {
      "RandomState", "default_state", "seed", "DEFAULT_SEED",
      "poisson_table", "binomial_table"}  # (tables: no key, no draw)
  assert draws <= defined, sorted(draws - defined)
  added = {n for n in vars(bs.RandomState) if not n.startswith("__")}
  assert added <= defined, sorted(added - defined)  # nothing bound later
  rng = bs.RandomState(4)
  np.testing.assert_array_equal(rng.laplace(size=3),
                                bs.random.laplace(size=3, key=bs.RandomState(4)))


def test_bad_seeds_and_keys():
  with pytest.raises(TypeError, match="RandomState"):
    bs.RandomState(1.5)
  with pytest.raises(ValueError, match="one PRNG key"):
    bs.RandomState(jax.random.split(jax.random.key(0), 2))
  with pytest.raises(TypeError, match="not a RandomState"):
    bs.random.normal(key=bs.State(jnp.zeros(2), name="z"))


@pytest.mark.slow
def test_shapes_dtypes_and_statistics():
  rng = bs.RandomState(0)
  n = rng.normal(2.0, 3.0, size=(20000,))
  assert n.dtype == jnp.float32 and n.shape == (20000,)
  assert abs(float(n.mean()) - 2.0) < 0.1 and abs(float(n.std()) - 3.0) < 0.1
  u = rng.uniform(-1.0, 1.0, size=(100, 100))
  assert float(u.min()) >= -1.0 and float(u.max()) < 1.0
  assert abs(float(u.mean())) < 0.03
  b = rng.bernoulli(0.3, size=10000)
  assert b.dtype == jnp.bool_ and abs(float(b.mean()) - 0.3) < 0.03
  p = rng.poisson(4.0, size=10000)
  assert p.dtype == jnp.int32 and abs(float(p.mean()) - 4.0) < 0.15
  r = rng.randint(5, size=1000)
  assert int(r.min()) == 0 and int(r.max()) == 4
  r = rng.randint(10, 12, size=(3, 4))
  assert r.shape == (3, 4) and set(np.unique(r)) <= {10, 11}
  # without size: the parameters' broadcast shape
  assert rng.normal(jnp.zeros((2, 3)), 1.0).shape == (2, 3)
  assert rng.poisson(jnp.ones(4)).shape == (4,)


def test_jit_draws_match_eager_draws_and_do_not_retrace():
  rng = bs.RandomState(11)
  eager = [rng.normal(size=3) for _ in range(3)]
  rng.seed(11)
  traces = []

  @bs.jit
  def draw():
    traces.append(1)
    return rng.normal(size=3)

  jitted = [draw() for _ in range(3)]
  assert len(traces) <= 2
  for a, b in zip(eager, jitted):
    np.testing.assert_array_equal(a, b)


def test_fresh_numbers_every_loop_step_and_key_advances():
  rng = bs.RandomState(5)
  xs = bs.for_loop(lambda: rng.uniform(size=4), length=6)
  assert len({tuple(np.asarray(r)) for r in xs}) == 6
  rng2 = bs.RandomState(5)
  for row in xs:  # the loop draws exactly what six eager draws draw
    np.testing.assert_array_equal(rng2.uniform(size=4), row)
  np.testing.assert_array_equal(jax.random.key_data(rng.value),
                                jax.random.key_data(rng2.value))


def test_explicit_key_argument_does_not_advance_anything():
  key = jax.random.key(1)
  before = jax.random.key_data(bs.random.default_state().value)
  a = bs.random.normal(size=3, key=key)
  np.testing.assert_array_equal(a, bs.random.normal(size=3, key=key))
  np.testing.assert_array_equal(
      jax.random.key_data(bs.random.default_state().value), before)
  assert bs.random.split_key(2, key=key).shape == (2,)


def test_default_state_created_lazily_inside_a_trace(monkeypatch):
  monkeypatch.setattr(_random, "_default", None)
  x = bs.jit(lambda: bs.random.normal(size=2))()
  state = _random._default
  assert state is not None and not isinstance(state._value, jax.core.Tracer)
  bs.random.seed(_random.DEFAULT_SEED)
  expected = bs.RandomState(_random.DEFAULT_SEED).normal(size=2)
  np.testing.assert_array_equal(x, expected)


# ----------------------------------------------------------------------------
# shard_map


def _per_shard_draw(mesh, rng, size=(2, 64)):
  def body():
    return rng.normal(size=size)
  spec = P(mesh.axis_names)
  return bs.shard_map(body, mesh=mesh, in_specs=(), out_specs=spec)


@pytest.mark.parametrize("shape,names", [((8,), ("x",)), ((2, 4), ("x", "y"))])
def test_shards_draw_independent_numbers(shape, names):
  mesh = make_mesh(shape, names)
  rng = bs.RandomState(0)
  out = np.asarray(_per_shard_draw(mesh, rng)())  # (n_shards * 2, 64)
  blocks = out.reshape(-1, 2 * 64)
  n = blocks.shape[0]
  assert n == 8
  assert len({b.tobytes() for b in blocks}) == n  # every shard differs
  corr = np.corrcoef(blocks)
  assert np.abs(corr[~np.eye(n, dtype=bool)]).max() < 0.5
  assert abs(out.mean()) < 0.1 and abs(out.std() - 1.0) < 0.1


def test_shard_draws_reproducible_and_key_stays_replicated():
  mesh = make_mesh((4,), ("x",))
  rng = bs.RandomState(9)
  draw = _per_shard_draw(mesh, rng)
  first = draw()
  second = draw()
  assert not np.array_equal(first, second)
  key_after = jax.random.key_data(rng.value)
  rng.seed(9)
  np.testing.assert_array_equal(draw(), first)
  # the key advanced exactly as two unsharded draws advance it
  ref = bs.RandomState(9)
  ref.normal(size=1)
  ref.normal(size=1)
  np.testing.assert_array_equal(key_after, jax.random.key_data(ref.value))


def test_fresh_per_shard_numbers_every_step_of_a_sharded_loop():
  mesh = make_mesh((4,), ("x",))
  rng = bs.RandomState(2)

  def body():
    return bs.for_loop(lambda: rng.uniform(size=(3,)), length=5)

  out = np.asarray(bs.shard_map(body, mesh=mesh, in_specs=(),
                                out_specs=P(None, "x"))())
  assert out.shape == (5, 12)
  cells = out.reshape(5, 4, 3)  # (step, shard, value)
  flat = {cells[t, s].tobytes() for t in range(5) for s in range(4)}
  assert len(flat) == 20


def test_loop_of_shard_map_draws_match_shard_map_of_loop():
  mesh = make_mesh((4,), ("x",))
  rng = bs.RandomState(4)
  step = bs.shard_map(lambda: rng.normal(size=(2,)), mesh=mesh, in_specs=(),
                      out_specs=P("x"))
  a = bs.jit(lambda: bs.for_loop(step, length=3))()
  rng.seed(4)
  b = bs.shard_map(lambda: bs.for_loop(lambda: rng.normal(size=(2,)),
                                       length=3),
                   mesh=mesh, in_specs=(), out_specs=P(None, "x"))()
  np.testing.assert_array_equal(a, b)


def test_default_state_in_shard_map_and_split_key():
  mesh = make_mesh((8,), ("x",))

  def body():
    k = bs.random.split_key()
    return jax.random.key_data(k)[None]

  keys = np.asarray(bs.shard_map(body, mesh=mesh, in_specs=(),
                                 out_specs=P("x"))())
  assert len({k.tobytes() for k in keys}) == 8


# ----------------------------------------------------------------------------
# threads


def _in_threads(n_threads, per_thread, draw):
  """Runs ``draw()`` ``per_thread`` times in each of ``n_threads`` threads
  started together; returns every result."""
  import threading
  barrier = threading.Barrier(n_threads)
  results, errors = [], []

  def worker():
    try:
      barrier.wait()
      mine = [draw() for _ in range(per_thread)]
      results.extend(mine)  # list.extend is atomic under the GIL
    except BaseException as e:  # pragma: no cover - reported below
      errors.append(e)

  threads = [threading.Thread(target=worker) for _ in range(n_threads)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors, errors
  return results


def _key_bytes(key):
  return np.asarray(jax.random.key_data(key)).tobytes()


def test_threads_drawing_from_one_state_advance_the_key_once_per_draw():
  n_threads, per_thread = 8, 25
  rng = bs.RandomState(123)
  keys = _in_threads(n_threads, per_thread,
                     lambda: _key_bytes(rng.split_key()))
  final = _key_bytes(rng.value)
  ref = bs.RandomState(123)
  expected = [_key_bytes(ref.split_key()) for _ in keys]
  assert len(set(keys)) == len(keys)  # no two draws shared a key
  assert set(keys) == set(expected)   # the same keys as sequential draws
  assert final == _key_bytes(ref.value)  # advanced once per draw


def test_threads_drawing_numbers_from_the_default_state():
  n_threads, per_thread = 8, 25
  bs.random.seed(77)
  draws = _in_threads(n_threads, per_thread,
                      lambda: np.asarray(bs.random.uniform(size=3)).tobytes())
  final = _key_bytes(bs.random.default_state().value)
  bs.random.seed(77)
  expected = [np.asarray(bs.random.uniform(size=3)).tobytes() for _ in draws]
  assert len(set(draws)) == len(draws)
  assert set(draws) == set(expected)
  assert final == _key_bytes(bs.random.default_state().value)


def test_threads_mixing_eager_and_jitted_draws_share_no_key():
  # A bs.jit call that draws holds the state from reading its key until it
  # writes the new one back; an eager draw in another thread must not slip
  # in between (it would reuse the key the jitted call used).
  rng = bs.RandomState(5)
  jitted = bs.jit(lambda: jax.random.key_data(rng.split_key()))
  jitted()  # compile outside the race
  toggle = iter(range(10 ** 6))

  def draw():
    if next(toggle) % 2:
      return np.asarray(jitted()).tobytes()
    return _key_bytes(rng.split_key())

  rng.seed(5)
  keys = _in_threads(8, 20, draw)
  final = _key_bytes(rng.value)
  ref = bs.RandomState(5)
  expected = [_key_bytes(ref.split_key()) for _ in keys]
  assert len(set(keys)) == len(keys)
  assert set(keys) == set(expected)
  assert final == _key_bytes(ref.value)


# ----------------------------------------------------------------------------
# The mesh changes nothing: a shard draws its block of the unsharded draw


def _draws(rng, n):
  """Several samplers at per-shard size ``64 // n`` (global 64)."""
  s = (64 // n,)
  return (rng.normal(1.0, 2.0, size=s), rng.uniform(size=s),
          rng.randint(1000, size=s), rng.bernoulli(0.3, size=s),
          rng.poisson(2.5, size=s), rng.gamma(2.0, size=s),
          rng.binomial(12, 0.4, size=s), rng.choice(9, size=s),
          rng.truncated_normal(-1.0, 2.0, size=s))


@pytest.fixture(scope="module")
def unsharded_draws():
  """_draws at global size 64, compiled, from seed 21, and the key after."""
  # Compiled, as the sharded program is: an eager draw computes with its
  # parameters at run time, where XLA may fold constants (last-bit changes).
  rng = bs.RandomState(21)
  whole = [np.asarray(x) for x in bs.jit(lambda: _draws(rng, 1))()]
  ref = bs.RandomState(21)
  _draws(ref, 1)
  return whole, np.asarray(jax.random.key_data(ref.value))


@pytest.mark.slow
# 1 device (the shard_map of the whole draw) and 8 (eight blocks of 8, shard
# indices above 1); 2 and 4 devices draw blocks of the same kind.
@pytest.mark.parametrize("n", [1, 8])
def test_sharded_draws_are_the_unsharded_draw_on_any_mesh(n, unsharded_draws):
  whole, key_after = unsharded_draws
  rng = bs.RandomState(21)
  mesh = make_mesh((n,), ("x",))
  f = bs.shard_map(lambda: _draws(rng, n), mesh=mesh, in_specs=(),
                   out_specs=P("x"))
  for name, a, b in zip(["normal", "uniform", "randint", "bernoulli",
                         "poisson", "gamma", "binomial", "choice",
                         "truncated_normal"], whole, f()):
    np.testing.assert_array_equal(b, a, err_msg=name)
  # the key advanced exactly as the unsharded draws advanced it
  np.testing.assert_array_equal(jax.random.key_data(rng.value), key_after)


@pytest.mark.parametrize("n", [1, 8])
def test_count_samplers_take_sharded_per_element_parameters(n):
  # A per-neuron rate is a sharded input: the samplers' loop carry must vary
  # over the axis even where the key does not (1 device, where it used to
  # fail with a while_loop carry type error).
  lam, p = jnp.linspace(0.1, 3.0, 16), jnp.linspace(0.1, 0.9, 16)
  cnt = jnp.arange(16, dtype=jnp.int32)

  def draws(rng, lam, p, cnt):
    s = lam.shape
    return jnp.stack([rng.poisson(lam, size=s), rng.binomial(10, p, size=s),
                      rng.binomial(cnt, 0.3, size=s),
                      rng.hypergeometric(cnt, 5, 4, size=s)])

  rng = bs.RandomState(3)
  # traced rates on both sides: the same algorithm (a concrete rate would
  # be inverted against a table, random_small)
  whole = np.asarray(bs.jit(lambda *a: draws(rng, *a))(lam, p, cnt))
  rng.seed(3)
  f = bs.shard_map(lambda *a: draws(rng, *a), mesh=make_mesh((n,), ("x",)),
                   in_specs=P("x"), out_specs=P(None, "x"))
  np.testing.assert_array_equal(np.asarray(bs.jit(f)(lam, p, cnt)), whole)


@pytest.mark.slow
def test_two_d_mesh_and_a_spec_splitting_a_non_leading_axis():
  mesh = make_mesh((2, 4), ("x", "y"))
  whole = np.asarray(bs.RandomState(3).normal(size=(4, 8, 3)))
  rng = bs.RandomState(3)
  cases = [  # (spec, per-shard size, out_specs)
      (P("x", "y"), (2, 2, 3), P("x", "y")),
      (P(None, ("x", "y")), (4, 1, 3), P(None, ("x", "y"))),
      (P("y", "x"), (1, 4, 3), P("y", "x")),
  ]
  for spec, size, out in cases:
    rng.seed(3)
    got = bs.shard_map(lambda: rng.normal(size=size, spec=spec), mesh=mesh,
                       in_specs=(), out_specs=out)()
    np.testing.assert_array_equal(got, whole, err_msg=str(spec))


def test_mesh_axes_the_spec_does_not_name_draw_equal_numbers():
  mesh = make_mesh((2, 4), ("x", "y"))
  rng = bs.RandomState(8)
  # only 'y' splits the draw: the two 'x' rows of shards hold equal blocks
  both = bs.shard_map(
      lambda: rng.uniform(size=(1, 2), spec=P(None, "y"))
      + jnp.zeros((1, 1)), mesh=mesh, in_specs=(), out_specs=P("x", "y"))()
  both = np.asarray(both)
  np.testing.assert_array_equal(both[0], both[1])
  np.testing.assert_array_equal(both[0], bs.RandomState(8).uniform(size=8))
  # a scalar draw (no leading axis) is the same on every shard
  rng.seed(8)
  s = bs.shard_map(lambda: rng.normal()[None], mesh=mesh, in_specs=(),
                   out_specs=P(("x", "y")))()
  np.testing.assert_array_equal(s, np.full(8, bs.RandomState(8).normal()))


def _lif_step(v, rng, size, spec=None):
  noise = rng.normal(0.0, 3.0, size=size, spec=spec)
  v.value = v.value + (-v.value + 12.0 + noise) * 0.1
  spikes = v.value > 10.0
  v.value = jnp.where(spikes, 0.0, v.value)
  return spikes


@pytest.mark.slow
def test_noisy_simulation_gives_identical_spikes_on_1_2_4_8_devices():
  steps, n = 40, 64
  v = bs.State(jnp.zeros(n), name="v")
  rng = bs.RandomState(0, name="noise")
  ref = np.asarray(bs.for_loop(lambda: _lif_step(v, rng, (n,)), length=steps))
  assert 0 < ref.sum() < ref.size  # the noise matters
  for d in (1, 2, 4, 8):
    mesh = make_mesh((d,), ("x",))
    v.value, _ = jnp.zeros(n), rng.seed(0)
    run = bs.jit(bs.shard_map(
        lambda: bs.for_loop(lambda: _lif_step(v, rng, (n // d,)), length=steps),
        mesh=mesh, in_specs=(), out_specs=P(None, "x"),
        state_in_specs={v: P("x")}))
    np.testing.assert_array_equal(run(), ref, err_msg=f"{d} devices")
    # an eager loop over an eager shard_map step: the same spikes again
    v.value, _ = jnp.zeros(n), rng.seed(0)
    step = bs.shard_map(lambda: _lif_step(v, rng, (n // d,)), mesh=mesh,
                        in_specs=(), out_specs=P("x"), state_in_specs={v: P("x")})
    np.testing.assert_array_equal(np.stack([step() for _ in range(3)]),
                                  ref[:3], err_msg=f"eager, {d} devices")


def test_samplers_refuse_to_split_what_they_permute_and_change_nothing():
  mesh = make_mesh((4,), ("x",))
  rng = bs.RandomState(1, name="rng")
  before = jax.random.key_data(rng.value)
  cases = [
      (lambda: rng.permutation(jnp.arange(8)), "permutation.*axis 0.*'x'"),
      (lambda: rng.choice(20, size=4, replace=False), "choice.*without"),
      (lambda: rng.multinomial(5, jnp.ones(4) / 4, size=(2, 1),
                               spec=P(None, None, "x")), "multinomial.*event axis"),
      (lambda: rng.normal(size=4, spec=P("z")), "axis 'z'.*manual axes"),
      (lambda: rng.normal(size=4, spec=P("x", "x")), "spec=.*2 entries"),
      (lambda: rng.normal(size=4, spec="x"), "PartitionSpec"),
  ]
  for body, match in cases:
    f = bs.shard_map(body, mesh=mesh, in_specs=(), out_specs=P("x"))
    with pytest.raises((ValueError, TypeError), match=match):
      f()
    np.testing.assert_array_equal(jax.random.key_data(rng.value), before)
  # eager, outside shard_map: a bad spec changes nothing either
  with pytest.raises(ValueError, match="2 entries"):
    rng.normal(size=3, spec=P(None, None))
  np.testing.assert_array_equal(jax.random.key_data(rng.value), before)


@pytest.mark.slow
def test_permutation_of_an_unsplit_axis_is_the_unsharded_permutation():
  mesh = make_mesh((4,), ("x",))
  x = jnp.arange(32).reshape(8, 4)
  whole = np.asarray(bs.RandomState(6).permutation(x.T, axis=0))
  rng = bs.RandomState(6)
  got = bs.shard_map(lambda xb: rng.permutation(xb, axis=0, spec=P(None, "x")),
                     mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"))(
                         x.T)
  np.testing.assert_array_equal(got, whole)
  rng.seed(6)
  ind = bs.RandomState(6).permutation(x.T, axis=0, independent=True)
  got = bs.shard_map(lambda xb: rng.permutation(xb, axis=0, independent=True,
                                                spec=P(None, "x")),
                     mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"))(
                         x.T)
  np.testing.assert_array_equal(got, ind)


def test_unrolled_threefry_gives_the_primitives_bits():
  # random_blocks draws with its own fused Threefry-2x32 on CPU (JAX's CPU
  # lowering is a rolled loop, ~4x slower); the bits must be JAX's.
  from brainshard._core import compat
  from brainshard._simulation.random import blocks as rb
  words = jax.random.bits(jax.random.key(9), (4, 1000), jnp.uint32)
  want = compat.threefry2x32_p.bind(*words)
  got = jax.jit(rb._threefry2x32)(*words)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("shape", [(7717,), (5, 333), (64 * 40,)])
@pytest.mark.parametrize("dtype", [jnp.uint32, jnp.uint8])
def test_odd_sized_cpu_draws_keep_their_bits(shape, dtype):
  # On CPU a draw of >= 1024 elements that is not a multiple of 64 is hashed
  # over the rounded-up length and cut (XLA:CPU leaves an odd-length fused
  # hash scalar): element i must still be counter i, JAX's bits.
  from brainshard._simulation.random import blocks as rb
  key = jax.random.key(11)
  got = jax.jit(lambda: jax.random.bits(rb.block_key(key, 0, 0), shape,
                                        dtype))()
  np.testing.assert_array_equal(np.asarray(got),
                                np.asarray(jax.random.bits(key, shape, dtype)))


def test_block_keys_carry_the_counter_into_the_high_word():
  from brainshard._core import compat
  from brainshard._simulation.random import blocks as rb
  key = jax.random.key(4)
  k1, k2 = jax.random.key_data(key)
  lo0 = 2 ** 32 - 2
  got = jax.random.bits(rb.block_key(key, 7, lo0), (4,))
  hi = jnp.array([7, 7, 8, 8], jnp.uint32)
  lo = jnp.array([lo0, lo0 + 1, 0, 1], jnp.uint32)
  b1, b2 = compat.threefry2x32_p.bind(k1, k2, hi, lo)
  np.testing.assert_array_equal(got, b1 ^ b2)
  # 64-bit multiply-add of the row offsets, against Python integers
  x = np.array([0, 1, 65537, 2 ** 32 - 1], np.uint32)
  for c in (3, 2 ** 32 + 5, 2 ** 40 - 1):
    h, l = rb._mul_add(jnp.uint32(1), jnp.uint32(2 ** 32 - 1), jnp.asarray(x), c)
    want = [((1 << 32) + 2 ** 32 - 1 + int(v) * c) % 2 ** 64 for v in x]
    assert [(int(a) << 32) | int(b) for a, b in zip(h, l)] == want


def test_a_seed_past_64_bits_is_a_clear_error():
  with pytest.raises(ValueError, match=r"a seed must be a 64-bit int"):
    bs.RandomState(2**63)
  bs.RandomState(2**63 - 1)
