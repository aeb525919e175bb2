"""``python -m benchmarks delivery``: its limit cases compute what the
kernels compute, and the command runs end to end (on a small network in
place of Brunel's, which takes seconds to build)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import _delivery_limit as limit
from benchmarks import _delivery_shapes as shapes
from benchmarks import bench_delivery
from brainshard import models as bm
from brainshard._models.delivery.push import deliver


def small(seed: int = 1):
  """A Brunel-like network of 200 neurons (uint16 post, uint8 delay, one
  receptor: the index the C loop reads)."""
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  lay = bm.Layout({"E": 160, "I": 40}, n_shards=1)
  proj = [bm.Projection("E", (0, 200), bm.FixedInDegree(20), weight=0.1,
                        delay=bm.Uniform(0.1, 1.5)),
          bm.Projection("I", (0, 200), bm.FixedInDegree(5), weight=-0.5,
                        delay=0.3)]
  index = bm.connect(proj, lay, dt=0.1, seed=seed, mesh=mesh, axis="x")
  return index, np.full(lay.n_padded, 400.0)


def plain(index):
  """The index's arrays on one device, out of the mesh (as the command
  puts them)."""
  dev = jax.devices()[0]
  return jax.tree.map(lambda a: jax.device_put(np.asarray(a), dev), index)


@pytest.mark.slow
def test_precomputed_scatter_is_the_kernels_ring():
  index, rates = small()
  index = plain(index)
  fired = shapes.bernoulli_spikes(rates, 12)
  length = bm.ring_length(index.max_delay, 1)
  flat, w = limit.precomputed(index, fired, length)
  scatter, _ = limit.xla_programs(length, index.n_local)
  got = np.asarray(scatter(jnp.asarray(flat), jnp.asarray(w)))
  want = jnp.zeros((1, length, index.n_local), jnp.float32)
  for t in range(len(fired)):
    want = deliver(want, jnp.asarray(fired[t]), t, index, kernel="xla")
  np.testing.assert_allclose(got, np.asarray(want).ravel(), rtol=1e-6,
                             atol=1e-6)
  assert shapes.events(index, fired) == int((w != 0).sum()) > 0


@pytest.mark.slow
def test_the_command_runs_and_reports_every_case(monkeypatch, capsys):
  monkeypatch.setitem(shapes.SHAPES, "brunel", small)
  out = bench_delivery.main(["--shapes", "brunel", "--steps", "10",
                             "--repeats", "2"])
  rows = out["brunel"]
  assert {"xla", "xla scatter (precomputed)",
          "xla stream (read only)"} <= set(rows)
  assert all(row["cpu_ns"] > 0 for row in rows.values())
  assert "brunel:" in capsys.readouterr().out
