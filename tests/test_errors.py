"""Bad input: each case raises a clear error that names the state or
argument, the mesh axis and the shapes, and leaves every State as it was."""

import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs
from _util import mesh


class _Snapshot:
  """Copies of the states' values, to check nothing changed."""

  def __init__(self, *states):
    self.states = states
    self.values = [jax.tree.map(np.array, s.value) for s in states]

  def check(self):
    for s, before in zip(self.states, self.values):
      now = s.value
      assert jax.tree.structure(now) == jax.tree.structure(before), s
      for a, b in zip(jax.tree.leaves(now), jax.tree.leaves(before)):
        assert not isinstance(a, jax.core.Tracer), s
        assert a.dtype == b.dtype and a.shape == b.shape, s
        np.testing.assert_array_equal(np.asarray(a), b)


def _full_text(exc):
  return "\n".join([str(exc), *getattr(exc, "__notes__", [])])


def _has_number(text, n):
  return re.search(rf"(?<![\d.]){n}(?![\d.])", text) is not None


M4 = lambda: mesh((4,), ("x",))


# ----------------------------------------------------------------------------
# in_specs / spec validation: raised before the function runs


@pytest.mark.parametrize("n_specs, n_args", [(3, 1), (1, 2)])
def test_in_specs_length_mismatch(n_specs, n_args):
  buf = bs.State(jnp.arange(8.0), name="buf")
  snap = _Snapshot(buf)
  runs = []

  def f(*xs):
    runs.append(1)
    buf.value = buf.value + 1
    return xs[0]

  g = bs.shard_map(f, M4(), tuple([P("x")] * n_specs), P("x"),
                   state_in_specs={buf: P("x")})
  with pytest.raises(ValueError, match="in_specs") as info:
    g(*[jnp.ones(8)] * n_args)
  msg = str(info.value)
  assert _has_number(msg, n_specs) and _has_number(msg, n_args), msg
  assert runs == []
  snap.check()


def test_arg_spec_names_axis_mesh_lacks():
  buf = bs.State(jnp.arange(8.0), name="buf")
  snap = _Snapshot(buf)
  runs = []

  def f(a, b):
    runs.append(1)
    buf.value = buf.value + 1
    return a

  g = bs.shard_map(f, M4(), (P("x"), P("model")), P("x"))
  with pytest.raises(ValueError, match="'model'") as info:
    g(jnp.ones(8), jnp.ones(8))
  msg = str(info.value)
  assert "argument 1" in msg  # which argument
  assert "'x'" in msg  # the axes the mesh has
  assert "float32[8]" in msg  # the argument's shape
  assert runs == []
  snap.check()


@pytest.mark.parametrize("how", ["state_in_specs", "own_spec", "state_out_specs"])
def test_state_spec_names_axis_mesh_lacks(how):
  buf = bs.State(jnp.arange(8.0), name="buf",
                 spec=P("model") if how == "own_spec" else None)
  other = bs.State(jnp.ones(3), name="other")
  snap = _Snapshot(buf, other)
  runs = []

  def f(x):
    runs.append(1)
    other.value = other.value + 1
    buf.value = buf.value + 1
    return x

  kw = {}
  if how == "state_in_specs":
    kw["state_in_specs"] = {buf: P("model")}
  elif how == "state_out_specs":
    kw["state_out_specs"] = {buf: P("model")}
  g = bs.shard_map(f, M4(), P("x"), P("x"), **kw)
  with pytest.raises(ValueError, match="'model'") as info:
    g(jnp.ones(8))
  msg = str(info.value)
  assert "buf" in msg and "'x'" in msg and "float32[8]" in msg
  assert runs in ([], [1])  # at most the discovery trace, nothing ran
  snap.check()


def test_arg_spec_longer_than_rank():
  g = bs.shard_map(lambda x: x, M4(), (P("x", None),), P("x"))
  with pytest.raises(ValueError, match="rank") as info:
    g(jnp.ones(8))
  msg = str(info.value)
  assert "argument 0" in msg and "(8,)" in msg


def test_state_spec_longer_than_rank():
  buf = bs.State(jnp.arange(8.0), name="buf")
  snap = _Snapshot(buf)

  def f(x):
    buf.value = buf.value + 1
    return x

  g = bs.shard_map(f, M4(), P("x"), P("x"), state_in_specs={buf: P("x", None)})
  with pytest.raises(ValueError, match="buf") as info:
    g(jnp.ones(8))
  msg = str(info.value)
  assert "rank" in msg and "(8,)" in msg
  snap.check()


