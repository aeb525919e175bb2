"""docs/migrating-from-brainstate.md: the brainstate model it ports gives the
same numbers as its brainshard port (examples/ei_brainstate.py vs
examples/ei_brainshard.py), the port sharded over 8 devices gives the same
spikes, the random draws it calls equal match brainstate's for one seed, and
every ``bs.`` name its table promises exists."""

import pathlib
import re
import warnings

import jax
import numpy as np
import pytest

import brainshard as bs

from examples import ei_brainshard

ROOT = pathlib.Path(__file__).resolve().parents[1]

STEPS = 1000


def _brainstate():
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return pytest.importorskip("brainstate", reason="brainstate is not installed")


@pytest.fixture(scope="module")
def port():
  return ei_brainshard.simulate(STEPS)


@pytest.mark.slow
def test_port_gives_the_brainstate_numbers(port):
  _brainstate()
  from examples import ei_brainstate
  spikes_bst, v_bst = ei_brainstate.simulate(STEPS)
  spikes, v = port
  assert spikes.shape == (STEPS, ei_brainshard.PARAMS["n"])
  assert spikes.sum() > 100  # the network is active
  np.testing.assert_array_equal(spikes, spikes_bst)
  np.testing.assert_allclose(v, v_bst, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_sharded_port_gives_the_same_spikes(port):
  mesh = jax.make_mesh((8,), ("x",))
  spikes8, v8 = ei_brainshard.simulate(STEPS, mesh=mesh)
  spikes, v = port
  np.testing.assert_array_equal(spikes8, spikes)
  np.testing.assert_allclose(v8, v, rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name, kwargs", [
    ("normal", dict(size=(3,))), ("uniform", dict(size=(3,))),
    ("randint", dict(low=0, high=10, size=(4,))),
    ("bernoulli", dict(p=0.5, size=(4,))),
])  # not poisson: brainshard's exact, mesh-independent algorithm differs
def test_same_seed_same_draws_as_brainstate(name, kwargs):
  """The guide says a brainstate script's top-level draws keep their
  numbers: two draws in a row after seed(1)."""
  brainstate = _brainstate()
  saved = bs.random.default_state().value
  try:
    brainstate.random.seed(1)
    bs.random.seed(1)
    for _ in range(2):
      want = np.asarray(getattr(brainstate.random, name)(**kwargs))
      got = np.asarray(getattr(bs.random, name)(**kwargs))
      np.testing.assert_array_equal(got, want)
  finally:
    bs.random.default_state().value = saved


def test_every_name_the_guide_maps_to_exists():
  text = (ROOT / "docs" / "migrating-from-brainstate.md").read_text()
  names = set(re.findall(r"\bbs\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?", text))
  assert len(names) > 30
  missing = []
  for top, sub in sorted(names):
    if not hasattr(bs, top) or (sub and not hasattr(getattr(bs, top), sub)):
      missing.append(f"bs.{top}" + (f".{sub}" if sub else ""))
  assert not missing, missing
