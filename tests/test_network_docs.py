"""docs/network.md maps every NEST model, parameter, recordable, device and
recorder brainshard has to its brainshard name: a model added without its
row fails here (its code runs in tests/test_docs_snippets.py)."""

import pathlib

import pytest

from brainshard._models.devices import DEVICES
from brainshard._models.network.recorders import RECORDERS
from brainshard._models.neurons import MODELS

PAGE = (pathlib.Path(__file__).parent.parent / "docs" / "network.md"
        ).read_text()


def _row(name: str) -> list[str]:
  rows = [line for line in PAGE.splitlines()
          if line.startswith(f"| `{name}` |")]
  assert rows, f"docs/network.md has no row for {name}"
  return rows


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_neuron_model_has_its_rows(name):
  cls = MODELS[name]
  text = " ".join(_row(name))
  assert f"`bm.{cls.__name__}`" in text
  for param in cls.defaults:
    assert f"`{param}` =" in text, f"{name}: parameter {param}"
  for rec in cls().recordable():
    assert f"`{rec}`" in text, f"{name}: recordable {rec}"


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_every_device_has_its_row(name):
  cls = DEVICES[name]
  text = " ".join(_row(name))
  assert f"`bm.{cls.__name__}`" in text
  for param in cls.defaults:
    assert f"`{param}` =" in text, f"{name}: parameter {param}"


@pytest.mark.parametrize("name", sorted(RECORDERS))
def test_every_recorder_has_its_row(name):
  assert f"`bm.{RECORDERS[name].__name__}`" in " ".join(_row(name))