def test_arg_dimension_not_divisible():
  runs = []

  def f(x):
    runs.append(1)
    return x

  g = bs.shard_map(f, M4(), (P(None, "x"),), P(None, "x"))
  with pytest.raises(ValueError, match="divisible") as info:
    g(jnp.ones((3, 6)))
  msg = str(info.value)
  assert "argument 0" in msg and "'x'" in msg
  assert "(3, 6)" in msg and _has_number(msg, 6) and _has_number(msg, 4)
  assert runs == []


def test_state_dimension_not_divisible_2d_mesh():
  m = mesh((2, 4), ("a", "b"))
  buf = bs.State(jnp.zeros((12, 2)), name="buf")
  snap = _Snapshot(buf)

  def f():
    buf.value = buf.value + 1

  g = bs.shard_map(f, m, P(), None, state_in_specs={buf: P(("a", "b"))})
  with pytest.raises(ValueError, match="divisible") as info:
    g()
  msg = str(info.value)
  assert "buf" in msg and "'a'" in msg and "'b'" in msg
  assert "(12, 2)" in msg and _has_number(msg, 12) and _has_number(msg, 8)
  snap.check()


def test_state_shape_changed_to_indivisible_between_calls():
  buf = bs.State(jnp.zeros(8), name="buf")

  def f(x):
    buf.value = buf.value + x
    return x

  g = bs.shard_map(f, M4(), P("x"), P("x"), state_in_specs={buf: P("x")})
  g(jnp.ones(8))
  buf.value = jnp.zeros(6)
  snap = _Snapshot(buf)
  with pytest.raises(ValueError, match="buf") as info:
    g(jnp.ones(8))
  assert "6" in str(info.value) and "'x'" in str(info.value)
  snap.check()


# ----------------------------------------------------------------------------
# per-shard mistakes


@pytest.mark.parametrize("nested", [False, True])
def test_undeclared_replicated_state_with_sharded_data(nested):
  buf = bs.State(jnp.zeros(8), name="membrane")
  snap = _Snapshot(buf)

  def f(x):
    buf.value = buf.value + x  # (8,) + per-shard (2,)
    return x

  g = bs.shard_map(f, M4(), (P("x"),), P("x"))
  if nested:
    g = bs.jit(g)
  with pytest.raises((TypeError, ValueError)) as info:
    g(jnp.ones(8))
  text = _full_text(info.value)
  assert "state_in_specs" in text
  assert "membrane" in text
  assert "'x'" in text
  snap.check()


@pytest.mark.parametrize("nested", [False, True])
def test_replicated_state_written_with_per_shard_value(nested):
  total = bs.State(jnp.zeros(()), name="total")
  snap = _Snapshot(total)

  def f(x):
    total.value = total.value + x.sum()  # differs across shards
    return x

  g = bs.shard_map(f, M4(), (P("x"),), P("x"), check_vma=True)
  if nested:
    g = bs.jit(g)
  with pytest.raises(ValueError, match="total") as info:
    g(jnp.arange(8.0))
  msg = _full_text(info.value)
  assert "state_out_specs" in msg
  assert "'x'" in msg
  snap.check()


# ----------------------------------------------------------------------------
# writes under foreign JAX transforms


def _write_under(kind, s):
  """A function that writes ``s`` inside a plain JAX transform."""

  def inner(y):
    s.value = y  # the offending write
    return y

  def run(x):
    if kind == "jit":
      return jax.jit(inner)(x)
    if kind == "vmap":
      return jax.vmap(inner)(jnp.stack([x, x]))[0]
    if kind == "scan":
      def body(c, _):
        return inner(c), None
      return jax.lax.scan(body, x, None, length=2)[0]
    if kind == "cond":
      return jax.lax.cond(x.sum() > 0, inner, lambda y: y, x)
    raise AssertionError(kind)

  return run


def _assert_foreign_write_error(info, name):
  msg = str(info.value)
  assert name in msg
  assert "brainshard" in msg and "bs.jit" in msg
  # raised at the write itself: the user's `inner` is in the traceback
  assert any(entry.name == "inner" for entry in info.traceback)


@pytest.mark.parametrize("kind", ["jit", "vmap", "scan", "cond"])
def test_write_under_foreign_transform_nested_in_bs_jit(kind):
  s = bs.State(jnp.zeros(3), name="leaky")
  snap = _Snapshot(s)
  f = bs.jit(_write_under(kind, s))
  with pytest.raises(bs.StateTraceError) as info:
    f(jnp.ones(3))
  _assert_foreign_write_error(info, "leaky")
  assert not isinstance(s._value, jax.core.Tracer)
  snap.check()


