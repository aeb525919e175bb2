"""NEST's stimulation devices as pure per-step emitters, without NEST.

The timing rules (``brainshard/_models/devices/base.py``) are checked here
against NEST's ``is_active`` written out by brute force; the comparisons
with NEST itself are in ``test_devices_nest.py``. Also: the same numbers
on 1 and 8 devices inside ``bs.shard_map``, no retrace on repeated steps,
exact Poisson counts, the noise's piecewise constant intervals, and bad
input refused with errors that name the argument.
"""

import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import brainshard as bs
from brainshard import models as bm
from brainshard._models.devices import (
    DEVICES, DcGenerator, NoiseGenerator, PoissonGenerator, SpikeGenerator,
    StepCurrentGenerator)

from conftest import make_mesh

DT = 0.1


def emitted(dev, steps, targets=1, key=None, dtype=jnp.float32):
  """``emit`` for steps ``0 .. steps - 1``: ``[steps, n]``."""
  c = dev.constants(DT)
  run = jax.jit(jax.vmap(lambda t: dev.emit(c, t, targets, key, dtype=dtype)))
  return np.asarray(run(jnp.arange(steps, dtype=jnp.int32)))


def test_registry_and_public_names():
  assert sorted(DEVICES) == ["dc_generator", "noise_generator",
                             "poisson_generator", "spike_generator",
                             "step_current_generator"]
  for name, cls in DEVICES.items():
    assert cls.nest_name == name and getattr(bm, cls.__name__) is cls
    assert cls.emits in ("spikes", "current")
    assert {"origin", "start", "stop"} <= set(cls.defaults)
  assert [c.random for c in (PoissonGenerator, NoiseGenerator)] == [True] * 2
  assert NoiseGenerator().params["dt"] is None   # NEST: 10 * resolution
  assert "rate=8.0" in repr(PoissonGenerator(rate=8.0))


# origin, start, stop (ms): NEST's edges
WINDOWS = [(0.0, 0.0, math.inf), (0.0, 1.0, 2.0), (0.5, 1.0, 2.0),
           (0.0, 0.1, 0.3), (0.0, 1.0, 1.0), (2.0, 0.0, 1.0)]


def test_activity_window_is_nests():
  """``is_active``: t_min < step <= t_max, step + 2 for current devices."""
  steps = np.arange(-3, 60)
  devices, want = [], []
  for origin, start, stop in WINDOWS:
    t_min = round((origin + start) / DT)
    t_max = math.inf if stop == math.inf else round((origin + stop) / DT)
    for cls, lead, params in ((DcGenerator, 2, {"amplitude": 1.0}),
                              (PoissonGenerator, 0, {"rate": 2e5})):
      devices.append(cls(origin=origin, start=start, stop=stop, **params))
      want.append((t_min < steps + lead) & (steps + lead <= t_max)
                  & (steps >= 0))             # no device sends before 0
  consts = [d.constants(DT) for d in devices]
  run = jax.jit(jax.vmap(lambda t: [d.emit(c, t, 4, key=0)
                                    for d, c in zip(devices, consts)]))
  for d, got, w in zip(devices, run(jnp.asarray(steps, jnp.int32)), want):
    np.testing.assert_array_equal(np.asarray(got).all(1), w, err_msg=repr(d))
    np.testing.assert_array_equal(np.asarray(got).any(1), w, err_msg=repr(d))
  # NEST's Time::ms truncates toward zero after adding half a tic: every
  # negative time is off the grid, so NEST refuses a negative start
  with pytest.raises(ValueError, match="start: -0.5 ms is not a multiple"):
    DcGenerator(start=-0.5).constants(DT)


def test_spike_generator_steps():
  """A spike at s steps is sent in step s - 1 if t_min < s <= t_max."""
  sg = SpikeGenerator(spike_times=[0.1, 0.5, 0.5, 1.0, 2.0, 2.1],
                      start=0.5, stop=2.0)
  got = emitted(sg, 30)[:, 0]
  assert got.dtype == np.int32
  # 0.1 is before start, 0.5 is start (not after it), 2.1 after stop
  assert sent(got) == {9: 1, 19: 1}
  # origin moves the window too: 0 + origin is t_min, not after it
  shifted = SpikeGenerator(spike_times=[0.0, 0.3], origin=0.2,
                           shift_now_spikes=True)
  assert np.nonzero(emitted(shifted, 10)[:, 0])[0].tolist() == [4]
  at_zero = SpikeGenerator(spike_times=[0.0, 0.3], shift_now_spikes=True)
  assert np.nonzero(emitted(at_zero, 10)[:, 0])[0].tolist() == [0, 2]
  off = SpikeGenerator(spike_times=[-0.05, 0.11, 0.2, 0.25, 0.3],
                       allow_offgrid_times=True, origin=0.1)
  # ends of their steps, 0.0 (at start: never sent), 0.2, 0.2, 0.3, 0.3,
  # plus origin: stamped 2, 3, 3, 4, 4
  assert sent(emitted(off, 10)[:, 0]) == {2: 2, 3: 2}


