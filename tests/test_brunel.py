"""examples/brunel: Brunel's (2000) model A, NEST's ``brunel_delta_nest``
example on ``bm.Network``.

- The model is NEST's calls (quick: it builds, ``--help`` works).
- Against NEST 3.10: for the AI regime and the fast synchronous-irregular
  one (SI-fast), the excitatory population's mean rate and mean CV of ISI
  over 5 independent brainshard networks lie within 3 combined standard
  errors (``sqrt(se_nest**2 + se_bs**2)``, over seeds) of NEST's over the
  seeds of ``examples/brunel/nest_reference.json`` (scale 0.1: 1,250
  neurons, C_E = 100, J = 1 mV; 100 ms warm-up, 500 ms measured; written by
  ``python -m benchmarks brunel-nest``). The 10 brainshard networks (5 per
  regime) are one ``bm.Network`` of independent copies: one build, one
  compile, one run (a seed changes the connectivity, which a compiled
  program closes over).
- The example's spikes are the same on 1 and 8 devices; docs/brunel.md's
  network runs.
"""

import json
import math
import re
from pathlib import Path

import jax
import numpy as np
import pytest

import brainshard as bs
from brainshard import models as bm
from examples.brunel.model import REGIMES, add_brunel, brunel

from conftest import make_mesh

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "examples" /
                        "brunel" / "nest_reference.json").read_text())
COPIES = 5
TESTED = ("AI", "SI-fast")   # the reference holds all four regimes


def test_the_model_is_nest_s_calls_and_help_works(capsys):
  net = bm.Network(dt=0.1, seed=1, mesh=make_mesh((1,), ("x",)))
  E, I = add_brunel(net, "SI-fast", scale=0.1)
  assert (len(E), len(I)) == (1000, 250) and not net.built
  [noise] = net._stimuli   # J = 1 mV, nu_th * C_E = 20 / (1 * 20) per ms
  assert noise.device.params["rate"] == 1000.0 * 4.0 * 1.0 == 4000.0
  rules = [(p.rule.k, p.weight, p.delay) for p in net._projections]
  assert rules == [(100, 1.0, 1.5), (25, -6.0, 1.5)]
  assert set(REGIMES) == {"SR", "SI-fast", "SI-slow", "AI"}
  from examples.brunel.__main__ import parse_args
  with pytest.raises(SystemExit) as exit_:
    parse_args(["--help"])
  assert exit_.value.code == 0
  page = capsys.readouterr().out
  for option in ("--regime", "--scale", "--duration", "--seed", "--devices",
                 "--record-to", "--plot"):
    assert option in page


def _brainshard_statistics(regimes, scale, warmup, measured):
  """``{regime: [{'rate', 'cv'} of E per copy]}``: COPIES independent
  networks per regime in one bm.Network."""
  net = bm.Network(dt=0.1, seed=11, mesh=make_mesh((1,), ("x",)))
  copies = {(r, k): add_brunel(net, r, scale, f"{r}.{k}")
            for r in regimes for k in range(COPIES)}
  sr = net.create("spike_recorder")
  for E, _ in copies.values():
    net.connect(E, sr)
  net.simulate(warmup + measured)
  s = sr.spikes
  start, steps = round(warmup / 0.1), round(measured / 0.1)
  keep = s.steps >= start
  window = bs.SpikeData(np.asarray(s.steps)[keep] - start,
                        np.asarray(s.neurons)[keep], s.n, s.dt)
  rates = bm.population_firing_rates(window, net.layout, steps)
  cvs = bm.population_cv_isi(window, net.layout)
  return {r: [{"rate": rates[f"E{r}.{k}"], "cv": cvs[f"E{r}.{k}"]}
              for k in range(COPIES)] for r in regimes}


def _mean_se(x):
  x = np.asarray(x, np.float64)
  return x.mean(), x.std(ddof=1) / math.sqrt(len(x))


@pytest.mark.slow
def test_rates_and_cvs_match_nest():
  meta = REFERENCE["metadata"]
  regimes = TESTED
  assert set(regimes) <= set(REFERENCE["regimes"]) and len(meta["seeds"]) >= 5
  ours = _brainshard_statistics(regimes, meta["scale"], meta["warmup_ms"],
                                meta["measured_ms"])
  lines, bad = [], []
  for regime in regimes:
    nest = REFERENCE["regimes"][regime]["E"]
    for stat in ("rate", "cv"):
      m_bs, se_bs = _mean_se([c[stat] for c in ours[regime]])
      m_nest, se_nest = _mean_se(nest[stat])
      se = math.hypot(se_bs, se_nest)
      z = (m_bs - m_nest) / se
      lines.append(f"{regime:>8} E {stat:>4}: brainshard {m_bs:.3f} +- "
                   f"{se_bs:.3f}, NEST {m_nest:.3f} +- {se_nest:.3f} "
                   f"({z:+.2f} SE)")
      if not abs(z) <= 3:
        bad.append(lines[-1])
  print("\n".join(lines))
  assert not bad, "\n".join(lines)


@pytest.mark.slow
def test_the_example_s_spikes_are_the_same_on_1_and_8_devices():
  # 625 neurons: 79 per shard on 8 devices (shards of <= 32 neurons compile
  # to other XLA:CPU code, which may differ in ulps)
  events = []
  for devices in (1, 8):
    net, E, I, sr = brunel("AI", 0.05, seed=3,
                           mesh=make_mesh((devices,), ("x",)))
    net.simulate(60.0)
    events.append(sr.events)
  assert len(events[0]["times"]) > 500
  for key in ("times", "senders"):
    np.testing.assert_array_equal(events[0][key], events[1][key])


@pytest.mark.slow
def test_the_docs_page_s_network_runs():
  """docs/brunel.md's python block runs as written (it asserts its own
  rates and CVs)."""
  text = (Path(__file__).resolve().parents[1] / "docs" / "brunel.md"
          ).read_text()
  [block] = re.findall(r"```python\n(.*?)```", text, re.S)
  exec(compile(block, "docs/brunel.md", "exec"), {})
