"""A program over many States holds its results between calls (_core/program/held.py).

Every test drives a program of ``PACK_FROM`` or more States, checks it
really holds (its States' slots are behind), touches the States some other
way, and compares every value with a count kept by hand: whatever reads,
writes, copies, traces or calls in between sees the held results, and a
write in between is not overwritten by them.
"""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brainshard as bs
from brainshard._core.program import program
from brainshard._core.threads import WINDOW

from _util import count_compiles, step_while_a_thread_reads

N = program.PACK_FROM


def make(n=N, extra=None):
  """``n`` States and a jitted step adding one to each (and to ``extra``,
  a State it reads only, its value to the first)."""
  states = [bs.State(jnp.zeros(3), name=f"s{i}") for i in range(n)]

  def step():
    for s in states:
      s.value = s.value + 1.0
    if extra is not None:
      states[0].value = states[0].value + extra.value
  return states, bs.jit(step)


def holding(states) -> bool:
  """Whether a program holds these States' results (their slots behind)."""
  h = WINDOW.held
  return h is not None and h.states == tuple(states) and all(
      s._value.is_deleted() for s in states)


def values(states) -> np.ndarray:
  return np.stack([np.asarray(s.value) for s in states])


def test_a_program_over_many_states_holds_and_a_read_writes_back():
  states, step = make()
  for _ in range(4):
    step()
  assert holding(states)
  np.testing.assert_array_equal(states[5].value, 4.0)  # written back first
  assert WINDOW.held is None
  np.testing.assert_array_equal(values(states), 4.0)


def test_fewer_states_or_some_only_read_write_back_as_before():
  small, step_small = make(N - 1)
  step_small(), step_small()
  assert WINDOW.held is None
  states = [bs.State(jnp.zeros(3)) for _ in range(N)]
  bias = bs.State(jnp.ones(3))

  @bs.jit
  def step_written_only():  # the last State is written, not read
    for s in states[:-1]:
      s.value = s.value + bias.value
    states[-1].value = jnp.full(3, 7.0)
  step_written_only(), step_written_only()
  assert WINDOW.held is None
  np.testing.assert_array_equal(values(states[:-1]), 2.0)


def test_a_write_between_calls_wins_over_the_held_values():
  states, step = make()
  step(), step()
  assert holding(states)
  states[3].value = jnp.full(3, 100.0)
  step()
  expected = np.full((N, 3), 3.0)
  expected[3] = 101.0
  np.testing.assert_array_equal(values(states), expected)


def test_read_only_states_are_read_each_call():
  bias = bs.State(jnp.zeros(3), name="bias")
  states, step = make(extra=bias)
  step(), step()
  assert holding(states)
  bias.value = jnp.full(3, 10.0)
  step(), step()
  expected = np.full((N, 3), 4.0)
  expected[0] += 20.0
  np.testing.assert_array_equal(values(states), expected)


def test_another_programs_call_sees_the_held_values():
  states, step = make()
  other = bs.jit(lambda: [setattr(s, "value", s.value * 2.0)
                          for s in states[:10]] and None)
  step(), step()
  other()  # reads ten of them: 2 -> 4
  step()  # 4 -> 5 and 2 -> 3
  expected = np.full((N, 3), 3.0)
  expected[:10] = 5.0
  np.testing.assert_array_equal(values(states), expected)


def test_two_holding_programs_take_turns():
  a, step_a = make()
  b, step_b = make()
  for _ in range(3):
    step_a(), step_b(), step_b()
  assert holding(b)
  np.testing.assert_array_equal(values(a), 3.0)
  np.testing.assert_array_equal(values(b), 6.0)


@pytest.mark.parametrize("touch", [
    repr, copy.copy, copy.deepcopy, pickle.dumps, lambda s: s.sharding,
    lambda s: s.label(), lambda s: bs.jit(lambda: s.value * 1.0)(),
    lambda s: s.to_state_ref(),
], ids=["repr", "copy", "deepcopy", "pickle", "sharding", "label", "jit-read",
        "state-ref"])
def test_every_way_of_touching_a_state_sees_the_held_values(touch):
  states, step = make()
  step(), step()
  assert holding(states)
  got = touch(states[7])
  if isinstance(got, bytes):
    got = pickle.loads(got)
  if isinstance(got, bs.State):
    np.testing.assert_array_equal(got.value, 2.0)
  step()
  np.testing.assert_array_equal(values(states), 3.0)


def test_a_value_kept_after_a_read_is_never_donated():
  """The notebook pattern: read one State after each step and keep it."""
  states, step = make()
  kept = []
  for _ in range(5):
    step()
    kept.append(states[0].value)
  step(), step()
  for i, v in enumerate(kept):
    assert not v.is_deleted()
    np.testing.assert_array_equal(v, i + 1.0)
  np.testing.assert_array_equal(values(states), 7.0)


def test_holding_compiles_nothing_more():
  states, step = make()
  step(), step()
  with count_compiles() as compiles:
    for _ in range(5):
      step()
  assert compiles.count == 0
  assert holding(states)
  np.testing.assert_array_equal(values(states), 7.0)