@pytest.mark.parametrize("kind", ["jit", "vmap"])
def test_write_under_foreign_transform_nested_in_shard_map(kind):
  s = bs.State(jnp.zeros(2), name="leaky")
  snap = _Snapshot(s)
  g = bs.shard_map(_write_under(kind, s), M4(), P("x"), P("x"),
                   state_in_specs={s: P("x")})
  with pytest.raises(bs.StateTraceError) as info:
    g(jnp.ones(8))
  _assert_foreign_write_error(info, "leaky")
  snap.check()


@pytest.mark.parametrize("kind", ["jit", "vmap"])
def test_write_under_foreign_transform_at_top_level(kind):
  s = bs.State(jnp.zeros(3), name="leaky")
  snap = _Snapshot(s)
  with pytest.raises(bs.StateTraceError) as info:
    _write_under(kind, s)(jnp.ones(3))
  _assert_foreign_write_error(info, "leaky")
  snap.check()


@pytest.mark.parametrize("outer", ["jit", "vmap"])
def test_bs_jit_called_under_foreign_transform(outer):
  s = bs.State(jnp.zeros(3), name="leaky")
  snap = _Snapshot(s)

  @bs.jit
  def step(x):
    s.value = s.value + x
    return x

  wrap = jax.jit if outer == "jit" else jax.vmap
  with pytest.raises(bs.StateTraceError) as info:
    wrap(step)(jnp.ones((2, 3)) if outer == "vmap" else jnp.ones(3))
  msg = str(info.value)
  assert "leaky" in msg and "bs.jit" in msg
  snap.check()
  step(jnp.ones(3))  # still usable afterwards
  np.testing.assert_array_equal(s.value, np.ones(3))


# ----------------------------------------------------------------------------
# writes that change structure, shape or dtype


BAD_WRITES = {
    "shape": (lambda v: jnp.zeros(v.shape[0] + 1), "float32[{n1}]"),
    "dtype": (lambda v: v.astype(jnp.int32), "int32[{n}]"),
    "structure": (lambda v: {"a": v}, "{{a: float32[{n}]}}"),
}


def _bad_write_transform(transform, s, kind):
  make_bad = BAD_WRITES[kind][0]

  def f(x):
    s.value = make_bad(s.value)
    return x

  if transform == "jit":
    return bs.jit(f), 4
  g = bs.shard_map(f, M4(), P("x"), P("x"), state_in_specs={s: P("x")})
  if transform == "jit(shard_map)":
    g = bs.jit(g)
  return g, 1  # per-shard length on 4 devices


@pytest.mark.parametrize("kind", sorted(BAD_WRITES))
@pytest.mark.parametrize("transform", ["jit", "shard_map", "jit(shard_map)"])
def test_write_changing_structure_shape_or_dtype(transform, kind):
  s = bs.State(jnp.arange(4.0), name="potential")
  snap = _Snapshot(s)
  f, n = _bad_write_transform(transform, s, kind)
  with pytest.raises(ValueError, match="potential") as info:
    f(jnp.ones(4))
  msg = str(info.value)
  assert f"float32[{n}]" in msg  # what it holds (per shard in shard_map)
  assert BAD_WRITES[kind][1].format(n=n, n1=n + 1) in msg  # what was written
  if kind == "structure":
    assert "structure" in msg
  snap.check()


# ----------------------------------------------------------------------------
# States created inside a transform


@pytest.mark.parametrize("transform", ["jit", "shard_map"])
def test_state_created_inside_transform_read_after(transform):
  created = []

  def f(x):
    created.append(bs.State(x * 2, name="scratch"))
    return created[-1].value + 1
  line = inspect.getsourcelines(f)[1] + 1  # the line creating the State

  g = bs.jit(f) if transform == "jit" else bs.shard_map(f, M4(), P("x"), P("x"))
  out = g(jnp.ones(8))
  np.testing.assert_array_equal(out, np.full(8, 3.0))
  assert created
  for s in created:
    with pytest.raises(bs.StateTraceError) as info:
      s.value
    msg = str(info.value)
    assert "scratch" in msg
    assert f"test_errors.py:{line}" in msg
    assert "bs.jit" in msg or "bs.shard_map" in msg


# ----------------------------------------------------------------------------
# bad keys and States as arguments


