"""ProgressBar: reports from compiled loops, on many devices and inside
shard_map, without changing results or re-compiling."""

import io
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import brainshard as bs
from conftest import make_mesh


def _counts(text):
  """The n of every 'n/total' the text bar wrote, in order."""
  return [int(m) for m in re.findall(r"(\d+)/\d+ \[", text)]


def _bar(out, freq=None, **kw):
  return bs.ProgressBar(freq=freq, file=out, use_tqdm=False, **kw)


def test_text_bar_reports_every_freq_steps_and_finishes():
  v = bs.State(jnp.zeros(()), name="v")
  out = io.StringIO()

  def step(x):
    v.value = v.value + x

  bs.for_loop(step, jnp.ones(10), pbar=_bar(out, freq=4, desc="sim"))
  jax.effects_barrier()
  text = out.getvalue()
  # opened at step 1, then every 4 steps, then the last step; closed once
  assert _counts(text) == [0, 1, 4, 8, 10, 10]
  assert text.count("\n") == 1 and "sim: 100% 10/10" in text
  assert float(v.value) == 10.0


def test_results_equal_with_and_without_bar():
  s = bs.State(jnp.zeros(3), name="s")

  def step(x):
    s.value = s.value * 0.5 + x
    return s.value.sum()

  plain = bs.for_loop(step, jnp.arange(7.0))
  s.value = jnp.zeros(3)
  with_bar = bs.for_loop(step, jnp.arange(7.0), pbar=_bar(io.StringIO()))
  np.testing.assert_array_equal(plain, with_bar)


def test_default_freq_and_scan_and_int_shorthand():
  out = io.StringIO()
  bs.scan(lambda c, x: (c + x, None), 0.0, jnp.ones(300), pbar=_bar(out))
  jax.effects_barrier()
  counts = _counts(out.getvalue())
  assert counts[-1] == 300 and 0 < len(counts) < 120  # about 100 reports
  assert bs._progress.as_progress_bar(25) == bs.ProgressBar(freq=25)
  with pytest.raises(TypeError, match="pbar must be"):
    bs.for_loop(lambda: None, length=2, pbar="yes")
  with pytest.raises(ValueError, match="freq"):
    bs.ProgressBar(freq=0)


def test_equal_bars_reuse_the_compiled_loop_and_each_run_gets_a_bar():
  out = io.StringIO()
  traces = []

  def step(x):
    traces.append(1)
    return x

  bs.for_loop(step, jnp.ones(5), pbar=_bar(out, freq=2))
  n = len(traces)
  bs.for_loop(step, jnp.ones(5), pbar=_bar(out, freq=2))
  jax.effects_barrier()
  assert len(traces) == n
  assert out.getvalue().count("\n") == 2  # two runs, two finished bars


def test_tqdm_bar():
  pytest.importorskip("tqdm")
  out = io.StringIO()
  bar = bs.ProgressBar(freq=3, desc="tq", file=out, use_tqdm=True)
  bs.for_loop(lambda x: x, jnp.ones(9), pbar=bar)
  jax.effects_barrier()
  assert "tq: 100%" in out.getvalue() and "9/9" in out.getvalue()


def test_bar_on_sharded_states_under_jit():
  mesh = make_mesh((8,), ("x",))
  v = bs.State(jax.device_put(jnp.zeros(16), NamedSharding(mesh, P("x"))),
               name="v")
  out = io.StringIO()

  def step(x):
    v.value = v.value + x

  run = bs.jit(lambda xs: bs.for_loop(step, xs, pbar=_bar(out, freq=5)))
  run(jnp.ones(10))
  jax.effects_barrier()
  assert _counts(out.getvalue()) == [0, 1, 5, 10, 10]  # reported once


@pytest.mark.parametrize("form", ["shard_map(for_loop)",
                                  "jit(for_loop(shard_map))"])
def test_bar_inside_shard_map_reports_once(form):
  mesh = make_mesh((8,), ("x",))
  v = bs.State(jnp.zeros(16), name="v", spec=P("x"))
  out = io.StringIO()
  bar = _bar(out, freq=5)

  def step(x):
    v.value = v.value + x

  if form == "shard_map(for_loop)":
    bs.shard_map(lambda xs: bs.for_loop(step, xs, pbar=bar), mesh=mesh,
                 in_specs=P(), out_specs=P())(jnp.ones(10))
  else:
    inner = bs.shard_map(step, mesh=mesh, in_specs=P(), out_specs=P())
    bs.jit(lambda xs: bs.for_loop(inner, xs, pbar=bar))(jnp.ones(10))
  jax.effects_barrier()
  text = out.getvalue()
  assert _counts(text) == [0, 1, 5, 10, 10] and text.count("\n") == 1
  np.testing.assert_array_equal(v.value, np.full(16, 10.0))


def test_bar_on_2d_mesh_inside_shard_map():
  mesh = make_mesh((2, 4), ("x", "y"))
  v = bs.State(jnp.zeros((4, 8)), name="v", spec=P("x", "y"))
  out = io.StringIO()

  def body(xs):
    def step(x):
      v.value = v.value + x
    bs.for_loop(step, xs, pbar=_bar(out, freq=3))

  bs.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P())(jnp.ones(6))
  jax.effects_barrier()
  assert _counts(out.getvalue()) == [0, 1, 3, 6, 6]


def test_bar_in_shard_map_manual_over_some_axes():
  auto = make_mesh((2, 4), ("x", "y"), jax.sharding.AxisType.Auto)
  explicit = make_mesh((2, 4), ("x", "y"))
  v = bs.State(jnp.zeros(8), name="v", spec=P("x"))

  def body(xs, out):
    def step(x):
      v.value = v.value + x
    bs.for_loop(step, xs, pbar=_bar(out, freq=2))

  out = io.StringIO()
  bs.shard_map(lambda xs: body(xs, out), mesh=auto, in_specs=P(),
               out_specs=P(), axis_names={"x"})(jnp.ones(4))
  jax.effects_barrier()
  assert _counts(out.getvalue()) == [0, 1, 2, 4, 4]
  # JAX cannot lower callbacks there: the loop runs, without a bar
  out = io.StringIO()
  with pytest.warns(UserWarning, match="no progress bar"):
    bs.shard_map(lambda xs: body(xs, out), mesh=explicit, in_specs=P(),
                 out_specs=P(), axis_names={"x"})(jnp.ones(4))
  assert out.getvalue() == ""
  np.testing.assert_array_equal(v.value, np.full(8, 8.0))
