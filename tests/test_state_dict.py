"""bs.StateDictManager: brainstate's dict of States."""

import jax.numpy as jnp
import pytest

import brainshard as bs


@pytest.fixture
def states():
  w = bs.ParamState(jnp.ones(2), name="w")
  v = bs.ShortTermState(jnp.zeros(3), name="v")
  return w, v, bs.StateDictManager(w=w, v=v)


def test_collect_assign_and_split(states):
  w, v, mgr = states
  assert set(mgr.collect_values()) == {"w", "v"}
  assert mgr.to_dict_values()["w"] is w.value
  mgr.assign_values({"v": jnp.full(3, 2.0)}, {"w": jnp.zeros(2)})
  assert float(v.value.sum()) == 6.0 and float(w.value.sum()) == 0.0
  params, rest = mgr.split_values(bs.ParamState)
  assert list(params) == ["w"] and list(rest) == ["v"]
  p, r = mgr.split(bs.ParamState)
  assert p["w"] is w and r["v"] is v and isinstance(p, bs.StateDictManager)
  assert list(mgr.subset(bs.ShortTermState)) == ["v"]
  assert list(mgr.subset(lambda s: s.name == "w")) == ["w"]


def test_only_states_and_clear_errors(states):
  w, v, mgr = states
  with pytest.raises(TypeError, match=r"StateDictManager\['x'\] must be a State; got int"):
    mgr["x"] = 1
  with pytest.raises(TypeError, match="must be a State"):
    mgr.update(y=2.0)
  with pytest.raises(TypeError, match="takes dicts"):
    mgr.assign_values([("v", 1.0)])
  with pytest.raises(KeyError, match="no State 'u'"):
    mgr.assign_values({"u": 1.0})


def test_unique_adds(states):
  w, v, mgr = states
  assert mgr.add_unique_value("again", w) is False and "again" not in mgr
  u = bs.State(jnp.ones(1))
  assert mgr.add_unique_value("u", u) is True and mgr["u"] is u
  mgr.add_unique_key("u", u)  # same State: fine
  with pytest.raises(ValueError, match="key 'u' already holds"):
    mgr.add_unique_key("u", w)


def test_assign_inside_jit_threads_the_states(states):
  w, v, mgr = states

  @bs.jit
  def step():
    vals = mgr.collect_values()
    mgr.assign_values({"v": vals["v"] + vals["w"].sum()})

  step()
  assert float(v.value[0]) == 2.0
