"""The step-by-step demo runs, and its sharded network matches one device."""

import pytest

from examples import spiking_demo


@pytest.mark.slow
def test_spiking_demo_runs_and_reports(capsys):
  result = spiking_demo.main(["--neurons", "800", "--steps", "300"])
  out = capsys.readouterr().out
  assert "mean rate" in out and "time per step" in out
  # Constant 10.5 mV drive over a 10 mV gap: every neuron fires within
  # 20 ms * ln(10.5 / 0.5) ~ 61 ms, so 30 ms of activity cannot be silent,
  # and refractory-free LIF neurons cannot exceed 1 / dt.
  assert 0.0 < result["rate_hz"] < 10_000.0
