"""README's Python example runs as written and does what it says."""

import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_example_runs(capsys):
  blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
  assert blocks, "README has no Python example"
  namespace: dict = {}
  exec(compile(blocks[0], str(README), "exec"), namespace)
  v, n = namespace["v"], namespace["n"]
  # Three steps of v += (1 - v) / 10 from zero, on every element.
  expected = 1 - 0.9 ** 3
  np.testing.assert_allclose(np.asarray(v.value), np.full(n, expected), rtol=1e-6)
  np.testing.assert_allclose(float(namespace["total"]), n * expected, rtol=1e-5)
  assert "P('x'" in capsys.readouterr().out
