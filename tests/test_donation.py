"""Zero-copy state updates: donate_states='auto' (default), True and False.

'auto' donates a read-and-written state's old buffer only when nothing but
the State refers to it (docs/donation.md). A donated buffer is reused for
the new value: on CPU the new value's buffer pointer equals the old one's.
"""

import dataclasses
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from brainshard._core.program import donation as _donation, fastcall
from brainshard._core.program import program as _program

from conftest import make_mesh

pytestmark = pytest.mark.skipif(
    not _donation.AUTO_SUPPORTED, reason="reference counts are not exact here")


@pytest.fixture(params=["positional", "packed"])
def layout(request, monkeypatch):
  """How the candidates' values reach the jitted program: one positional
  argument each, or (from program.PACK_FROM of them) one list."""
  if request.param == "packed":
    monkeypatch.setattr(_program, "PACK_FROM", 1)
  return request.param


def packs(step) -> bool:
  return step._core.program.packed


def ptr(x):
  """Buffer address of a (possibly sharded) array's first shard."""
  return x.addressable_data(0).unsafe_buffer_pointer()


def counter_step(state, traces):
  def step(x):
    traces.append(1)
    state.value = state.value + x
    return state.value.sum()
  return step


def test_sole_owner_is_donated_and_buffer_reused():
  s = bs.State(jnp.zeros(1024), name="s")
  step = bs.jit(counter_step(s, []))
  step(1.0)
  before = ptr(s.value)  # no reference kept: only the address
  step(1.0)
  assert ptr(s.value) == before
  np.testing.assert_allclose(s.value, 2.0)


def test_kept_reference_is_not_donated_and_stays_intact():
  s = bs.State(jnp.zeros(1024), name="s")
  step = bs.jit(counter_step(s, []))
  step(1.0)
  old = s.value
  step(1.0)
  assert not old.is_deleted()
  np.testing.assert_allclose(old, 1.0)
  np.testing.assert_allclose(s.value, 2.0)
  assert ptr(s.value) != ptr(old)
  # Once the reference is gone, the next call donates again.
  del old
  before = ptr(s.value)
  step(1.0)
  assert ptr(s.value) == before


def test_initial_value_kept_by_user_is_not_donated():
  x = jnp.arange(8.0)
  s = bs.State(x)  # the State holds the very object `x`
  bs.jit(counter_step(s, []))(1.0)
  assert not x.is_deleted()
  np.testing.assert_allclose(x, np.arange(8.0))


def test_donation_choice_never_reruns_the_function(layout):
  traces = []
  s, t = bs.State(jnp.zeros(16)), bs.State(jnp.zeros(16))

  @bs.jit
  def step(x):
    traces.append(1)
    s.value, t.value = s.value + x, t.value + x

  step(1.0)
  assert packs(step) == (layout == "packed")
  n = len(traces)
  old = s.value
  step(1.0)  # another donation choice: compiled anew, but not re-traced
  step(1.0)  # (packed: the positional form, from the discovery's jaxpr)
  both = s.value, t.value
  step(1.0)  # none donated
  del old, both
  step(1.0)
  assert len(traces) == n
  np.testing.assert_allclose([s.value[0], t.value[0]], [5.0, 5.0])


def test_donate_states_true_always_donates():
  s = bs.State(jnp.zeros(16))
  step = bs.jit(counter_step(s, []), donate_states=True)
  step(1.0)
  old = s.value
  step(1.0)
  assert old.is_deleted()
  np.testing.assert_allclose(s.value, 2.0)


def test_donate_states_false_never_donates():
  s = bs.State(jnp.zeros(16))
  step = bs.jit(counter_step(s, []), donate_states=False)
  step(1.0)
  before = ptr(s.value)
  step(1.0)  # old and new are both alive while the step runs
  assert ptr(s.value) != before


def test_bad_donate_states_value():
  with pytest.raises(ValueError, match="donate_states"):
    bs.jit(lambda: None, donate_states="yes")


def test_pytree_state_donated_only_when_every_node_is_sole():
  s = bs.State({"a": jnp.zeros(16), "b": [jnp.ones(16), jnp.ones(16)]})

  @bs.jit
  def step():
    s.value = jax.tree.map(lambda x: x + 1, s.value)

  step()
  before = ptr(s.value["a"])
  step()
  assert ptr(s.value["a"]) == before

  leaf = s.value["b"][1]  # a leaf held by the user
  step()
  assert not leaf.is_deleted()
  np.testing.assert_allclose(leaf, 3.0)

  whole = s.value  # the dict held by the user
  step()
  assert not any(x.is_deleted() for x in jax.tree.leaves(whole))
  np.testing.assert_allclose(whole["a"], 3.0)
  np.testing.assert_allclose(s.value["a"], 4.0)


