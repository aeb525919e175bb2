"""The scale benchmark's three implementations of the E/I network (the
brainshard example, hand-written pure JAX, brainstate) run the same model:
spike for spike the same raster, so their timings compare like with like."""

import numpy as np
import pytest

pytest.importorskip("brainstate")


@pytest.mark.parametrize("model,connectivity", [("cuba", "stored"),
                                                ("coba", "onthefly")])
@pytest.mark.slow
def test_three_implementations_spike_alike(model, connectivity):
  from benchmarks import _ei
  rasters = {}
  for name, make in (("brainshard", _ei.brainshard_run),
                     ("pure", _ei.pure_run),
                     ("brainstate", _ei.brainstate_run)):
    _, run = make(model, 400, connectivity=connectivity, seed=3)
    # Two calls: the second continues from the States the first left (the
    # same length, so each implementation compiles its chunk once).
    rasters[name] = np.concatenate([run(12.5), run(12.5)])
  assert rasters["pure"].shape == (250, 400)
  assert rasters["pure"].sum() > 50
  np.testing.assert_array_equal(rasters["brainshard"], rasters["pure"])
  np.testing.assert_array_equal(rasters["brainstate"], rasters["pure"])
