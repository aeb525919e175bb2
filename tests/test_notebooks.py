"""The notebooks in docs/ run from top to bottom (nbclient, in a fresh
kernel)."""

import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
NOTEBOOKS = sorted(DOCS.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(
      nb, timeout=300, kernel_name="python3",
      resources={"metadata": {"path": str(path.parent)}})
  client.execute()
  errors = [o for cell in nb.cells if cell.cell_type == "code"
            for o in cell.get("outputs", []) if o.get("output_type") == "error"]
  assert not errors