class AdamLike(NamedTuple):  # the shape of an optax optimizer state
  count: jax.Array
  mu: dict
  nu: dict


def test_namedtuple_state_donated_only_when_every_node_is_sole():
  # An optimizer state kept in a State (optax's states are NamedTuples of
  # dicts): 'auto' donates it like a dict, and never a leaf the user holds.
  s = bs.State((AdamLike(jnp.zeros((), jnp.int32), {"w": jnp.zeros(16)},
                         {"w": jnp.ones(16)}), ()))

  @bs.jit
  def step():
    s.value = jax.tree.map(lambda x: x + 1, s.value)

  step()
  before = ptr(s.value[0].mu["w"])
  step()
  assert ptr(s.value[0].mu["w"]) == before
  held = s.value[0].nu["w"]
  step()
  assert not held.is_deleted()
  np.testing.assert_allclose(held, 3.0)
  np.testing.assert_allclose(s.value[0].nu["w"], 4.0)


def test_kept_reference_stays_on_the_generated_fast_path(monkeypatch, layout):
  # The notebook pattern (read one state's value after each step) selects a
  # non-donating variant for that state inline; the generic path is unused.
  from brainshard._core.program import program as _program
  generic = []
  original = _program.Program.call
  monkeypatch.setattr(_program.Program, "call",
                      lambda self, *a, **k: generic.append(1) or original(self, *a, **k))
  a, b = bs.State(jnp.zeros(64)), bs.State(jnp.zeros(64))

  @bs.jit
  def step():
    a.value, b.value = a.value + 1, b.value + 1

  step()
  assert packs(step) == (layout == "packed")
  generic.clear()
  for _ in range(3):
    kept = a.value
    b_before = ptr(b.value)
    step()
    assert not kept.is_deleted()
    # b's buffer was donated (JAX may alias it to either output of its shape)
    assert b_before in (ptr(a.value), ptr(b.value))
  assert generic == []
  np.testing.assert_allclose(a.value, 4.0)


def _counting_refs(monkeypatch, step):
  """Records the ids of the values the generated call of ``step`` counts."""
  g = type(step).__call__.__globals__
  rc, counted = g["getrefcount"], []

  def count(x):  # one more reference than the generated call's own count
    counted.append(id(x))
    return rc(x) - 1
  monkeypatch.setitem(g, "getrefcount", count)
  return counted


def _stepped_state():
  """A State and a ``bs.jit`` step adding one to it, called twice."""
  s = bs.State(jnp.zeros(64))

  @bs.jit
  def step():
    s.value = s.value + 1

  step()
  step()
  return s, step


def _steady_loop(monkeypatch, n=fastcall.CLOCK_FROM + 1):
  """``n`` States stepped by ``bs.jit`` twice (steady), and the list of
  values its next calls count (see _counting_refs). The default is enough
  States for the generated call to read the clock of lends."""
  states = [bs.State(jnp.zeros(64)) for _ in range(n)]

  @bs.jit
  def step():
    for s in states:
      s.value = s.value + 1

  step()
  step()
  return states, step, _counting_refs(monkeypatch, step)


@pytest.mark.parametrize("n", [2, fastcall.CLOCK_FROM])  # without, with clock
def test_only_values_that_may_be_shared_are_counted(monkeypatch, n):
  """A compiled call's own outputs, read by nothing since, are donated
  without counting; a read through the State brings the count back for
  that state only, until the next call replaces its value."""
  states, step, counted = _steady_loop(monkeypatch, n)
  before = [ptr(s.value) for s in states]  # reads: each is counted once
  step()
  assert len(counted) == n and set(before) == {ptr(s.value) for s in states}
  step()  # counts the ones read by the line above
  counted.clear()
  step()
  step()
  assert counted == []
  kept = states[1].value
  step()
  assert counted == [id(kept)] and not kept.is_deleted()
  counted.clear()
  del kept
  step()
  assert counted == []
  np.testing.assert_allclose([s.value[0] for s in states], [8.0] * n)


