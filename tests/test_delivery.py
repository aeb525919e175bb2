"""Event-driven delivery: fired ids, the ring-buffer scatter, the exchange.

References are hand-written NumPy: a float32 ring buffer filled synapse by
synapse in global presynaptic order, and a LIF network stepped in a Python
loop. The promise checked bit for bit: the same spikes and the same final
States on 1, 2, 4 and 8 devices, and with one exchange per step or per
minimum delay.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import brainshard as bs
from brainshard._models.delays import delay_steps, ring_length
from brainshard._models.delivery.push import deliver
from brainshard._models.delivery.from_arrays import index_from_arrays
from brainshard._models.delivery.events import fired_ids, first_fired
from brainshard._models.delivery.delivery import Delivery
from brainshard._models.layout import Layout


def random_synapses(rng, n, n_real, k, delays=(2, 7), n_exc=None):
  """k inputs per real neuron from real neurons; E (< n_exc) positive on
  receptor 0, I negative on receptor 1; float weights, mixed delays."""
  n_exc = n_real * 4 // 5 if n_exc is None else n_exc
  post = np.repeat(np.arange(n_real), k)
  pre = rng.integers(0, n_real, post.size)
  inh = pre >= n_exc
  weight = np.where(inh, -rng.uniform(1.0, 3.0, post.size),
                    rng.uniform(0.2, 1.2, post.size)).astype(np.float32)
  delay = rng.integers(delays[0], delays[1] + 1, post.size)
  return dict(pre=pre, post=post, weight=weight, delay=delay,
              receptor=inh.astype(np.int64))


def ref_ring(syn, fired_steps, n, length, n_rec=2):
  """NumPy: the ring buffer after delivering ``fired_steps[t]`` at step t."""
  buf = np.zeros((n_rec, length, n), np.float32)
  order = np.argsort(syn["pre"], kind="stable")
  by_pre = {j: order[syn["pre"][order] == j] for j in np.unique(syn["pre"])}
  for t, fired in enumerate(fired_steps):
    for j in np.flatnonzero(fired):
      for s in by_pre.get(j, ()):
        r, slot = syn["receptor"][s], (t + syn["delay"][s]) % length
        buf[r, slot, syn["post"][s]] += syn["weight"][s]
  return buf


# -- fired ids -----------------------------------------------------------------

@pytest.mark.parametrize("n,size", [(100, 4), (1000, 16), (1000, 64),
                                    (5000, 64), (300, 300), (3000, 2000)])
def test_fired_ids_are_the_fired_neurons_in_order(n, size):
  rng = np.random.default_rng(n + size)
  for count in (0, 1, size // 2, size):
    fired = np.zeros(n, bool)
    fired[rng.choice(n, count, replace=False)] = True
    got = np.asarray(jax.jit(fired_ids, static_argnums=1)(fired, size))
    want = np.full(size, n)
    want[:count] = np.flatnonzero(fired)
    np.testing.assert_array_equal(got, want)


def test_first_fired_caps_and_pads():
  fired = np.zeros(50, bool)
  fired[[3, 9, 20, 21, 40]] = True
  got = first_fired(jnp.asarray(fired), 5, 4, sizes=(2,))
  assert got.tolist() == [3, 9, 20, 21]
  got = first_fired(jnp.asarray(fired), 5, 8, sizes=(2, 4))
  assert got.tolist() == [3, 9, 20, 21, 40, 50, 50, 50]


# -- the scatter into the ring buffer -------------------------------------------

@pytest.mark.slow
def test_deliver_matches_numpy_bit_for_bit():
  """Random spikes, few search sizes (so several passes and every branch
  run): the buffer equals the NumPy one exactly, sums in the same order."""
  rng = np.random.default_rng(1)
  n, steps = 96, 6
  syn = random_synapses(rng, n, n, 12, delays=(1, 5))
  idx = index_from_arrays(**syn, n=n, n_receptors=2)
  length = ring_length(idx.max_delay)
  # From no spike to all: every branch and several passes run.
  density = np.array([0.0, 0.02, 0.1, 0.3, 0.6, 1.0])[:, None]
  fired = rng.random((steps, n)) < density

  @jax.jit
  def run(fired):
    buf = jnp.zeros((2, length, n), jnp.float32)
    return jax.lax.fori_loop(0, steps, lambda t, b: deliver(
        b, fired[t], t, idx, sizes=(2, 8)), buf)
  np.testing.assert_array_equal(np.asarray(run(fired)),
                                ref_ring(syn, fired, n, length))


@pytest.mark.parametrize("width", [1, 5, 64, 1024, None])
def test_deliver_windows_match_numpy_with_narrow_index_dtypes(width):
  """Rows longer than a window (several windows, the last one clamped at
  the end of the index), short rows several per iteration (width 1024),
  16 neurons an iteration (width None, the non-CPU path) and narrow index dtypes (uint8 delay, int8 receptor, int16 post): the
  buffer equals the NumPy one exactly."""
  import dataclasses
  rng = np.random.default_rng(3)
  n, steps = 40, 4
  syn = random_synapses(rng, n, n, 9, delays=(1, 6))
  idx = index_from_arrays(**syn, n=n, n_receptors=2)
  idx = dataclasses.replace(
      idx, delay=idx.delay.astype(jnp.uint8),
      receptor=idx.receptor.astype(jnp.int8), post=idx.post.astype(jnp.int16))
  length = ring_length(idx.max_delay)
  fired = rng.random((steps, n)) < np.array([0.05, 0.3, 1.0, 0.0])[:, None]
  fired[0, n - 1] = True  # the last row: its windows end at the capacity

  @jax.jit
  def run(fired):
    buf = jnp.zeros((2, length, n), jnp.float32)
    return jax.lax.fori_loop(0, steps, lambda t, b: deliver(
        b, fired[t], t, idx, sizes=(2, 8), width=width), buf)
  np.testing.assert_array_equal(np.asarray(run(fired)),
                                ref_ring(syn, fired, n, length))


def test_deliver_checks_the_spike_vector():
  idx = index_from_arrays([0], [1], [1.0], [1], n=4)
  with pytest.raises(ValueError, match=r"fired has shape \(3,\).*\(4,\)"):
    deliver(jnp.zeros((1, 1, 4)), jnp.zeros(3, bool), 0, idx)


def test_index_from_arrays_errors_name_the_input():
  ok = dict(pre=[0, 1], post=[1, 2], weight=[1.0, 2.0], delay=[1, 2])
  with pytest.raises(ValueError, match=r"lengths differ.*'weight': 1"):
    index_from_arrays(**{**ok, "weight": [1.0]}, n=4)
  with pytest.raises(ValueError, match=r"post ids must lie in \[0, 4\), got \[1, 7\]"):
    index_from_arrays(**{**ok, "post": [1, 7]}, n=4)
  with pytest.raises(ValueError, match=r"delays are steps >= 1, got 0"):
    index_from_arrays(**{**ok, "delay": [0, 2]}, n=4)
  with pytest.raises(ValueError, match=r"n = 5 is not a multiple of n_shards = 2"):
    index_from_arrays(**ok, n=5, n_shards=2)
  with pytest.raises(ValueError, match=r"receptor 2 >= n_receptors 2"):
    index_from_arrays(**ok, receptor=[0, 2], n=4, n_receptors=2)


def test_delay_steps_follow_nest():
  # As NEST 3.10 rounds them (checked there: 0.15 -> 0.2, 0.25 -> 0.3).
  got = delay_steps([0.1, 0.06, 0.05, 0.15, 0.25, 0.35, 1.45, 1.5], 0.1)
  assert got.tolist() == [1, 1, 1, 2, 3, 4, 15, 15]
  with pytest.raises(ValueError, match=r"delay\[1\] = 0.04 ms rounds to 0 steps of dt=0.1"):
    delay_steps([1.0, 0.04], 0.1)


# -- a LIF network on the mesh --------------------------------------------------

DT, TAU_M, TAU_E, TAU_I, V_TH, V_RESET = 0.1, 10.0, 2.0, 5.0, 1.0, 0.0
DM, DE, DI = (np.float32(np.exp(-DT / tau)) for tau in (TAU_M, TAU_E, TAU_I))


def lif(v, ie, ii, drive, x_e, x_i):
  """One step (works on NumPy float32 and on jax arrays): the currents
  decay and take this step's input, then the membrane integrates them."""
  ie = ie * DE + x_e
  ii = ii * DI + x_i
  v = v * DM + (drive + ie + ii) * (1 - DM)
  spikes = v > V_TH
  return v * ~spikes + V_RESET * spikes, ie, ii, spikes