@pytest.mark.parametrize("which", ["state_in_specs", "state_out_specs"])
@pytest.mark.parametrize("key", ["membrane", 3, int, None])
def test_bad_state_specs_key(which, key):
  with pytest.raises(TypeError, match=which) as info:
    bs.shard_map(lambda x: x, M4(), P("x"), P("x"), **{which: {key: P("x")}})
  assert repr(key) in str(info.value) or str(key) in str(info.value)


def test_state_specs_wrong_container():
  with pytest.raises(TypeError, match="state_in_specs"):
    bs.shard_map(lambda x: x, M4(), P("x"), P("x"), state_in_specs=[P("x")])


@pytest.mark.parametrize("where", ["positional", "keyword", "pytree"])
@pytest.mark.parametrize("transform", ["jit", "shard_map", "jit(shard_map)"])
def test_state_passed_as_argument(transform, where):
  s = bs.State(jnp.ones(8), name="weights")
  snap = _Snapshot(s)
  runs = []

  def f(x=None, w=None):
    runs.append(1)
    return jnp.ones(8)

  if transform == "jit":
    g = bs.jit(f)
  else:
    g = bs.shard_map(f, M4(), P(), P())
    if transform == "jit(shard_map)":
      g = bs.jit(g)
  with pytest.raises(TypeError, match="close over") as info:
    if where == "positional":
      g(s)
    elif where == "keyword":
      g(w=s)
    else:
      g([jnp.ones(2), {"w": s}])
  assert "weights" in str(info.value)
  assert runs == []
  snap.check()


# ----------------------------------------------------------------------------
# exceptions from the user function


class UserError(Exception):
  pass


def _failing(states, fail):
  a, b = states

  def f(x):
    a.value = a.value + x
    b.value = b.value * 2
    if fail(x):
      raise UserError("rate went negative at step 42")
    return a.value.sum()

  return f


def _build(transform, f):
  if transform == "jit":
    return bs.jit(f)
  if transform == "jit(jit)":
    inner = bs.jit(f)
    return bs.jit(lambda x: inner(x) + 1)
  sm = bs.shard_map(lambda x: jax.lax.psum(f(x), "x"), M4(), P("x"), P(),
                    state_in_specs=P("x"))
  if transform == "jit(shard_map)":
    return bs.jit(sm)
  return sm


TRANSFORMS = ["jit", "jit(jit)", "shard_map(psum)", "jit(shard_map)"]


def _states():
  return (bs.State(jnp.arange(8.0), name="a"),
          bs.State(jnp.ones(8), name="b"))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_user_exception_on_first_call(transform):
  states = _states()
  snap = _Snapshot(*states)
  f = _build(transform, _failing(states, lambda x: True))
  with pytest.raises(UserError) as info:
    f(jnp.ones(8))
  assert type(info.value) is UserError
  assert info.value.args == ("rate went negative at step 42",)
  assert str(info.value) == "rate went negative at step 42"
  snap.check()


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_user_exception_on_retrace_after_successful_calls(transform):
  """A cached function that raises when traced for a new shape: the error
  propagates unchanged, the states keep the values of the last good call,
  and the old signature still works afterwards."""
  states = _states()
  a, b = states
  f = _build(transform, _failing(states, lambda x: x.dtype == jnp.int32))
  x_ok = jnp.ones(8)
  f(x_ok)
  f(x_ok)
  snap = _Snapshot(*states)
  with pytest.raises(UserError) as info:
    f(jnp.ones(8, jnp.int32))  # a new signature: traced again, and raises
  assert type(info.value) is UserError
  assert str(info.value) == "rate went negative at step 42"
  snap.check()
  f(x_ok)  # still works
  np.testing.assert_array_equal(a.value, np.arange(8.0) + 3)
  np.testing.assert_array_equal(b.value, np.full(8, 8.0))


def test_user_value_error_propagates_without_added_notes():
  """A ValueError the user raises on purpose is not a brainshard shape
  problem: it reaches the caller unchanged, without notes attached."""
  w = bs.State(jnp.ones(8), name="w")  # read replicated
  snap = _Snapshot(w)

  def f(x):
    if w.value.shape[0] == 8:
      raise ValueError("bad configuration")
    return x

  g = bs.shard_map(f, M4(), P("x"), P("x"))
  with pytest.raises(ValueError) as info:
    g(jnp.ones(8))
  assert str(info.value) == "bad configuration"
  # (JAX itself may add a note about filtered traceback frames)
  notes = getattr(info.value, "__notes__", [])
  assert not [n for n in notes if "state_in_specs" in n or "bs.shard_map" in n], notes
  snap.check()