def test_jax_outputs_are_fresh_objects_with_their_own_buffers():
  """What the uncounted write-back relies on (donation.py): a compiled
  call's outputs are new objects with new buffers, even an input passed
  straight through, or one value returned twice."""
  a, b = jnp.ones(8), jnp.ones(8)
  f = jax.jit(lambda x, y: (x, y + 1, y, x))
  for _ in range(2):  # the first call and the C++ fast path
    out = f(a, b)
    objects = [*out, a, b]
    assert len({id(x) for x in objects}) == len(objects)
    assert len({ptr(x) for x in objects}) == len(objects)


@pytest.mark.parametrize("how", ["created", "written", "restored", "copied"])
def test_value_put_in_from_outside_is_counted(how):
  """The user still holds what they put in (or a copy of the State shares
  it): the next call counts it and leaves it intact."""
  import copy
  s, step = _stepped_state()
  held = jnp.full(64, 5.0)
  if how == "created":
    s = bs.State(held)
  elif how == "written":
    s.value = held
  elif how == "restored":
    s.restore_value(held)
  else:
    held = copy.copy(s)
  step()
  step()
  value = held.value if how == "copied" else held
  assert not value.is_deleted()
  if how != "created":  # a new State: `step` still updates the old one
    np.testing.assert_allclose(s.value, 7.0 if how != "copied" else 4.0)


@pytest.mark.parametrize("how", ["read", "slot", "global_value", "copied",
                                 "written", "restored", "placed", "stored"])
def test_every_way_a_value_may_be_shared_brings_the_count_back(
    monkeypatch, how):
  """A steady loop counts nothing; each way a value can get a second
  owner makes the next call count that State (and only that call)."""
  import copy
  from brainshard._core.state.state import store
  states, step, counted = _steady_loop(monkeypatch)
  step()
  assert counted == []
  s, new = states[1], jnp.full(64, 5.0)
  held = {"read": lambda: s.value, "slot": lambda: s.slot,
          "global_value": s.global_value, "copied": lambda: copy.copy(s),
          "written": lambda: setattr(s, "value", new),
          "restored": lambda: s.restore_value(new),
          "placed": lambda: s.keep_placed_value(new),
          "stored": lambda: store([s], [new])}[how]()
  shared = id(s._value)
  step()
  assert counted == [shared]
  counted.clear()
  step()
  assert counted == []
  if how == "copied":
    held = held.value
  assert held is None or not held.is_deleted()


def test_a_read_since_the_last_call_is_counted_wherever_it_was(monkeypatch):
  """After one read the call counts that State alone; after two, both. A
  read of another function's State is no business of this one's: that
  function still counts it, and the reference stays intact."""
  states, step, counted = _steady_loop(monkeypatch)
  other, step_other = _stepped_state()
  counted_other = _counting_refs(monkeypatch, step_other)
  step()
  assert counted == []
  read = states[1].value
  step()
  assert counted == [id(read)]
  counted.clear()
  one, two = states[0].value, states[2].value
  step()  # the State read before the previous call is not counted again
  assert sorted(counted) == sorted([id(one), id(two)])
  counted.clear()
  held = other.value
  step()  # one read since its last call, of a State it does not touch
  assert counted == []
  step_other()
  assert counted_other == [id(held)] and not held.is_deleted()
  assert not one.is_deleted() and not two.is_deleted()
  np.testing.assert_allclose(held, 2.0)
  np.testing.assert_allclose(other.value, 3.0)


def test_each_set_of_kept_references_gets_its_own_variant(layout):
  """Which values are kept picks the variant: exactly the others donated."""
  states = [bs.State(jnp.zeros(64), name=f"s{i}") for i in range(3)]

  @bs.jit
  def step():
    for s in states:
      s.value = s.value + 1

  step()
  assert packs(step) == (layout == "packed")
  for kept_at in [(0,), (1,), (0, 2), (), (1,), (0, 1, 2)]:
    kept = {i: states[i].value for i in kept_at}
    donated = {ptr(s.value) for i, s in enumerate(states) if i not in kept_at}
    step()
    now = {ptr(s.value) for s in states}
    for i, value in kept.items():
      assert not value.is_deleted() and ptr(value) not in now, (kept_at, i)
    # the others' buffers were reused (JAX may alias any of the outputs)
    assert donated <= now, kept_at
    del kept
  np.testing.assert_allclose([s.value[0] for s in states], [7.0] * 3)


def test_states_sharing_one_array_are_not_donated():
  x = jnp.zeros(8)
  a, b = bs.State(jnp.ones(8)), bs.State(jnp.ones(8))
  a.value = b.value = x + 1  # one array object in two States
  del x

  @bs.jit
  def step():
    a.value = a.value * 2
    b.value = b.value * 3

  step()
  np.testing.assert_allclose(a.value, 2.0)
  np.testing.assert_allclose(b.value, 3.0)