def ref_network(syn, n, drive, v0, steps):
  """NumPy: the network with a ring buffer, delivered synapse by synapse."""
  length = int(syn["delay"].max()) + 1
  buf = np.zeros((2, length, n), np.float32)
  order = np.argsort(syn["pre"], kind="stable")
  v, ie, ii = v0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
  out = []
  for t in range(steps):
    x = buf[:, t % length].copy()
    buf[:, t % length] = 0
    v, ie, ii, spikes = lif(v, ie, ii, drive, x[0], x[1])
    out.append(spikes)
    for j in np.flatnonzero(spikes):
      for s in order[syn["pre"][order] == j]:
        buf[syn["receptor"][s], (t + syn["delay"][s]) % length,
            syn["post"][s]] += syn["weight"][s]
  return np.array(out), v


class Net:
  """The LIF network on a mesh of ``devices`` devices (Layout-padded)."""

  def __init__(self, syn, layout, drive, v0, devices, every=1,
               axis_type=AxisType.Explicit, kernel="auto"):
    layout = layout.with_shards(devices)
    mesh = jax.make_mesh((devices,), ("x",), devices=jax.devices()[:devices],
                         axis_types=(axis_type,))
    n = layout.n_padded
    pad = lambda a: np.pad(a, (0, n - len(a))).astype(np.float32)  # noqa: E731
    idx = index_from_arrays(**syn, n=n, n_shards=devices, n_receptors=2,
                            mesh=mesh)
    self.delivery = Delivery(idx, mesh, every=every, kernel=kernel)
    self.v = bs.State(pad(v0), name="v", spec=P("x"))
    self.ie = bs.State(pad(v0 * 0), name="ie", spec=P("x"))
    self.ii = bs.State(pad(v0 * 0), name="ii", spec=P("x"))
    self.drive = bs.ParamState(pad(drive), name="drive", spec=P("x"))
    self.step = self.delivery.step(self.update)
    self.layout = layout

  def update(self, x):
    v, ie, ii, spikes = lif(self.v.value, self.ie.value, self.ii.value,
                            self.drive.value, x[0], x[1])
    self.v.value, self.ie.value, self.ii.value = v, ie, ii
    return spikes

  def run(self, steps):
    calls = steps // self.delivery.every
    spikes = bs.jit(lambda: bs.for_loop(self.step, length=calls))()
    spikes = np.asarray(spikes).reshape(steps, -1)[:, :self.layout.n]
    return spikes, *(np.asarray(s.value)[:self.layout.n]
                     for s in (self.v, self.ie, self.ii))


