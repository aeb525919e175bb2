"""Every example is a module run from the repository root with
``python -m examples.NAME``: ``--help`` works (without the optional
packages a run needs), every option has help text, and no example or
benchmark edits ``sys.path``."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ["cuba", "spiking_demo", "ensemble", "train_snn", "learn_sparse",
            "two_areas",
            "scaleout", "ei_brainstate", "ei_brainshard", "ei_data",
            "microcircuit", "brunel", "stdp_network"]


def _run(*args):
  return subprocess.run([sys.executable, *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)


def _options_without_help(text: str) -> list[str]:
  """Option entries of an argparse help page with no text after them."""
  lines = text.split("options:", 1)[1].splitlines()
  bare = []
  for i, line in enumerate(lines):
    m = re.match(r"  (-\S.*)$", line)
    if not m:
      continue
    same_line = re.search(r"\S {2,}\S", m.group(1))
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    if not same_line and not re.match(r" {4,}[^-\s]", nxt):
      bare.append(m.group(1))
  return bare


def test_every_example_module_is_listed():
  found = {p.stem for p in (ROOT / "examples").glob("*.py")
           if not p.stem.startswith("_")}
  found |= {p.parent.name for p in (ROOT / "examples").glob("*/__main__.py")}
  assert found == set(EXAMPLES)


# Runs every example's ``--help`` as ``python -m`` does (runpy, as
# ``__main__``), one after the other in one fresh process: one JAX start-up
# for all of them instead of one each.
_HELP_ALL = '''
import contextlib, io, json, runpy, sys, traceback
pages = {}
for name in sys.argv[1:]:
  out, err, code = io.StringIO(), io.StringIO(), 0
  sys.argv = [name, "--help"]
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      runpy.run_module("examples." + name, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
      code = exit_.code or 0
    except BaseException:
      code = 1
      traceback.print_exc()
  pages[name] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(pages))
'''


@pytest.fixture(scope="module")
def help_pages():
  proc = _run("-c", _HELP_ALL, *EXAMPLES)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow  # one process: about 1.5 s for all nine
@pytest.mark.parametrize("name", EXAMPLES)
def test_help_works_and_documents_every_option(name, help_pages):
  code, stdout, stderr = help_pages[name]
  assert code == 0, stderr
  assert stdout.startswith(f"usage: python -m examples.{name}")
  assert _options_without_help(stdout) == []
  if "--duration" in stdout:  # one unit everywhere
    assert "seconds" in stdout


@pytest.mark.slow
def test_brainstate_example_without_brainstate_says_what_to_install():
  code = ("import sys, runpy; sys.modules['brainstate'] = None; "
          "sys.argv = ['ei_brainstate'] + sys.argv[1:]; "
          "runpy.run_module('examples.ei_brainstate', run_name='__main__')")
  for argv, rc in ((["--help"], 0), ([], 1)):
    proc = _run("-c", code, *argv)
    assert proc.returncode == rc, proc.stderr
  assert 'pip install "brainstate>=0.5.4,<0.6"' in proc.stderr


def test_nothing_edits_sys_path():
  offenders = [str(p.relative_to(ROOT)) for folder in ("examples", "benchmarks")
               for p in (ROOT / folder).rglob("*.py")
               if re.search(r"sys\.path\s*(\.insert|\.append|\[|=|\+=)",
                            p.read_text())]
  assert offenders == []


def test_docs_name_only_example_modules_and_benchmark_commands_that_exist():
  """README, docs and notebooks run examples as modules and benchmarks as
  commands of ``python -m benchmarks``, all of which exist."""
  from benchmarks import cli
  texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
           *sorted((ROOT / "docs").glob("*.ipynb"))]
  for path in texts:
    text = path.read_text()
    assert "python examples/" not in text, path
    for name in re.findall(r"python -m\s+examples\.([a-z_]+)", text):
      assert name in EXAMPLES, (path, name)
    for name in re.findall(r"python -m\s+benchmarks\s+([a-z][a-z0-9-]*)", text):
      assert name in cli.COMMANDS, (path, name)


@pytest.mark.slow  # a 50 ms run on 2 devices: ~15 s
def test_stdp_network_runs_and_prints_the_weights_before_and_after():
  proc = _run("-m", "examples.stdp_network", "--devices", "2",
              "--duration", "0.05", "--no-nest", "--float32")
  assert proc.returncode == 0, proc.stderr
  out = proc.stdout
  assert "1000 STDP synapses" in out and "inexact updates: 0" in out
  assert "before" in out and "after (brainshard)" in out