def sent(values):
  return {int(t): values[t].item() for t in np.nonzero(values)[0]}


def test_spike_weights_multiplicities_and_targets():
  sg = SpikeGenerator(spike_times=[0.2, 0.2, 0.4], spike_weights=[1.5, -0.25,
                      2.0], spike_multiplicities=[2, 1, 3])
  got = emitted(sg, 6, targets=np.array([0, -1, 0]))
  assert got.dtype == np.float32
  assert sent(got[:, 0]) == {1: 2.75, 3: 6.0} and not got[:, 1].any()
  per = SpikeGenerator(spike_times=[[0.2, 0.2, 0.5], [], [0.1, 0.5]])
  ids = np.array([2, 1, 0, -1, 0, 2, 3])            # 3: past the trains
  got = emitted(per, 6, targets=ids)
  want = np.zeros((6, 7), int)
  want[1, [2, 4]] = 2
  want[4, [2, 4]] = 1
  want[0, [0, 5]] = 1
  want[4, [0, 5]] = 1
  np.testing.assert_array_equal(got, want)


def test_step_current_amplitude_changes_one_step_ahead():
  sc = StepCurrentGenerator(amplitude_times=[0.3, 0.5, 0.8],
                            amplitude_values=[1.0, 2.0, 3.0], stop=0.9)
  got = emitted(sc, 10)[:, 0]
  # time s steps: sent from step s - 1; current window: step + 2 <= 9
  np.testing.assert_array_equal(got, [0, 0, 1, 1, 2, 2, 2, 3, 0, 0])
  off = StepCurrentGenerator(amplitude_times=[0.25, 0.31],
                             amplitude_values=[4.0, 5.0],
                             allow_offgrid_times=True)
  np.testing.assert_array_equal(emitted(off, 5)[:, 0], [0, 0, 4, 5, 5])
  empty = StepCurrentGenerator()
  assert not emitted(empty, 3).any()


def test_noise_is_piecewise_constant_from_its_first_active_step():
  noise = NoiseGenerator(mean=1.0, std=2.0, dt=0.4, start=0.5, stop=3.0)
  got = emitted(noise, 40, 16, key=jax.random.key(5))
  active = np.arange(40)
  active = (active >= 4) & (active <= 28)    # 5 < t + 2 <= 30
  assert (got[~active] == 0).all() and (got[active] != 0).all()
  changes = [t for t in range(5, 29) if (got[t] != got[t - 1]).any()]
  assert changes == [8, 12, 16, 20, 24, 28]  # from step 4, every 4 steps
  assert (got[changes] != got[np.array(changes) - 1]).all()  # every target
  default = NoiseGenerator(mean=1.0, std=2.0).constants(DT)
  assert int(default["interval"]) == 10 and int(default["t0"]) == 0
  flat = NoiseGenerator(mean=3.0)  # std 0: the mean, nothing drawn
  np.testing.assert_array_equal(emitted(flat, 3, 2), np.full((3, 2), 3.0))


@pytest.mark.slow
def test_poisson_counts_are_poisson():
  """Per-step counts of 2000 targets over 500 steps against the exact pmf
  (chi-square, p > 1e-4), for the table (lam = 0.5) and the exact loop
  (lam = 5e-4, counts pooled over 100 targets)."""
  from scipy import stats
  for rate, pool in ((5000.0, 1), (5.0, 100)):
    lam = DT * rate * 1e-3 * pool
    pg = PoissonGenerator(rate=rate)
    counts = emitted(pg, 501, 2000, key=jax.random.key(11))[1:]
    counts = counts.reshape(500, -1, pool).sum(-1).ravel()
    k = np.arange(6)
    observed = np.bincount(np.minimum(counts, 5), minlength=6)
    pmf = stats.poisson.pmf(k, lam)
    pmf[-1] = 1 - pmf[:-1].sum()
    expected = pmf * counts.size
    keep = expected > 5
    chi2 = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    chi2 += (observed[~keep].sum() - expected[~keep].sum()) ** 2 / max(
        expected[~keep].sum(), 1e-12)
    assert stats.chi2.sf(chi2, keep.sum()) > 1e-4, (rate, observed, expected)