def test_a_trace_that_finds_a_new_state_writes_back_and_regrows():
  states = [bs.State(jnp.zeros(3)) for _ in range(N)]
  late = bs.State(jnp.ones(3), name="late")

  @bs.jit
  def step(x):
    for s in states:
      s.value = s.value + 1.0
    if x.shape[0] == 2:  # a new signature touches one more State
      late.value = late.value + x.sum()
  step(jnp.ones(1)), step(jnp.ones(1))
  assert holding(states)
  step(jnp.ones(2))
  np.testing.assert_array_equal(values(states), 3.0)
  np.testing.assert_array_equal(late.value, 3.0)


def test_clear_caches_keeps_the_held_values():
  states, step = make()
  step(), step()
  bs.clear_caches()
  np.testing.assert_array_equal(values(states), 2.0)


def test_a_gradient_over_held_states():
  states, step = make()
  step(), step()
  g = bs.grad(lambda: sum(s.value.sum() for s in states[:3]),
              grad_states=states[:3])()
  np.testing.assert_array_equal(np.stack(g), 1.0)
  step()
  np.testing.assert_array_equal(values(states), 3.0)


def test_another_thread_reading_while_the_owner_steps():
  states, step = make()

  def read():
    assert 0 <= float(states[-1].value[0]) <= 200
  errors = step_while_a_thread_reads(step, read, steps=200, start_at=50)
  assert not errors, errors
  np.testing.assert_array_equal(values(states), 200.0)


def test_a_step_with_arguments_holds_too():
  states = [bs.State(jnp.zeros(3)) for _ in range(N)]

  @bs.jit
  def step(dx, scale=1.0):
    for s in states:
      s.value = s.value + dx * scale
    return states[0].value.sum()
  step(1.0), step(1.0)
  assert holding(states)
  out = step(2.0, scale=2.0)
  np.testing.assert_allclose(out, 18.0)
  np.testing.assert_array_equal(values(states), 6.0)
  jax.effects_barrier()


@pytest.mark.slow
def test_a_checkpoint_saves_and_restores_the_held_values(tmp_path):
  pytest.importorskip("orbax.checkpoint")
  states, step = make()
  step(), step()
  assert holding(states)
  named = {s.name: s for s in states}
  bs.save_states(tmp_path / "c", named).wait()
  step()  # 3, held again
  assert holding(states)
  bs.restore_states(tmp_path / "c", named)  # a write of each: wins
  step()
  np.testing.assert_array_equal(values(states), 3.0)


def test_lower_and_trace_read_the_held_values():
  states, step = make()
  step(), step()
  assert holding(states)
  compiled = step.lower().compile()
  assert WINDOW.held is None
  np.testing.assert_array_equal(values(states), 2.0)
  step(), step()
  assert holding(states)
  compiled()  # a Compiled call goes the generic way: writes back first
  step()
  np.testing.assert_array_equal(values(states), 6.0)


def test_a_dropped_program_writes_back_and_lets_go():
  """Dropping a holding program (its jitted function) writes its results
  back when Python collects it, as its call would have: States kept stay
  right, and States dropped too free their arrays then, not at the next
  access of some other State."""
  import gc
  import weakref
  states, step = make()
  for _ in range(3):
    step()
  assert holding(states)
  del step
  gc.collect()
  assert WINDOW.held is None  # written back with the program gone
  np.testing.assert_array_equal(values(states), 3.0)

  states, step = make()
  for _ in range(3):
    step()
  assert holding(states)
  freed = weakref.ref(WINDOW.held.values[0])
  del states, step
  gc.collect()
  assert WINDOW.held is None and freed() is None


def test_a_program_collected_on_another_thread_keeps_the_owner_lock_free():
  """Python may collect a dropped holding program on any thread (Jupyter's
  own threads allocate too). There the results stay held, rather than end
  the owner's lock-free mode for good; the next access writes them back."""
  import gc
  import threading
  states, step = make()
  for _ in range(3):
    step()
  assert holding(states) and WINDOW.lockfree
  del step
  collector = threading.Thread(target=gc.collect)
  collector.start()
  collector.join()
  assert WINDOW.lockfree and holding(states)
  np.testing.assert_array_equal(values(states), 3.0)
  assert WINDOW.held is None


def test_a_write_back_inside_a_write_back_writes_once(monkeypatch):
  """From Python 3.12 a collection runs at any call's start, so a dropped
  program's write-back (above) can run inside another write-back of the
  same results, right as it begins: the outer one then has nothing left
  to write, and no State is left behind."""
  from brainshard._core.program import held
  states, step = make()
  for _ in range(3):
    step()
  write_back = held.Held.write_back

  def collected_first(self):
    monkeypatch.setattr(held.Held, "write_back", write_back)
    held.flush()  # what the finalizer does, as the outer one starts
    write_back(self)
  monkeypatch.setattr(held.Held, "write_back", collected_first)
  np.testing.assert_array_equal(states[7].value, 3.0)
  assert WINDOW.held is None
  np.testing.assert_array_equal(values(states), 3.0)