def test_exception_in_eager_shard_map_leaves_states_unchanged():
  a = bs.State(jnp.arange(8.0), name="a")
  snap = _Snapshot(a)

  def f(x):
    a.value = a.value + x
    raise UserError("boom")

  g = bs.shard_map(f, M4(), P("x"), P("x"), state_in_specs={a: P("x")})
  for _ in range(2):  # also the second time (cached plan)
    with pytest.raises(UserError) as info:
      g(jnp.ones(8))
    assert str(info.value) == "boom"
    snap.check()


# -- tracebacks point at the user's line (issue 10) ---------------------------


@pytest.mark.parametrize("transform", ["jit", "shard_map", "for_loop", "vmap"])
def test_error_in_user_code_has_no_brainshard_frames(transform):
  import os
  import traceback

  v = bs.State(jnp.zeros(4), name="v")

  def step(x):
    v.value = v.value + x
    return v.value.reshape(3)  # the user's bug

  m = jax.make_mesh((1,), ("x",))
  run = {
      "jit": lambda: bs.jit(step)(1.0),
      "shard_map": lambda: bs.shard_map(step, mesh=m, in_specs=P())(1.0),
      "for_loop": lambda: bs.for_loop(step, jnp.ones(2)),
      "vmap": lambda: bs.vmap(step, in_axes=0)(jnp.ones(2)),
  }[transform]
  with pytest.raises(TypeError, match="cannot reshape") as info:
    run()
  package = os.path.dirname(os.path.abspath(bs.__file__))
  frames = traceback.extract_tb(info.value.__traceback__)
  assert any(f.name == "step" for f in frames)  # the user's line is there
  assert not [f.filename for f in frames if f.filename.startswith(package)]
  np.testing.assert_array_equal(np.asarray(v.value), np.zeros(4))


# -- errors a newcomer met (issue 21 item 5) ----------------------------------


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("collective", [
    lambda x: jax.lax.psum(x.sum(), "y"),
    lambda x: jax.lax.pmean(x, ("x", "y")),
    lambda x: jax.lax.all_gather(x, "y"),
    lambda x: jax.lax.axis_index("y") + x])
def test_collective_over_an_axis_the_mesh_lacks_names_it(collective, check_vma):
  import os
  import traceback
  m = mesh((8,), ("x",))
  v = bs.State(jnp.ones(16), name="v", spec=P("x"))
  snap = _Snapshot(v)

  def step(x):
    v.value = v.value * 2
    return collective(x)

  with pytest.raises((ValueError, NameError)) as info:
    bs.shard_map(step, mesh=m, in_specs=P("x"), out_specs=P(),
                 check_vma=check_vma)(jnp.ones(16))
  text = _full_text(info.value)
  assert "names mesh axis 'y', but the mesh has no such axis" in text
  assert "The mesh has axes ('x',) (shape {'x': 8})" in text
  assert "jax.lax.psum(x, 'x')" in text  # the fix
  snap.check()
  package = os.path.dirname(os.path.abspath(bs.__file__))
  frames = traceback.extract_tb(info.value.__traceback__)
  assert not [f.filename for f in frames if f.filename.startswith(package)]


def test_collective_over_an_automatic_axis_says_it_is_not_manual():
  m = mesh((4, 2), ("x", "y"))
  step = bs.shard_map(lambda x: jax.lax.psum(x.sum(), "y"), mesh=m,
                      in_specs=P("x"), out_specs=P(), axis_names={"x"})
  with pytest.raises((ValueError, NameError),
                     match=r"names mesh axis 'y', but it is not one of this "
                     r"shard_map's manual axes.*may name \('x',\)"):
    step(jnp.ones(8))


def test_wrong_but_divisible_argument_shape_names_argument_and_state():
  m = mesh((8,), ("x",))
  v = bs.State(jnp.zeros(64), name="v", spec=P("x"))
  snap = _Snapshot(v)

  @bs.shard_map(mesh=m, in_specs=P("x"), out_specs=P("x"))
  def step(x):
    v.value = v.value + x
    return v.value

  with pytest.raises(TypeError) as info:
    step(jnp.ones(128))  # meant 64: divisible, so only the shard shapes clash
  text = _full_text(info.value)
  assert "(8,), (16,)" in text  # JAX's own words stay
  assert re.search(r"positional argument 0: float32\[128\], in_specs "
                   r"P\('x',?\) -> per shard float32\[16\]", text), text
  assert re.search(r"State 'v': float32\[64\], state_in_specs P\('x',?\) -> "
                   r"per shard float32\[8\]", text), text
  assert "mesh axes ('x',) (shape {'x': 8})" in text
  assert "global shape you meant" in text  # the fix
  snap.check()


