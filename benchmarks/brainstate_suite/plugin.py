"""The pytest plugin the brainstate suite's subprocess runs with.

It installs the ``brainstate`` shim before brainstate's test files import,
seeds ``bs.random`` before every test (brainstate's conftest seeds
``brainstate.random``), skips brainstate's ``slow`` tests as brainstate's
conftest does without ``--run-slow``, and deselects (skips with the reason)
the tests that reach brainstate-private helpers: names a test module
imported from a private module, and the attributes in :data:`PRIVATE`, which
brainstate's objects have and brainshard's need not.

Example (what the suite runs)::

  python -m pytest -p benchmarks.brainstate_suite.plugin <copied tests>
"""

import inspect
import re

import pytest

from benchmarks.brainstate_suite import shim

PRIVATE_PREFIX = "private: "

# Attributes of brainstate's objects that are its internals, with why a test
# reaching them does not count.
PRIVATE = {
    "stateful_fun": "bs.jit's StatefulFunction is internal",
    "get_arg_cache_key": "brainstate's cache-key helper",
    "get_state_trace": "brainstate's StateTraceStack",
    "origin_fun": "brainstate's jit attributes",
    "jitted_fun": "brainstate's jit attributes",
    "_cached_jaxpr": "brainstate's cache internals",
    "get_cache_stats": "the guide: none",
    "jaxpr_call_auto": "the guide: none",
}
_PRIVATE_RE = re.compile(
    r"\b(" + "|".join(map(re.escape, PRIVATE)) + r"|\w+_by_cache)\b")


def _source(item):
  try:
    parts = [inspect.getsource(item.obj)]
  except (OSError, TypeError):
    return ""
  cls = getattr(item, "cls", None)
  # helpers and fixtures of the test's class run with it
  for name, method in vars(cls).items() if cls else ():
    if not name.startswith("test") and inspect.isfunction(method):
      parts.append(inspect.getsource(method))
  return "\n".join(parts)


def _placeholders(module):
  return {name for name, value in vars(module).items()
          if shim.is_unclaimed(value)}


def private_reason(item):
  """Why ``item`` is deselected as a test of brainstate internals, or None."""
  source = _source(item)
  found = _PRIVATE_RE.search(source)
  if found:
    name = found.group(1)
    return f"{name}: {PRIVATE.get(name, 'brainstate cache internals')}"
  for name in sorted(_placeholders(item.module)):
    if re.search(rf"\b{re.escape(name)}\b", source):
      return f"{name}: imported from brainstate internals"
  return None


def pytest_collection_modifyitems(config, items):
  for item in items:
    why = private_reason(item)
    if why:
      item.add_marker(pytest.mark.skip(reason=PRIVATE_PREFIX + why))
    elif "slow" in item.keywords and not config.getoption(
        "--run-slow", default=False):
      item.add_marker(pytest.mark.skip(reason="slow: brainstate skips it "
                                       "without --run-slow"))


def pytest_configure(config):
  # at configure, not import: the main suite imports this module for its
  # doctests and must keep the real brainstate
  shim.install()


def pytest_addoption(parser):
  parser.addoption("--run-slow", action="store_true", default=False)


@pytest.fixture(autouse=True)
def _deterministic_rng():
  import brainshard as bs
  bs.random.seed(0)
  yield