def test_state_value_passed_as_argument_is_not_donated():
  s = bs.State(jnp.ones(8))

  @bs.jit
  def step(x):
    s.value = s.value + x
    return x

  step(jnp.ones(8))
  out = step(s.value)  # the argument is the state's own array
  assert not out.is_deleted()
  np.testing.assert_allclose(out, 2.0)
  np.testing.assert_allclose(s.value, 4.0)


def test_numpy_view_keeps_its_data():
  s = bs.State(jnp.zeros(16))
  step = bs.jit(counter_step(s, []))
  step(1.0)
  view = np.asarray(s.value)
  step(1.0)
  np.testing.assert_allclose(view, 1.0)
  np.testing.assert_allclose(s.value, 2.0)


def test_read_only_and_write_only_states_are_not_donated():
  r, w = bs.State(jnp.ones(8)), bs.State(jnp.zeros(8))

  @bs.jit
  def step():
    w.value = r.value * 2

  r_val = r.value
  step()
  del r_val
  before = ptr(r.value)
  step()
  assert ptr(r.value) == before and not r.value.is_deleted()
  np.testing.assert_allclose(w.value, 2.0)


def test_nested_jit_donates_only_at_the_top():
  s = bs.State(jnp.zeros(16))
  inner = bs.jit(counter_step(s, []))
  outer = bs.jit(lambda x: inner(x) + inner(x))
  outer(1.0)
  old = s.value
  outer(1.0)
  assert not old.is_deleted()
  np.testing.assert_allclose(s.value, 4.0)
  del old
  before = ptr(s.value)
  outer(1.0)
  assert ptr(s.value) == before


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_foreign_transform_never_donates(transform):
  s = bs.State(jnp.zeros(()))

  @bs.jit
  def step(x):
    s.value = s.value + x
    return s.value

  step(1.0)
  ptr_before = ptr(s.value)
  with pytest.raises(bs.StateTraceError):
    if transform == "vmap":
      jax.vmap(step)(jnp.ones(3))
    else:
      jax.grad(step)(1.0)
  assert not s.value.is_deleted() and ptr(s.value) == ptr_before
  np.testing.assert_allclose(s.value, 1.0)


def test_compiled_copies_a_held_donated_value(layout):
  s, t = bs.State(jnp.zeros(16)), bs.State(jnp.ones(16))

  @bs.jit
  def step(x):
    s.value, t.value = s.value + x, t.value * 2

  compiled = step.lower(1.0).compile()
  assert packs(step) == (layout == "packed")
  assert compiled.memory_analysis().alias_size_in_bytes == 2 * 16 * 4
  compiled(1.0)
  old = s.value
  compiled(1.0)
  assert not old.is_deleted()
  np.testing.assert_allclose(old, 1.0)
  np.testing.assert_allclose(s.value, 2.0)
  np.testing.assert_allclose(t.value, 4.0)
  held = s.value  # lowered with a reference kept: s is not donated
  kept = step.lower(1.0).compile()
  assert kept.memory_analysis().alias_size_in_bytes == 16 * 4
  kept(1.0)
  assert not held.is_deleted()
  np.testing.assert_allclose([s.value[0], t.value[0]], [3.0, 8.0])


def test_memory_analysis_shows_the_alias():
  s = bs.State(jnp.zeros((256, 256)))
  auto = bs.jit(counter_step(s, []))
  never = bs.jit(counter_step(s, []), donate_states=False)
  assert auto.lower(1.0).compile().memory_analysis().alias_size_in_bytes == (
      256 * 256 * 4)
  assert never.lower(1.0).compile().memory_analysis().alias_size_in_bytes == 0


def sharded_state(mesh, n=64):
  return bs.State(jax.device_put(jnp.zeros(n), NamedSharding(mesh, P("x"))),
                  name="v", spec=P("x"))


@pytest.mark.parametrize("form", ["eager", "jit"])
def test_shard_map_state_donated_and_kept_reference_intact(form):
  mesh = make_mesh((8,), ("x",))
  v = sharded_state(mesh)

  def step(i):
    v.value = v.value + i
    return jax.lax.psum(v.value.sum(), "x")

  f = bs.shard_map(step, mesh=mesh, in_specs=P(), out_specs=P())
  if form == "jit":
    f = bs.jit(f)
  f(1.0)
  before = ptr(v.value)
  f(1.0)
  assert ptr(v.value) == before
  old = v.value
  out = f(1.0)
  assert not old.is_deleted()
  np.testing.assert_allclose(old, 2.0)
  np.testing.assert_allclose(v.value, 3.0)
  assert float(out) == 3.0 * 64


