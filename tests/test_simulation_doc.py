"""The demo at the top of docs/simulation.md runs as written."""

import pathlib
import re

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_simulation_doc_demo_runs(monkeypatch, capsys):
  text = (ROOT / "docs" / "simulation.md").read_text()
  demo = re.search(r"```python\n(.*?)```", text, re.S).group(1)
  monkeypatch.chdir(ROOT)
  exec(compile(demo, "docs/simulation.md", "exec"), {})
  jax.effects_barrier()
  captured = capsys.readouterr()
  assert "mean rate" in captured.out and "CUBA" in captured.err
