"""Where States live (brainshard/_scaleout/describe.py): describe's table and
bytes per device, and visualize of one leaf."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs


@pytest.fixture
def mesh():
  return jax.make_mesh((8,), ("x",))


def test_describe_rows_and_bytes_per_device(mesh):
  w = bs.ParamState(jnp.zeros((64, 16)), "w", spec=P("x"))
  v = bs.State({"a": jnp.zeros(8, jnp.int8), "b": jnp.zeros(())})
  bs.place([w, v], mesh)
  table = bs.describe({"net": [w], "v": v})
  assert [r.name for r in table] == ["w", "['v']['a']", "['v']['b']"]
  assert table[0] == bs.StateInfo("w", "ParamState", (64, 16), "float32",
                                  "P('x',)", 8, 64 * 16 * 4 // 8)
  assert table[1].bytes_per_device == 8 and table[1].spec == "P()"
  assert table.bytes_per_device == 64 * 16 * 4 // 8 + 8 + 4
  text = str(table)
  assert text.splitlines()[0].split() == [
      "name", "type", "shape", "dtype", "spec", "devices", "bytes/device"]
  assert "512 B" in text and "524 B" in text.splitlines()[-1]


def test_describe_unplaced_state_shows_its_device():
  s = bs.State(jnp.zeros(4), "s")
  (row,) = bs.describe(s)
  assert row.spec.startswith("on ") and row.devices == 1


def test_visualize_draws_one_leaf(mesh, capsys):
  pytest.importorskip("rich")
  w = bs.State({"w": jnp.zeros((8, 8)), "b": jnp.zeros(8)}, "layer",
               spec={"w": P("x"), "b": P()})
  bs.place(w, mesh)
  bs.visualize(w, leaf="['w']")
  out = capsys.readouterr().out
  assert all(f"CPU {i}" in out for i in range(8))
  with pytest.raises(ValueError, match="2 leaves"):
    bs.visualize(w)
  with pytest.raises(KeyError, match="no leaf"):
    bs.visualize(w, leaf="['x']")


def test_describe_flags_states_left_on_one_device(mesh):
  """A State made from a plain array beside mesh-spread ones is marked,
  named in a note that says how to place it; after a program on the mesh
  reads it, it is placed and the mark is gone."""
  v = bs.State(jnp.zeros(16), "v", spec=P("x"))
  table = bs.State(jnp.arange(4.0), "table")
  bs.place(v, mesh)
  assert bs.describe([table]).unplaced == []  # nothing on a mesh: no flag
  described = bs.describe([v, table])
  assert described.unplaced == ["table"]
  lines = str(described).splitlines()
  row = next(line for line in lines if line.startswith("table"))
  assert " *" in row and not any(
      line.startswith("v ") and "*" in line for line in lines)
  assert "one device beside States spread over a mesh: table." in lines[-1]
  assert "bs.place(state, mesh)" in lines[-1]

  @bs.jit
  @bs.shard_map(mesh=mesh, out_specs=P())
  def step():
    v.value = v.value + table.value.sum()

  step()
  placed = bs.describe([v, table])
  assert placed.unplaced == [] and "*" not in str(placed)
  assert placed[1].spec == "P()" and placed[1].devices == 8