def test_shard_map_state_leaving_with_another_spec_is_not_donated():
  mesh = make_mesh((8, 1), ("x", "y"))
  v = bs.State(jnp.zeros((64, 2)), name="v")

  @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P(),
                state_in_specs={v: P("x")}, state_out_specs={v: P(("x", "y"))})
  def step(i):
    v.value = v.value + i

  with warnings.catch_warnings():
    warnings.simplefilter("error")  # e.g. "donated buffers were not usable"
    step(1.0)
    step(1.0)
  plan = next(iter(step._eager.values())).program
  assert plan.cand == () and plan.rest == (v,)
  np.testing.assert_allclose(v.value, 2.0)


def test_auto_donation_never_deletes_an_array_another_thread_holds():
  """Threads call donating steps on a shared State while another thread
  keeps reading its value and using it: 'auto' donation must never delete
  an array some thread holds (SLOT_LOCK closes the window between the
  reference-count check and the dispatch)."""
  import threading
  s = bs.State(jnp.zeros(64), name="shared")

  @bs.jit
  def step():
    s.value = s.value + 1.0

  errors = []
  stop = threading.Event()

  def stepper():
    try:
      for _ in range(150):
        step()
    except BaseException as e:  # reported below
      errors.append(e)

  def reader():
    try:
      while not stop.is_set():
        held = s.value
        float(held.sum())  # fails if the buffer was donated under us
    except BaseException as e:
      errors.append(e)

  threads = [threading.Thread(target=stepper) for _ in range(2)]
  watcher = threading.Thread(target=reader)
  watcher.start()
  for t in threads:
    t.start()
  for t in threads:
    t.join(60)
  stop.set()
  watcher.join(60)
  assert not errors, errors
  np.testing.assert_allclose(s.value, np.full(64, 300.0))


# -- bs.jit(donate_states=True) and the default with a kept reference ---------


def test_donate_states_deletes_old_buffer_of_read_written_state():
  rw = bs.State(jnp.zeros(16), name="rw")
  ro = bs.State(jnp.ones(16), name="ro")
  wo = bs.State(jnp.zeros(16), name="wo")

  @bs.jit(donate_states=True)
  def step(x):
    rw.value = rw.value + ro.value * x
    wo.value = jnp.full(16, x)

  step(1.0)
  old_rw, old_ro = rw.value, ro.value
  step(2.0)
  assert old_rw.is_deleted()
  assert not old_ro.is_deleted()  # only read: not donated
  np.testing.assert_array_equal(rw.value, np.full(16, 3.0))
  np.testing.assert_array_equal(ro.value, np.ones(16))
  np.testing.assert_array_equal(wo.value, np.full(16, 2.0))


def test_without_donation_old_buffers_live():
  rw = bs.State(jnp.zeros(16), name="rw")

  @bs.jit
  def step(x):
    rw.value = rw.value + x

  step(1.0)
  old = rw.value
  step(1.0)
  assert not old.is_deleted()
  np.testing.assert_array_equal(old, np.ones(16))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Params:
  w: jax.Array
  b: jax.Array


class Box:  # not a pytree: the user may hold it
  def __init__(self, x):
    self.x = x


class Reaching:  # a node whose flatten reaches through a Box
  def __init__(self, box):
    self.box = box


jax.tree_util.register_pytree_node(
    Reaching, lambda r: ((r.box.x,), None), lambda _, c: Reaching(Box(c[0])))


def test_dataclass_pytree_donated_and_reaching_node_never():
  p = bs.State(Params(jnp.zeros(16), jnp.zeros(16)))
  box = Box(jnp.zeros(16))
  r = bs.State(Reaching(box))

  @bs.jit
  def step():
    p.value = jax.tree.map(lambda x: x + 1, p.value)
    r.value = jax.tree.map(lambda x: x + 1, r.value)

  step()
  before = ptr(p.value.w)
  held = r.value.box  # the Box: its array's count cannot show this
  step()
  assert ptr(p.value.w) == before
  assert not held.x.is_deleted()
  np.testing.assert_allclose(held.x, 1.0)
  np.testing.assert_allclose(r.value.box.x, 2.0)
  del box