def small_network(seed=0, n_e=40, n_i=11, k=10, delays=(2, 7)):
  rng = np.random.default_rng(seed)
  layout = Layout({"E": n_e, "I": n_i})
  syn = random_synapses(rng, layout.n, layout.n, k, delays, n_exc=n_e)
  drive = rng.uniform(0.9, 1.6, layout.n).astype(np.float32)
  v0 = rng.uniform(0, 1, layout.n).astype(np.float32)
  return syn, layout, drive, v0


@pytest.mark.slow
def test_network_matches_numpy_reference():
  syn, layout, drive, v0 = small_network()
  steps = 300
  want_spikes, want_v = ref_network(syn, layout.n, drive, v0, steps)
  assert 20 < want_spikes.sum() and want_spikes[:, 40:].any()
  spikes, v, _, _ = Net(syn, layout, drive, v0, devices=1).run(steps)
  np.testing.assert_array_equal(spikes, want_spikes)
  np.testing.assert_allclose(v, want_v, rtol=1e-5, atol=1e-6)


STEPS = 200


@pytest.fixture(scope="module")
def one_device_run():
  """small_network(seed=3) on 1 device for STEPS steps: the reference of
  the mesh tests below (spikes and final v, ie, ii)."""
  return Net(*small_network(seed=3), devices=1).run(STEPS)


