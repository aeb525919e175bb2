"""The notebooks in docs/ run from top to bottom (nbclient, in a fresh
kernel)."""

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
NOTEBOOKS = sorted(DOCS.glob("*.ipynb"))


@pytest.mark.slow
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


def _first_cell(name):
  nb = nbformat.read(DOCS / name, as_version=4)
  return next(c.source for c in nb.cells if c.cell_type == "code")


def test_cuba_notebook_outside_the_repository_fails_fast(tmp_path):
  """Its search for the repository stops at the file-system root with an
  error saying what to do, instead of looping forever."""
  import subprocess
  import sys
  env = {k: v for k, v in os.environ.items() if k != "BRAINSHARD_REPO"}
  proc = subprocess.run([sys.executable, "-c", _first_cell("cuba_notebook.ipynb")],
                        cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode != 0
  assert "set BRAINSHARD_REPO" in proc.stderr


@pytest.mark.slow
def test_cuba_notebook_finds_the_repository_from_brainshard_repo(tmp_path):
  import subprocess
  import sys
  env = dict(os.environ, BRAINSHARD_REPO=str(DOCS.parent))
  env.pop("PYTHONPATH", None)
  proc = subprocess.run([sys.executable, "-c", _first_cell("cuba_notebook.ipynb")],
                        cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.count("CpuDevice") == 8
