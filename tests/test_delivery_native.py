"""The native push kernel (``delivery/native.py``, numba through
``jax.ffi``): the same ring buffer as the XLA kernel bit for bit, the same
spikes and currents on 1, 2 and 8 devices, a tangent, vmap, no copy of the
buffer in a loop, and the XLA kernel when numba is missing or switched
off. Skipped where numba is not installed (the ``native`` extra)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brainshard._models.delays import ring_length
from brainshard._models.delivery import native
from brainshard._models.delivery.from_arrays import index_from_arrays
from brainshard._models.delivery.push import clear_slots, deliver
from tests.test_delivery import Net, random_synapses, ref_ring, small_network

needs_numba = pytest.mark.skipif(not native.available(),
                                 reason="numba is not installed")


def _index(seed=0, n=40, k=9, dtypes=None, n_receptors=2, delays=(1, 6)):
  rng = np.random.default_rng(seed)
  syn = random_synapses(rng, n, n, k, delays=delays)
  if n_receptors == 1:
    syn["receptor"] = 0 * syn["receptor"]
  idx = index_from_arrays(**syn, n=n, n_receptors=n_receptors)
  if dtypes:
    idx = dataclasses.replace(idx, **{k: getattr(idx, k).astype(v)
                                      for k, v in dtypes.items()})
  return syn, idx


# The loops of the usual field dtypes (uint16 or int32 post, uint8 delay,
# no or uint8 receptor) and the one that reads any other dtypes; with one
# delay for every synapse (min_delay == max_delay: passed as a scalar, no
# delay field read), as Brunel's.
@needs_numba
@pytest.mark.parametrize("delays", [(1, 6), (4, 4)])
@pytest.mark.parametrize("dtypes, n_rec", [
    (None, 2), (None, 1), (dict(post=jnp.int32), 2),
    (dict(post=jnp.int32), 1),
    (dict(delay=jnp.uint8, receptor=jnp.int8, post=jnp.int16), 2),
    (dict(delay=jnp.int32, receptor=jnp.uint16, post=jnp.int32), 2),
    (dict(delay=jnp.uint16), 1)])
def test_native_equals_numpy_and_xla_bit_for_bit(dtypes, n_rec, delays):
  syn, idx = _index(dtypes=dtypes, n_receptors=n_rec, delays=delays)
  assert (idx.min_delay == idx.max_delay) == (delays[0] == delays[1])
  n, steps = 40, 5
  length = ring_length(idx.max_delay)
  rng = np.random.default_rng(1)
  fired = rng.random((steps, n)) < np.array([0.05, 0.3, 1.0, 0.0, 0.5])[:, None]

  def run(kernel):
    @jax.jit
    def go(fired):
      buf = jnp.zeros((n_rec, length, n), jnp.float32)
      return jax.lax.fori_loop(0, steps, lambda t, b: deliver(
          b, fired[t], t, idx, kernel=kernel), buf)
    return np.asarray(go(fired))
  assert (idx.receptor is None) == (n_rec == 1)
  want = ref_ring(syn, fired, n, length, n_rec)
  np.testing.assert_array_equal(run("native"), want)
  np.testing.assert_array_equal(run("xla"), want)


@needs_numba
def test_network_on_1_2_8_devices_native_equals_xla():
  """Delivery's LIF network: the native kernel gives the XLA kernel's
  spikes and bit-identical currents, on every mesh."""
  net = small_network(seed=3)
  want = Net(*net, devices=1, kernel="xla").run(120)
  for devices, every in ((1, 1), (2, 2), (8, 1)):
    got = Net(*net, devices=devices, every=every, kernel="native").run(120)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[2].tobytes() == want[2].tobytes()
    assert got[3].tobytes() == want[3].tobytes()
  assert want[0].sum() > 20


@needs_numba
def test_tangent_and_vmap_follow_the_xla_kernel():
  _, idx = _index()
  fired = jnp.asarray(np.random.default_rng(2).random(40) < 0.4)
  buf = jnp.asarray(np.random.default_rng(3).random((2, 7, 40)), jnp.float32)

  def f(kernel):
    return lambda b, w: deliver(b, fired, 3, dataclasses.replace(
        idx, weight=w), kernel=kernel)
  tangents = (jnp.ones_like(buf), jnp.full_like(idx.weight, 0.5))
  got = jax.jvp(f("native"), (buf, idx.weight), tangents)
  want = jax.jvp(f("xla"), (buf, idx.weight), tangents)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, b)
  both = jnp.stack([buf, 2 * buf])
  np.testing.assert_array_equal(
      jax.vmap(lambda b: deliver(b, fired, 3, idx, kernel="native"))(both),
      jax.vmap(lambda b: deliver(b, fired, 3, idx, kernel="xla"))(both))


@needs_numba
def test_a_loop_of_clear_and_push_copies_no_buffer():
  """XLA copies the buffer twice a step when its own in-place update
  meets the FFI call in a loop body; the native clear avoids that: the
  only copy left is of the (undonated) input, outside the loop."""
  _, idx = _index()

  def run(buf, fired):
    def step(b, xs):
      t, f = xs
      b = clear_slots(b, t, 1, idx, kernel="native")
      return deliver(b, f, t, idx, kernel="native"), None
    return jax.lax.scan(step, buf, (jnp.arange(4), fired))[0]
  text = jax.jit(run).lower(jnp.zeros((2, 7, 40)), jnp.zeros(
      (4, 40), bool)).compile().as_text()
  assert text.count("custom-call(") == 2
  copies = [line for line in text.splitlines()
            if "f32[2,7,40]" in line and " copy(" in line]
  assert len(copies) == 1, copies


@needs_numba
def test_auto_is_native_from_4m_synapses_a_shard(monkeypatch):
  from brainshard._models.delivery import push
  _, idx = _index()
  lowered = lambda: jax.jit(lambda b: deliver(  # noqa: E731
      b, jnp.ones(40, bool), 0, idx)).lower(jnp.zeros((2, 7, 40))).as_text()
  assert push.NATIVE_MIN_SLOTS == 1 << 22 and "custom_call" not in lowered()
  monkeypatch.setattr(push, "NATIVE_MIN_SLOTS", idx.capacity)
  assert "custom_call" in lowered()


def test_switched_off_or_missing_numba_runs_xla(monkeypatch):
  from brainshard._models.delivery import push
  monkeypatch.setenv("BRAINSHARD_NATIVE_DELIVERY", "0")
  assert not native.available()
  _, idx = _index()
  monkeypatch.setattr(push, "NATIVE_MIN_SLOTS", 0)
  text = jax.jit(lambda b: deliver(b, jnp.ones(40, bool), 0, idx)).lower(
      jnp.zeros((2, 7, 40))).as_text()
  assert "custom_call" not in text
  with pytest.raises(ValueError, match=r"kernel='native' needs numba"):
    deliver(jnp.zeros((2, 7, 40)), jnp.ones(40, bool), 0, idx,
            kernel="native")
  with pytest.raises(ValueError, match=r"kernel must be .* got 'c'"):
    deliver(jnp.zeros((2, 7, 40)), jnp.ones(40, bool), 0, idx, kernel="c")


def test_native_takes_a_float32_buffer_and_weights():
  _, idx = _index()
  buf = jnp.zeros((2, 7, 40))
  assert native.supports(buf, idx)
  assert not native.supports(buf.astype(jnp.float16), idx)
  assert not native.supports(buf, dataclasses.replace(
      idx, weight=idx.weight.astype(jnp.bfloat16)))


def test_a_numba_that_does_not_load_leaves_auto_on_xla(monkeypatch):
  import sys
  from brainshard._models.delivery import push
  monkeypatch.setattr(native, "available", lambda: True)
  monkeypatch.setattr(push, "NATIVE_MIN_SLOTS", 0)
  from brainshard._models import delivery as package
  monkeypatch.setitem(sys.modules, "brainshard._models.delivery.native_loop",
                      None)  # its import raises ImportError
  monkeypatch.delattr(package, "native_loop", raising=False)
  monkeypatch.setattr(native, "_TARGETS", {})
  _, idx = _index()
  with pytest.warns(RuntimeWarning, match=r"did not load .*XLA kernel"):
    text = jax.jit(lambda b: deliver(b, jnp.ones(40, bool), 0, idx)).lower(
        jnp.zeros((2, 7, 40))).as_text()
  assert "custom_call" not in text