@pytest.mark.slow
def test_bit_identical_on_1_2_8_devices_and_per_min_delay(one_device_run):
  """Same spikes and the same synaptic currents, bit for bit, on every mesh,
  exchanging every step or every min-delay (2) steps.

  The currents are the delivered sums (decayed): equal bits mean every
  target summed the same inputs in the same order. The membrane potential
  is compared to float32 rounding only: its update compiles differently
  for 8 neurons per shard inside a 2-step loop (up to ~40 ulp after 200
  steps; XLA:CPU fuses multiply-adds, see docs/models_delivery.md), which
  is the neuron update's code generation, not the delivery.
  """
  syn, layout, drive, v0 = small_network(seed=3)
  want = one_device_run
  assert want[0].sum() > 50
  # 2 and 8 shards bracket the meshes (4 shards run in the Auto-mesh and
  # min-delay-of-three tests below): per step and per min delay.
  for devices, every in ((2, 1), (8, 1), (1, 2), (8, 2)):
    got = Net(syn, layout, drive, v0, devices=devices, every=every).run(
        STEPS)
    what = f"{devices} devices, every {every}"
    np.testing.assert_array_equal(got[0], want[0], err_msg=what)
    assert got[2].tobytes() == want[2].tobytes(), what
    assert got[3].tobytes() == want[3].tobytes(), what
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_auto_mesh_gives_the_same_spikes_and_currents(one_device_run):
  syn, layout, drive, v0 = small_network(seed=3)
  want = one_device_run
  got = Net(syn, layout, drive, v0, devices=4, every=2,
            axis_type=AxisType.Auto).run(STEPS)
  np.testing.assert_array_equal(got[0], want[0])
  assert got[2].tobytes() == want[2].tobytes() and want[0].sum() > 20


@pytest.mark.slow
def test_exchange_per_min_delay_of_three_steps():
  """Delays of 3-9 steps: exchanging every 3 steps on 4 devices gives the
  spikes and currents of exchanging every step."""
  syn, layout, drive, v0 = small_network(seed=5, delays=(3, 9))
  a = Net(syn, layout, drive, v0, devices=4, every=1).run(120)
  b = Net(syn, layout, drive, v0, devices=4, every=3).run(120)
  np.testing.assert_array_equal(a[0], b[0])
  assert a[2].tobytes() == b[2].tobytes() and a[3].tobytes() == b[3].tobytes()
  assert a[0].sum() > 20


@pytest.mark.slow
def test_delivery_errors_name_the_problem():
  mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
  idx = index_from_arrays([0, 1], [1, 0], [1.0, 1.0], [2, 3], n=4, n_shards=2)
  with pytest.raises(ValueError, match=r"every = 3 .* min_delay = 2"):
    Delivery(idx, mesh, every=3)
  with pytest.raises(ValueError, match=r"built for 1 shard.*has 2"):
    Delivery(index_from_arrays([0], [1], [1.0], [1], n=4), mesh)
  with pytest.raises(ValueError, match=r"not 'y'"):
    Delivery(idx, mesh, axis="y")
  d = Delivery(idx, mesh, every=1)
  step = d.step(lambda x: jnp.ones(2, bool))   # every neuron fires
  assert step().shape == (4,) and int(d.t.value) == 1
  assert float(np.abs(np.asarray(d.buffer.value)).sum()) == 2.0
  d.reset()
  assert int(d.t.value) == 0 and not np.asarray(d.buffer.value).any()
  bad = d.step(lambda x: x[0])
  with pytest.raises(ValueError, match=r"update returned float32\[2\].*bool\[2\]"):
    bad()