def test_wrong_keyword_argument_shape_names_it():
  m = mesh((4,), ("x",))
  v = bs.State(jnp.zeros(8), name="v", spec=P("x"))

  def step(*, drive):
    v.value = v.value + drive

  with pytest.raises(TypeError, match=r"keyword argument 'drive': "
                     r"float32\[4\], kwarg_specs P\(\) -> per shard "
                     r"float32\[4\]"):
    bs.shard_map(step, mesh=m, out_specs=P())(drive=jnp.ones(4))
  np.testing.assert_array_equal(np.asarray(v.value), np.zeros(8))


def test_state_out_specs_mistake_points_at_the_spec():
  m = mesh((8,), ("x",))
  w = bs.State(jnp.zeros(64), name="w")
  snap = _Snapshot(w)

  def step(x):
    w.value = w.value + x  # per-shard block of P('x'): 8 values
    return x

  f = bs.shard_map(step, mesh=m, in_specs=P("x"), out_specs=P("x"),
                   state_in_specs={w: P("x")}, state_out_specs={w: P()})
  with pytest.raises(ValueError) as info:
    f(jnp.ones(64))
  text = _full_text(info.value)
  assert "holds float32[64] but was written with float32[8]" in text
  assert re.search(r"State 'w' \(float32\[64\]\) leaves "
                   r"bs.shard_map\(\S*step\) with state_out_specs P\(\), "
                   r"so each shard must write its block of that spec, "
                   r"float32\[64\]; its state_in_specs is P\('x',?\), "
                   r"whose block is float32\[8\]", text), text
  assert "drop it from state_out_specs" in text  # the fix
  snap.check()
  # the fix works: leaving as it came
  bs.shard_map(step, mesh=m, in_specs=P("x"), out_specs=P("x"),
               state_in_specs={w: P("x")})(jnp.ones(64))
  np.testing.assert_array_equal(np.asarray(w.value), np.ones(64))


def test_a_wrong_write_without_a_spec_change_has_no_spec_note():
  m = mesh((8,), ("x",))
  w = bs.State(jnp.zeros(64), name="w", spec=P("x"))

  def step():
    w.value = jnp.zeros(3)

  with pytest.raises(ValueError) as info:
    bs.shard_map(step, mesh=m, in_specs=(), out_specs=P())()
  assert "written with float32[3]" in str(info.value)
  assert "state_out_specs" not in str(info.value)


def test_a_users_own_assertion_or_name_error_arrives_unchanged():
  m = mesh((8,), ("x",))

  def asserts(x):
    assert x.shape == (99,), "the user's check"
    return x

  with pytest.raises(AssertionError, match="^the user's check") as info:
    bs.shard_map(asserts, mesh=m, in_specs=P("x"), out_specs=P("x"))(
        jnp.ones(16))
  assert "mesh axis" not in _full_text(info.value)

  def typo(x):
    return x + undefined_name  # noqa: F821

  with pytest.raises(NameError, match="^name 'undefined_name' is not "
                     "defined") as info:
    bs.shard_map(typo, mesh=m, in_specs=P("x"), out_specs=P("x"))(
        jnp.ones(16))
  assert "mesh axis" not in _full_text(info.value)


def test_matmul_and_reshape_shape_errors_list_the_inputs_too():
  m = mesh((8,), ("x",))
  w = bs.State(jnp.ones((64, 4)), name="w", spec=P("x"))
  for body in (lambda x: x @ w.value, lambda x: x.reshape(8) * 2):
    with pytest.raises(TypeError) as info:
      bs.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P("x"))(
          jnp.ones(128))
    text = _full_text(info.value)
    assert "positional argument 0: float32[128]" in text, text
    assert "per shard float32[16]" in text


def test_shape_error_of_unsplit_inputs_gets_no_per_shard_note():
  m = mesh((1,), ("x",))
  v = bs.State(jnp.zeros(4), name="v")
  with pytest.raises(TypeError, match="cannot reshape") as info:
    bs.shard_map(lambda: v.value.reshape(3), mesh=m, in_specs=(),
                 out_specs=P())()
  assert "per shard" not in _full_text(info.value)
