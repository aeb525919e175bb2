"""The Potjans-Diesmann microcircuit example (examples/microcircuit), on
``bm.Network``:

- it is NEST's network: eight ``iaf_psc_exp`` populations with one
  synaptic time constant, ``fixed_total_number`` projections routed by the
  weight's sign, a ``poisson_generator`` and a ``spike_recorder`` per
  population, initial ``V_m`` per neuron from each population's normal;
- 1 and 8 devices give the same spikes (connectivity, initial potentials
  and background are global draws; delivery sums in global presynaptic
  order);
- against NEST 3.10's run of the same scaled network (scale 0.1, k-scale
  0.1: NEST's example defaults), each population's mean rate over 5 seeds
  lies within 3 combined standard errors of NEST's mean over its 10 seeds,
  committed in ``examples/microcircuit/nest_reference.json`` (written by
  ``python -m examples.microcircuit.nest_reference --warmup 100 --duration
  400 --threads 2 --write 10``, 20 s on 2 cores). Warm-up 100 ms, 400 ms
  measured. Figures in docs/microcircuit.md.
"""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from examples.microcircuit import params
from examples.microcircuit.model import Microcircuit, initial_v

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a build of 155 neurons
def test_the_network_is_nests():
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  mc = Microcircuit(mesh, n_scale=0.002, k_scale=0.05, seed=2)
  net, p = mc.network, mc.scaled
  assert len(net.groups) == 1          # one model: iaf_psc_exp
  model = net.groups[0].model
  assert model.nest_name == "iaf_psc_exp"
  assert model.params["tau_syn_ex"] == model.params["tau_syn_in"] == 0.5
  assert mc.delivery.index.value.n_receptors == 2    # routed by sign
  assert mc.n_synapses == int(p.synapses.sum())
  assert len(net._projections) == int((p.synapses > 0).sum())
  assert [s.device.params["rate"] for s in net._stimuli] == list(
      params.BG_RATE * p.k_ext)
  assert list(mc.recorders) == list(params.POPULATIONS)
  v0 = net.get(mc.populations["L4E"], "V_m")
  np.testing.assert_allclose(v0, initial_v(p, 2)[2].astype(np.float32))
  with pytest.raises(ValueError, match="background must be"):
    Microcircuit(mesh, n_scale=0.002, background="none")


def _spikes(devices, **kw):
  mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices])
  mc = Microcircuit(mesh, **kw)
  out = mc.run(warmup=20.0, duration=100.0)
  return mc, np.asarray(out["spikes"].steps), np.asarray(out["spikes"].neurons)


@pytest.mark.slow
def test_one_and_eight_devices_give_the_same_spikes():
  # 771 neurons: 97 per shard on 8 devices (layout shards of <= 32 neurons
  # compile to different XLA:CPU code and may differ in ulps).
  kw = dict(n_scale=0.01, k_scale=0.05, seed=3)
  one, steps1, ids1 = _spikes(1, **kw)
  eight, steps8, ids8 = _spikes(8, **kw)
  assert eight.layout.n_local >= 64 and eight.every == one.every
  assert len(steps1) > 100
  for name in params.POPULATIONS:   # every population is active
    a, b = one.layout.range(name)
    assert ((ids1 >= a) & (ids1 < b)).any(), name
  np.testing.assert_array_equal(steps1, steps8)
  np.testing.assert_array_equal(ids1, ids8)


SEEDS = (1, 2, 3, 4, 5)
WARMUP, MEASURED = 100.0, 400.0   # ms


def _mean_se(runs):
  x = np.array([[r[p] for p in params.POPULATIONS] for r in runs])
  return x.mean(0), x.std(0, ddof=1) / np.sqrt(len(x))


@pytest.mark.slow
def test_rates_match_nest_at_scale_0_1():
  ref = json.loads((ROOT / "examples" / "microcircuit" /
                    "nest_reference.json").read_text())
  assert (ref["scale"], ref["k_scale"], ref["warmup_ms"],
          ref["measured_ms"]) == (0.1, 0.1, WARMUP, MEASURED)
  mesh = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
  ours = [Microcircuit(mesh, 0.1, 0.1, seed=s).run(WARMUP, MEASURED)["rates"]
          for s in SEEDS]
  theirs = ref["rates"]
  m_bs, se_bs = _mean_se(ours)
  m_nest, se_nest = _mean_se(theirs)
  se = np.sqrt(se_bs ** 2 + se_nest ** 2)     # SE of the difference
  report = "\n".join(
      f"{p:>5}: brainshard {a:.3f} +- {sa:.3f}, NEST {b:.3f} +- {sb:.3f} Hz"
      for p, a, sa, b, sb in zip(params.POPULATIONS, m_bs, se_bs, m_nest,
                                 se_nest))
  print(report)
  assert (m_nest > 0.1).all() and (se > 0).all(), report
  assert (np.abs(m_bs - m_nest) <= 3 * se).all(), report


@pytest.mark.slow  # a build and compile at scale 0.01
def test_the_docs_model_code_runs():
  import re
  text = (ROOT / "docs" / "microcircuit.md").read_text()
  (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
  ns: dict = {}
  exec(compile(block, "docs/microcircuit.md", "exec"), ns)
  assert list(ns["rates"]) == list(params.POPULATIONS)
  assert all(r > 0 for r in ns["rates"].values()), ns["rates"]
