"""Run brainstate 0.5.4's tests against brainshard and count what passes.

Each area's test files are copied into a temporary folder and run by pytest
in a subprocess with :mod:`benchmarks.brainstate_suite.plugin` (the
``brainstate`` shim). A test skipped as unclaimed, private or slow leaves
the count ("deselected"); the rest pass or fail. ``python -m
benchmarks.brainstate_suite`` prints the table.

Example:
  >>> from benchmarks.brainstate_suite import run
  >>> sorted(run.AREAS)[:3]
  ['State', 'conditions', 'jit']
"""

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# area -> brainstate's test files (relative to its package folder)
AREAS = {
    "jit": ["transform/_jit_test.py"],
    "loops": ["transform/_loop_collect_return_test.py",
              "transform/_loop_no_collection_test.py"],
    "conditions": ["transform/_conditions_test.py"],
    "make_jaxpr": ["transform/_make_jaxpr_test.py"],
    "progress bar": ["transform/_progress_bar_test.py"],
    "State": ["_state_test.py"],
    "random state": ["random/_state_test.py"],
    "random functions": ["random/_fun_test.py"],
}
PLUGIN = "benchmarks.brainstate_suite.plugin"


@dataclass
class Count:
  """One area's outcome: test ids by result, and skip reasons."""
  passed: list = field(default_factory=list)
  failed: dict = field(default_factory=dict)  # id -> first line of error
  deselected: dict = field(default_factory=dict)  # id -> reason

  @property
  def selected(self):
    return len(self.passed) + len(self.failed)


def _outcomes(xml_path):
  count = Count()
  for case in ET.parse(xml_path).getroot().iter("testcase"):
    tid = f"{case.get('classname')}::{case.get('name')}"
    skipped = case.find("skipped")
    if skipped is not None:
      count.deselected[tid] = skipped.get("message", "")
    elif case.find("failure") is not None or case.find("error") is not None:
      bad = case.find("failure")
      bad = bad if bad is not None else case.find("error")
      count.failed[tid] = (bad.get("message") or "").split("\n")[0][:200]
    else:
      count.passed.append(tid)
  return count


def run_area(package, files, *, timeout=3600, run_slow=False):
  """Run ``files`` (relative to brainstate's ``package`` folder): a Count."""
  with tempfile.TemporaryDirectory(prefix="bs_suite_") as tmp:
    for rel in files:
      shutil.copy(os.path.join(package, rel), os.path.join(tmp, os.path.basename(rel)))
    with open(os.path.join(tmp, "pytest.ini"), "w") as ini:
      ini.write("[pytest]\naddopts = -p no:cacheprovider\n")
    xml = os.path.join(tmp, "result.xml")
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("XLA_FLAGS", None)  # brainstate's tests assume one CPU device
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN,
           "-c", os.path.join(tmp, "pytest.ini"), "--rootdir", tmp,
           "--import-mode=importlib", f"--junitxml={xml}", "-o",
           "junit_family=xunit1", tmp] + (["--run-slow"] if run_slow else [])
    subprocess.run(cmd, cwd=tmp, env=env, capture_output=True,
                   timeout=timeout)
    return _outcomes(xml)


def run(package, areas=None, **kwargs):
  """``{area: Count}`` for ``areas`` (default: all of :data:`AREAS`)."""
  return {area: run_area(package, AREAS[area], **kwargs)
          for area in (areas or AREAS)}


def table(counts):
  """The pass counts as a Markdown table, a total row last."""
  rows = ["| area | passed | selected | % | deselected |",
          "| --- | --- | --- | --- | --- |"]
  tot_p = tot_s = tot_d = 0
  for area, c in counts.items():
    rows.append(f"| {area} | {len(c.passed)} | {c.selected} | "
                f"{100 * len(c.passed) / max(c.selected, 1):.1f} | "
                f"{len(c.deselected)} |")
    tot_p, tot_s = tot_p + len(c.passed), tot_s + c.selected
    tot_d += len(c.deselected)
  rows.append(f"| total | {tot_p} | {tot_s} | "
              f"{100 * tot_p / max(tot_s, 1):.1f} | {tot_d} |")
  return "\n".join(rows)
