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
  assert bs._transforms.progress.as_progress_bar(25) == bs.ProgressBar(freq=25)
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


# ----------------------------------------------------------------------------
# arguments: count, and checks at construction


def _run(n, bar):
  bs.for_loop(lambda x: x, jnp.ones(n), pbar=bar)
  jax.effects_barrier()


def test_count_reports_count_times_over_a_long_loop():
  out = io.StringIO()
  _run(1000, _bar(out, count=50))
  counts = _counts(out.getvalue())
  # opened (0), the first step, then every 1000/50 = 20 steps, closed
  assert counts == [0, 1] + list(range(20, 1001, 20)) + [1000]


def test_count_of_100_over_1000_steps_with_tqdm():
  pytest.importorskip("tqdm")
  out = io.StringIO()
  bar = bs.ProgressBar(count=100, desc="c", file=out, use_tqdm=True,
                       mininterval=0)
  _run(1000, bar)
  text = out.getvalue()
  assert "c: 100%" in text and "1000/1000" in text
  shown = {int(m) for m in re.findall(r"(\d+)/1000", text)}
  assert {10, 500, 990, 1000} <= shown and max(shown) == 1000
  assert all(n % 10 == 0 or n == 1 for n in shown)


def test_count_larger_than_the_loop_reports_every_step():
  out = io.StringIO()
  _run(30, _bar(out, count=100))
  assert _counts(out.getvalue()) == [0] + list(range(1, 31)) + [30]


def test_count_that_does_not_divide_the_loop_reports_at_most_count_times():
  out = io.StringIO()
  _run(150, _bar(out, count=100))
  counts = _counts(out.getvalue())
  reports = counts[2:-1]  # after opening (0) and the first step (1)
  assert len(reports) <= 100 and reports[-1] == 150
  assert bs.ProgressBar(count=100).steps_between_reports(150) == 2
  assert bs.ProgressBar().steps_between_reports(300) == 3  # default count=100
  assert bs.ProgressBar(freq=7).steps_between_reports(5) == 7


def test_unknown_keywords_are_type_errors_naming_them():
  with pytest.raises(TypeError, match="'cout'"):
    bs.ProgressBar(cout=10)
  with pytest.raises(TypeError, match="'print_freq'"):
    bs.ProgressBar(print_freq=10)
  with pytest.raises(TypeError, match="total=.*the loop sets"):
    bs.ProgressBar(total=10)
  with pytest.raises(TypeError, match="leave is a tqdm option.*use_tqdm=False"):
    bs.ProgressBar(use_tqdm=False, leave=False)
  bar = bs.ProgressBar(leave=False, ncols=60, colour="green")  # tqdm options
  assert bar.tqdm_kwargs == {"leave": False, "ncols": 60, "colour": "green"}


@pytest.mark.parametrize("kwargs,error,match", [
    ({"freq": 0}, ValueError, "freq must be a positive int, got 0"),
    ({"freq": -3}, ValueError, "freq"),
    ({"freq": 2.5}, TypeError, "freq must be a positive int or None, got float"),
    ({"freq": True}, TypeError, "freq.*bool"),
    ({"freq": "10"}, TypeError, "freq.*str"),
    ({"count": 0}, ValueError, "count must be a positive int"),
    ({"count": 10.0}, TypeError, "count.*float"),
    ({"freq": 10, "count": 10}, ValueError, "freq .* or count .*not both"),
    ({"desc": 5}, TypeError, "desc must be a str"),
    ({"desc": ("{i}",)}, ValueError, "desc pair .* got 1 item"),
    ({"desc": (5, dict)}, TypeError, r"desc pair .* got \(int, type\)"),
    ({"desc": ("{i}", "fn")}, TypeError, r"got \(str, str\)"),
    ({"file": "log.txt"}, TypeError, "file must have a write"),
    ({"use_tqdm": "yes"}, TypeError, "use_tqdm"),
])
def test_bad_values_fail_at_construction(kwargs, error, match):
  with pytest.raises(error, match=match):
    bs.ProgressBar(**kwargs)


def test_integer_like_arguments_and_equality():
  assert bs.ProgressBar(freq=np.int64(5)) == bs.ProgressBar(freq=5)
  assert bs._transforms.progress.as_progress_bar(np.int32(5)) == bs.ProgressBar(freq=5)
  assert bs.ProgressBar(count=5) == bs.ProgressBar(count=5)
  assert bs.ProgressBar(count=5) != bs.ProgressBar(freq=5)
  assert repr(bs.ProgressBar(count=5, desc="x")) == "ProgressBar(count=5, desc='x')"


def test_desc_pair_formats_the_label_with_traced_values():
  # brainstate's desc=(format, fn): fn maps the traced step to the values
  out = io.StringIO()
  bar = bs.ProgressBar(freq=2, desc=("step {i} twice={j}",
                                     lambda d: {"i": d["i"], "j": 2 * d["i"]}),
                       file=out, use_tqdm=False)
  assert bar.print_freq == 2 and bar.desc[0] == "step {i} twice={j}"
  bs.for_loop(lambda x: x, jnp.ones(5), pbar=bar)
  jax.effects_barrier()
  text = out.getvalue()
  assert "step 3 twice=6:  80% 4/5" in text, text
  assert "step 4 twice=8: 100% 5/5" in text, text


def test_desc_fn_must_return_a_dict():
  bar = bs.ProgressBar(desc=("{i}", lambda d: d["i"]), use_tqdm=False)
  with pytest.raises(TypeError, match="must return a dict .* returned"):
    bs.for_loop(lambda x: x, jnp.ones(3), pbar=bar)
