"""The persistent compilation cache: on by default in a fresh process (in
the user's cache folder, or where the user pointed JAX), off with the
switch, and a second process loads the first one's programs."""

import json
import os
import subprocess
import sys
import warnings

import jax.numpy as jnp
import pytest

import brainshard as bs

CHILD = r"""
import json, sys, time
import jax, jax.numpy as jnp, brainshard as bs
hits = []
jax.monitoring.register_event_listener(
    lambda name, **kw: hits.append(name) if 'cache_hits' in name else None)
v = bs.State(jnp.zeros(64), name='v')
@bs.jit
def step():
  x = v.value
  for k in range(60):  # a program that takes a while to compile
    x = jnp.sin(x * 1.001 + k) @ jnp.ones((64, 64)) / 64
  v.value = x
step()
print(json.dumps({'folder': bs.compilation_cache(), 'hits': len(hits)}))
"""


def _child(env):
  out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True,
                       capture_output=True, text=True, timeout=300)
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_loads_the_first_ones_programs(tmp_path):
  env = {k: v for k, v in os.environ.items()
         if k not in ("BRAINSHARD_COMPILATION_CACHE",
                      "JAX_COMPILATION_CACHE_DIR")}
  env["XDG_CACHE_HOME"] = str(tmp_path)
  first = _child(env)
  assert first["folder"] == str(tmp_path / "brainshard" / "jax")
  assert first["hits"] == 0 and any((tmp_path / "brainshard" / "jax").iterdir())
  assert _child(env)["hits"] >= 1
  env["BRAINSHARD_COMPILATION_CACHE"] = "0"
  assert _child(env)["folder"] is None


def test_the_switch_and_the_users_own_folder(tmp_path):
  before = bs.compilation_cache()
  try:
    assert bs.compilation_cache(tmp_path) == str(tmp_path)
    assert bs.compilation_cache(None) is None
  finally:
    bs.compilation_cache(before)
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"))
  env.pop("BRAINSHARD_COMPILATION_CACHE")
  out = subprocess.run([sys.executable, "-c", "import brainshard as bs; "
                        "print(bs.compilation_cache())"], env=env, check=True,
                       capture_output=True, text=True, timeout=120)
  assert out.stdout.strip() == str(tmp_path / "mine")


def test_a_program_with_a_long_name_is_cached(tmp_path):
  """JAX files a program under its name: ``bs.switch`` over nested local
  functions named one of 250 characters, too long for a file, and JAX
  warned and did not cache it."""
  v = bs.State(jnp.zeros(3), name="v")

  def step():
    v.value = v.value + 1.0
  step.__qualname__ = "outer.<locals>." * 20 + "step"
  before = bs.compilation_cache()
  try:
    bs.compilation_cache(tmp_path, min_compile_seconds=0)
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      bs.jit(step)()
    assert [p.name for p in tmp_path.iterdir() if "outer" in p.name]
  finally:
    bs.compilation_cache(before)
