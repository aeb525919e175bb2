"""The examples of docs/plasticity.md run as written."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow  # two small networks: ~10-20 s
def test_plasticity_doc_runs(capsys):
  text = (ROOT / "docs" / "plasticity.md").read_text()
  blocks = re.findall(r"```python\n(.*?)```", text, re.S)
  assert len(blocks) == 2
  ns = {}
  for block in blocks:
    exec(compile(block, "docs/plasticity.md", "exec"), ns)
  out = capsys.readouterr().out
  assert "events" in out
  assert ns["net"].plasticity_overflow == 0
  assert ns["hist"].counts[-1].sum() == 40 * 8
  assert ns["w"].max() != ns["w"].min()  # STDP changed the weights