@pytest.mark.slow
def test_same_numbers_on_8_devices_as_on_1():
  """Inside bs.shard_map a shard's values are its block of the unsharded
  ones: every device, 40 steps, 64 targets."""
  n, steps = 256, 40
  ids = np.arange(n, dtype=np.int32) % 5 - 1       # -1: not a target
  devices = [PoissonGenerator(rate=5000.0), PoissonGenerator(rate=9.0),
             NoiseGenerator(mean=5.0, std=3.0, std_mod=2.0, frequency=300.0,
                            dt=0.3, start=0.5),
             DcGenerator(amplitude=2.0, stop=2.0),
             StepCurrentGenerator(amplitude_times=[1.0],
                                  amplitude_values=[7.0]),
             SpikeGenerator(spike_times=[[0.1, 0.5], [0.5], [], [1.0, 1.0]])]
  consts = [d.constants(DT) for d in devices]
  rng = bs.RandomState(3)

  def run(ids):
    def step(_, t):
      return None, [d.emit(c, t, ids, rng) for d, c in zip(devices, consts)]
    return jax.lax.scan(step, None, jnp.arange(steps, dtype=jnp.int32))[1]

  whole = bs.jit(run)(ids)
  mesh = make_mesh((8,), ("x",))
  sharded = bs.jit(bs.shard_map(run, mesh=mesh, in_specs=P("x"),
                                out_specs=P(None, "x")))(ids)
  for d, a, b in zip(devices, whole, sharded):
    assert np.asarray(a).any(), d
    np.testing.assert_array_equal(np.asarray(b), np.asarray(a),
                                  err_msg=d.nest_name)
  # A number of slots draws the same as their indices do.
  pg, c = devices[0], consts[0]
  by_count = bs.jit(bs.shard_map(lambda: pg.emit(c, 7, n // 8, rng),
                                 mesh=mesh, in_specs=(), out_specs=P("x")))()
  np.testing.assert_array_equal(
      np.asarray(by_count), np.asarray(pg.emit(c, 7, n, rng)))


def test_traced_constants_draw_as_closed_over_and_no_retrace():
  pg = PoissonGenerator(rate=3000.0)
  c = pg.constants(DT)
  key = jax.random.key(2)
  traces = []

  @bs.jit
  def step(c, t):
    traces.append(1)
    return pg.emit(c, t, 50, key)

  got = [np.asarray(step(c, jnp.int32(t))) for t in range(1, 6)]
  assert len(traces) == 1
  for t, g in zip(range(1, 6), got):
    np.testing.assert_array_equal(g, pg.emit(c, t, 50, key))
  assert not all((g == got[0]).all() for g in got[1:])  # fresh per step


def test_key_forms():
  pg = PoissonGenerator(rate=3000.0)
  c = pg.constants(DT)
  want = np.asarray(pg.emit(c, 3, 10, jax.random.key(4)))
  for key in (4, np.int64(4), jax.random.PRNGKey(4), bs.RandomState(4)):
    np.testing.assert_array_equal(pg.emit(c, 3, 10, key), want)
  with pytest.raises(TypeError, match="needs key="):
    pg.emit(c, 3, 10)
  with pytest.raises(TypeError, match="key must be"):
    pg.emit(c, 3, 10, "4")


def test_dtypes():
  dc = DcGenerator(amplitude=0.1)
  assert emitted(dc, 2).dtype == np.float32
  with jax.enable_x64(True):
    got = emitted(dc, 2, dtype=jnp.float64)
  assert got.dtype == np.float64 and got[0, 0] == 0.1


BAD = [
    (PoissonGenerator, {"rat": 1.0}, ValueError, "unknown parameter.*rat"),
    (PoissonGenerator, {"rate": -1.0}, ValueError, "rate cannot be negative"),
    (PoissonGenerator, {"rate": math.nan}, ValueError, "rate must be finite"),
    (PoissonGenerator, {"rate": "5"}, TypeError, "rate must be a number"),
    (DcGenerator, {"start": 5.0, "stop": 2.0}, ValueError, "stop >= start"),
    (DcGenerator, {"amplitude": math.inf}, ValueError, "amplitude must be fin"),
    (DcGenerator, {"start": -math.inf}, ValueError, "start must be finite"),
    (NoiseGenerator, {"std": -1.0}, ValueError, "std: the standard deviation"),
    (NoiseGenerator, {"std": 1.0, "std_mod": 2.0}, ValueError, "std_mod must"),
    (NoiseGenerator, {"dt": 0.0}, ValueError, "dt must be > 0"),
    (StepCurrentGenerator, {"amplitude_times": [1.0]}, ValueError,
     "the same size"),
    (StepCurrentGenerator, {"amplitude_times": [2.0, 1.0],
                            "amplitude_values": [1.0, 2.0]}, ValueError,
     "amplitude_times must be strictly increasing"),
    (StepCurrentGenerator, {"amplitude_times": [0.0],
                            "amplitude_values": [1.0]}, ValueError, "> 0"),
    (StepCurrentGenerator, {"amplitude_times": [1.0],
                            "amplitude_values": [math.nan]}, ValueError,
     "amplitude_values must be finite"),
    (StepCurrentGenerator, {"allow_offgrid_times": 1}, TypeError,
     "allow_offgrid_times must be True or False"),
    (SpikeGenerator, {"spike_times": [1.0, 0.5]}, ValueError,
     "spike_times must be sorted.*1.0 before 0.5"),
    (SpikeGenerator, {"spike_times": [[1.0], [2.0, 1.5]]}, ValueError,
     r"spike_times\[1\] must be sorted"),
    (SpikeGenerator, {"spike_times": [1.0, math.inf]}, ValueError,
     "spike_times must be finite"),
    (SpikeGenerator, {"spike_times": [0.0, 1.0]}, ValueError,
     "cannot be 0"),
    (SpikeGenerator, {"spike_times": [1.0], "spike_weights": [1.0, 2.0]},
     ValueError, "spike_weights must have the same number"),
    (SpikeGenerator, {"spike_times": [1.0], "spike_multiplicities": [1.5]},
     ValueError, "whole numbers"),
    (SpikeGenerator, {"precise_times": True}, ValueError,
     "precise_times=True is not supported"),
    (SpikeGenerator, {"spike_times": "1.0"}, TypeError, "spike_times must be"),
]


@pytest.mark.parametrize("cls, params, error, match", BAD,
                         ids=[f"{c.nest_name}-{m[:20]}" for c, _, _, m in BAD])
def test_bad_input_names_the_argument(cls, params, error, match):
  with pytest.raises(error, match=match):
    cls(**params)


def test_off_grid_times_are_refused_at_the_resolution():
  for dev, what in ((DcGenerator(start=0.15), "start: 0.15 ms"),
                    (DcGenerator(origin=0.05), "origin: 0.05 ms"),
                    (SpikeGenerator(spike_times=[0.1, 0.25]),
                     "spike_times: 0.25 ms"),
                    (SpikeGenerator(spike_times=[[0.1], [0.25]]),
                     r"spike_times\[1\]: 0.25 ms"),
                    (StepCurrentGenerator(amplitude_times=[0.33],
                                          amplitude_values=[1.0]),
                     "amplitude_times: 0.33 ms"),
                    (NoiseGenerator(std=1.0, dt=0.25), "dt: 0.25 ms")):
    with pytest.raises(ValueError, match=f"{what} is not a multiple of"):
      dev.constants(DT)
  for dev in (SpikeGenerator(spike_times=[1e20]),
              SpikeGenerator(spike_times=[1e20], allow_offgrid_times=True)):
    with pytest.raises(ValueError, match="spike_times: 1e.20 ms is beyond"):
      dev.constants(DT)
  far = DcGenerator(amplitude=1.0, stop=1e300).constants(DT)  # never stops
  assert int(far["last"]) == 2**31 - 1
  # rounded to the end of their steps, two amplitude times meet
  with pytest.raises(ValueError, match="strictly increasing steps"):
    StepCurrentGenerator(amplitude_times=[0.21, 0.25], allow_offgrid_times=True,
                         amplitude_values=[1.0, 2.0]).constants(DT)


def test_bad_targets():
  dc = DcGenerator(amplitude=1.0)
  c = dc.constants(DT)
  with pytest.raises(TypeError, match="targets: expected"):
    dc.emit(c, 0, np.zeros(3))
  with pytest.raises(ValueError, match="targets: a number of slots"):
    dc.emit(c, 0, -1)
  per = SpikeGenerator(spike_times=[[0.1], [0.2]])
  with pytest.raises(TypeError, match="per target needs targets="):
    per.emit(per.constants(DT), 0, 2)
