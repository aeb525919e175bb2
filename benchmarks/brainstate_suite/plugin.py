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

# What brainstate's objects have and brainshard's do not claim (the guide's
# "none" rows, or brainstate's internals), as regexes over a test's source,
# with why a test reaching them does not count.
_STATE = "brainstate's State internals (the migration guide: none)"
_SF = "brainstate's StatefulFunction cache internals (the guide: none)"
_PBAR = "brainstate's progress-bar runner internals"
_RNG = "brainstate's RandomState key bookkeeping (the guide: none)"
PRIVATE = {
    r"\bstateful_fun\b|\bstateful_target\b": "bs.jit's StatefulFunction is internal",
    r"\borigin_fun\b|\bjitted_fun\b": "brainstate's jit attributes",
    r"\bget_arg_cache_key\b|\w+_by_cache\b|\bget_state_trace\b": _SF,
    r"\b_compilation_cache\b|\b_get_compilation\b|\b_compilation_is_stale\b": _SF,
    r"\bget_cache_stats\b|\bjaxpr_call_auto\b|\bdebug_call\b": _SF,
    r"\bvalidate_(all_)?states\b|__pretty_repr_item__": _SF,
    r"\b(increase_|decrease_)?stack_level\b|\b_?source_info\b": _STATE,
    r"\badd_tag\b|\.tag\b|\btag=|\b_?been_writen\b|\bvalue_call\b": _STATE,
    r"\b_invalidate_trace_value\b|\b_hooks_manager\b": _STATE,
    r"from brainstate[\w.]*\._\w+ import": "imports brainstate internals",
    r"\b(backup|restore)_key\b|\.clone\(\)|\bself_assign_multi_keys\b": _RNG,
    r"\bcheck_if_deleted\b": _RNG,
    # the random tests' pokes at brainstate's internals, and their units case
    r"\b_numpy_keys\b": _RNG,
    r"\brs\._value\s*=": _STATE,
    r"\(u\.mV \*\* 2\)": "brainunit quantities (brainshard has no units)",
    r"\)\.init\(|\btqdm_bars\b|\b_(update|close)_tqdm\b|\brunner\.remainder\b": _PBAR,
}
_PRIVATE_RES = [(re.compile(k), v) for k, v in PRIVATE.items()]


def _source(item):
  try:
    parts = [inspect.getsource(item.obj)]
  except (OSError, TypeError):
    return ""
  cls = getattr(item, "cls", None)
  # helpers of the test's class run with it; setUp/tearDown are brainstate's
  # isolation fixtures (their internals are shim stand-ins or skip by use)
  for name, method in vars(cls).items() if cls else ():
    if not name.startswith(("test", "setUp", "tearDown")) and (
        inspect.isfunction(method)):
      parts.append(inspect.getsource(method))
  return "\n".join(parts)


def _placeholders(module):
  return {name for name, value in vars(module).items()
          if shim.is_unclaimed(value)}


def private_reason(item):
  """Why ``item`` is deselected as a test of brainstate internals, or None."""
  source = _source(item)
  for pattern, why in _PRIVATE_RES:
    found = pattern.search(source)
    if found:
      return f"{found.group(0)}: {why}"
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