# -- today's examples/cuba.py --delay D, on Delivery ------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("delay", [1, 3])
def test_cuba_delay_is_delivery_delay_with_input_before_integration(delay):
  """The docs' table row: ``cuba.py --delay D`` is a Delivery delay of D
  steps with cuba's update (input added before integrating). Weights 1 on
  receptors E/I give cuba's integer counts exactly, so the spikes of
  cuba's own EINetwork are reproduced one for one."""
  from examples import cuba
  from brainshard import models as bm

  n, k, steps = 800, 40, 600
  mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
  ref = cuba.EINetwork(mesh, "cuba", seed=1, n=n, k=k, delay=delay)
  p = ref.params
  v0 = np.asarray(ref.v.value)
  want = ref.run(steps * p.dt)
  pre = np.asarray(bm.hashed_presynaptic(jnp.arange(n), k, n=n, n_exc=p.n_exc, k=k,
                                  seed=1))
  inh = pre.ravel() >= p.n_exc
  idx = index_from_arrays(pre.ravel(), np.repeat(np.arange(n), k),
                          np.ones(n * k), np.full(n * k, delay), inh,
                          n=n, n_shards=2, n_receptors=2, mesh=mesh)
  net = Delivery(idx, mesh, every=1)
  zeros = np.zeros(n, np.float32)
  v, ge, gi = (bs.State(a, spec=P("x")) for a in (v0, zeros, zeros))
  ref_steps = bs.State(np.zeros(n, np.int32), spec=P("x"))

  def update(x):  # cuba's neuron_update adds the input, then integrates
    out = cuba.neuron_update(p, v.value, ge.value, gi.value, ref_steps.value,
                             x[0], x[1])
    v.value, ge.value, gi.value, ref_steps.value, spikes = out
    return spikes
  step = net.step(update)
  got = np.asarray(bs.jit(lambda: bs.for_loop(step, length=steps))())
  assert want.sum() > 100
  np.testing.assert_array_equal(got, want)


def test_a_runner_takes_the_delivery_steps_time_and_refuses_another():
  # The index knows its dt; exchanging every 3 steps, a call is 0.3 ms.
  mesh = jax.make_mesh((1,), ('x',))
  idx = index_from_arrays([0], [1], [1.0], [3], n=2, dt=0.1)
  net = Delivery(idx, mesh, every=3)
  step = net.step(lambda inputs: jnp.zeros(2, bool))
  assert step.time_per_call == pytest.approx(0.3)
  assert bs.Runner(step, progress=False).dt == pytest.approx(0.3)
  with pytest.raises(ValueError, match=r"dt = 0.1 ms, but one call of .* "
                     "advances 0.3 ms"):
    bs.Runner(step, dt=0.1)


def test_receptors_the_neurons_do_not_read_are_an_error():
  # JAX clamps inputs[1] of a one-row input to row 0: say it instead
  mesh = jax.make_mesh((1,), ('x',))
  idx = index_from_arrays([0, 0], [1, 1], [1.0, -1.0], [1, 1],
                          receptor=[0, 1], n=2)
  with pytest.raises(ValueError, match=r"receptors = 1, but the index has "
                     r"synapses on receptors 0 \.\. 1"):
    Delivery(idx, mesh, receptors=1)
  net = Delivery(idx, mesh, receptors=3)  # a third row the model reads
  assert net.buffer.value.shape[0] == 3
