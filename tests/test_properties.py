"""Property tests: random meshes, shapes and specs; bs.shard_map of an
elementwise stateful update must equal the same update done in numpy, and
a written state must leave with the spec it came in with."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import brainshard as bs
from _util import mesh

MESHES = [
    ((1,), ("x",)), ((2,), ("x",)), ((4,), ("x",)), ((8,), ("x",)),
    ((2, 2), ("a", "b")), ((2, 4), ("a", "b")), ((4, 2), ("a", "b")),
    ((1, 8), ("a", "b")),
]
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _exact_spec_expected(m, spec):
  """Whether the written state must carry ``spec`` spelled as given. On a
  mesh with Auto axes of size 1, JAX may spell a placement over them either
  way (P('x') or P() on one device): the same placement, which
  is_equivalent_to checks instead."""
  return (all(t == AxisType.Explicit for t in m.axis_types)
          or all(n > 1 for n in m.shape.values()))


def _canon(spec):
  entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in spec]
  while entries and entries[-1] is None:
    entries.pop()
  return tuple(entries)


@st.composite
def mesh_and_spec(draw, max_rank=2):
  """A mesh, a spec over (some of) its axes, and a shape that it divides."""
  shape, names = draw(st.sampled_from(MESHES))
  axis_type = draw(st.sampled_from([AxisType.Explicit, AxisType.Auto]))
  m = mesh(shape, names, axis_type)
  sizes = dict(zip(names, shape))
  rank = draw(st.integers(1, max_rank))
  free = list(names)
  entries, dims = [], []
  for _ in range(rank):
    choice = draw(st.sampled_from(["none", "one", "all"]))
    if choice == "one" and free:
      axes = (free.pop(draw(st.integers(0, len(free) - 1))),)
    elif choice == "all" and free:
      axes, free = tuple(free), []
    else:
      axes = ()
    n = int(np.prod([sizes[a] for a in axes])) if axes else 1
    dims.append(n * draw(st.integers(1, 2)))
    entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
  # trailing Nones may be dropped from a spec: draw how it is spelled
  while entries and entries[-1] is None and draw(st.booleans()):
    entries.pop()
  return m, P(*entries), tuple(dims)


def _declare(how, state, spec):
  """Give ``state`` the spec ``spec`` in one of the ways DESIGN.md lists."""
  if how == "own":
    state.spec = spec
    return None
  if how == "state_key":
    return {bs.ShortTermState: P(), state: spec}
  if how == "type_key":
    return {bs.ParamState: P(), type(state): spec}
  if how == "predicate":
    return {(lambda s: s.name == "x_state"): spec}
  assert how == "single"
  return spec


@SETTINGS
@given(case=mesh_and_spec(), how=st.sampled_from(
    ["own", "state_key", "type_key", "predicate", "single"]),
       steps=st.integers(1, 2), seed=st.integers(0, 2**16),
       jitted=st.booleans())
@pytest.mark.slow
def test_elementwise_update_matches_numpy(case, how, steps, seed, jitted):
  m, spec, shape = case
  rng = np.random.default_rng(seed)
  s0 = rng.normal(size=shape).astype(np.float32)
  c0 = np.float32(rng.normal())
  state = bs.LongTermState(jnp.asarray(s0), name="x_state")
  c = bs.State(jnp.asarray(c0), name="c")  # a replicated scalar state

  def update(x, *, gain):
    state.value = state.value + x * c.value * gain
    return state.value * 2

  state_in_specs = _declare(how, state, spec)
  if isinstance(state_in_specs, P):  # one spec for every state: c is a scalar
    state_in_specs = {c: P(), state: spec}
  g = bs.shard_map(update, m, (spec,), spec, state_in_specs=state_in_specs)
  if jitted:
    g = bs.jit(g)

  ref = s0.copy()
  for i in range(steps):
    x = rng.normal(size=shape).astype(np.float32)
    out = g(jnp.asarray(x), gain=jnp.float32(i + 1))
    ref = ref + x * c0 * np.float32(i + 1)
    np.testing.assert_allclose(out, ref * 2, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(state.value, ref, rtol=1e-5, atol=1e-6)
  assert float(c.value) == c0
  sh = state.sharding
  assert isinstance(sh, NamedSharding) and sh.mesh == m
  assert sh.is_equivalent_to(NamedSharding(m, spec), len(shape))
  if not jitted and _exact_spec_expected(m, spec):  # leaves with its in spec
    assert _canon(sh.spec) == _canon(spec), (sh.spec, spec)


@pytest.mark.slow
@SETTINGS
@given(first=mesh_and_spec(), second_spec=st.data(), seed=st.integers(0, 2**16))
def test_pytree_state_with_per_leaf_specs(first, second_spec, seed):
  m, spec_a, shape_a = first
  # a second leaf with its own spec on the same mesh
  names, sizes = m.axis_names, dict(m.shape)
  axis = second_spec.draw(st.sampled_from([None, *names]))
  n = sizes[axis] if axis else 1
  shape_b = (n * second_spec.draw(st.integers(1, 3)), 3)
  spec_b = P(axis) if axis else P()
  rng = np.random.default_rng(seed)
  a0 = rng.normal(size=shape_a).astype(np.float32)
  b0 = rng.normal(size=shape_b).astype(np.float32)
  state = bs.State({"a": jnp.asarray(a0), "b": jnp.asarray(b0)}, name="tree",
                   spec={"a": spec_a, "b": spec_b})

  def update(xa, xb):
    v = state.value
    state.value = {"a": v["a"] * 0.5 + xa, "b": v["b"] - xb * 3}
    return xa

  g = bs.shard_map(update, m, (spec_a, spec_b), spec_a)
  xa = rng.normal(size=shape_a).astype(np.float32)
  xb = rng.normal(size=shape_b).astype(np.float32)
  g(jnp.asarray(xa), jnp.asarray(xb))
  np.testing.assert_allclose(state.value["a"], a0 * 0.5 + xa, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(state.value["b"], b0 - xb * 3, rtol=1e-5, atol=1e-6)
  for leaf, spec, shape in (("a", spec_a, shape_a), ("b", spec_b, shape_b)):
    sh = state.sharding[leaf]
    assert isinstance(sh, NamedSharding) and sh.mesh == m
    if _exact_spec_expected(m, spec):
      assert _canon(sh.spec) == _canon(spec), (leaf, sh.spec, spec)
    assert sh.is_equivalent_to(NamedSharding(m, spec), len(shape))
