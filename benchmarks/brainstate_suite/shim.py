"""A stand-in ``brainstate`` package that maps brainstate's names to brainshard's.

brainstate's own tests import ``brainstate``; with :func:`install` the import
gives these modules instead. A name brainshard claims (it is in the name
table of docs/migrating-from-brainstate.md with a brainshard name) maps to
that name, so its tests run against brainshard and count. A name brainshard
does not claim ("none" in the guide, or brainstate-private) becomes an
:class:`Unclaimed` placeholder: importing it works, using it skips the test
with the reason, so those tests leave the count instead of failing it. A
numpy.random name brainshard lacks is *not* a placeholder: ``bs.random``
claims numpy.random's surface, so a missing sampler fails its tests.

Example:
  >>> from benchmarks.brainstate_suite import shim
  >>> shim.TRANSFORM["jit"]().__name__
  'jit'
  >>> shim.resolve("transform", "checkpointed_scan").__name__
  'brainstate.transform.checkpointed_scan'
"""

import importlib.abc
import importlib.machinery
import sys
import types

SKIP_PREFIX = "unclaimed: "


def _bs():
  import brainshard
  return brainshard


def _skip(why):
  import pytest  # only the suite's subprocess uses placeholders
  raise pytest.skip.Exception(SKIP_PREFIX + why)


class _UnclaimedMeta(type):
  """Every use of the class (call, attribute, isinstance) skips the test."""

  def __call__(cls, *args, **kwargs):
    _skip(cls._why)

  def __getattr__(cls, name):
    if name.startswith("__"):  # pytest, inspect and pickle probe dunders
      raise AttributeError(name)
    _skip(cls._why)

  def __instancecheck__(cls, obj):
    _skip(cls._why)

  def __subclasscheck__(cls, sub):
    _skip(cls._why)


class Unclaimed(metaclass=_UnclaimedMeta):
  _why = "placeholder"


def is_unclaimed(obj):
  """Whether ``obj`` stands for a brainstate internal (without triggering a
  placeholder's skip)."""
  return isinstance(obj, _UnclaimedMeta) or (
      getattr(type(obj), "_stand_in", False) or
      getattr(obj, "_stand_in", False) is True)


class _TraceStackStandIn:
  """brainstate's random tests push a ``StateTraceStack()`` onto
  ``TRACE_CONTEXT.state_stack`` in ``setUp`` (isolation, not what they
  test): that does nothing, so those setUps run; any other use skips."""
  _stand_in = True

  def __init__(self, *args, **kwargs):
    if args or kwargs:
      _skip("brainstate._state.StateTraceStack: brainstate's internals")

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    _skip("brainstate._state.StateTraceStack: brainstate's internals")

  def __enter__(self):
    _skip("brainstate._state.StateTraceStack: brainstate's internals")


class _TraceContextStandIn:
  _stand_in = True

  def __init__(self):
    self.state_stack = []


def unclaimed(qualname, why=None):
  """A placeholder class for ``qualname``: any use skips with ``why``."""
  why = why or f"{qualname}: brainshard has no such name (not claimed)"
  return _UnclaimedMeta(qualname, (Unclaimed,), {"_why": why})


# name -> thunk returning the brainshard object. Thunks, so importing this
# module (doctests, the slow test's parent process) does not import jax.
TOP = {
    "State": lambda: _bs().State,
    "ParamState": lambda: _bs().ParamState,
    "ShortTermState": lambda: _bs().ShortTermState,
    "LongTermState": lambda: _bs().LongTermState,
    "StateDictManager": lambda: _bs().StateDictManager,
    "TraceContextError": lambda: _bs().StateTraceError,
}
TRANSFORM = {
    name: (lambda n=name: getattr(_bs(), n)) for name in (
        "jit", "shard_map", "vmap", "for_loop", "scan", "while_loop",
        "bounded_while_loop", "cond", "switch", "ifelse", "grad", "jacrev",
        "jacfwd", "hessian", "jvp", "vjp", "remat", "StatefulFunction",
        "ProgressBar")}
TRANSFORM["jacobian"] = lambda: _bs().jacrev
TRANSFORM["checkpoint"] = lambda: _bs().remat
# brainstate.random infrastructure brainshard does not claim (the guide's
# "none" row); every other public name is numpy.random's surface, claimed.
RANDOM_UNCLAIMED = {
    "seed_context", "clone_rng", "restore_key", "self_assign_multi_keys",
    "get_key", "set_key", "DEFAULT",
}
RANDOM = {
    "RandomState": lambda: _bs().RandomState,
    "split_key": lambda: _bs().random.split_key,
    # the guide: split_key(n), split_keys(n) -> bs.random.split_key(n)
    "split_keys": lambda: _bs().random.split_key,
}


def resolve(space, name):
  """What ``brainstate.<space>.<name>`` is under the shim."""
  table = {"": TOP, "transform": TRANSFORM, "random": RANDOM}.get(space)
  qual = ".".join(p for p in ("brainstate", space, name) if p)
  if table is not None and name in table:
    return table[name]()
  if space == "random" and not name.startswith("_") and (
      name not in RANDOM_UNCLAIMED):
    return getattr(_bs().random, name)  # missing: AttributeError, a failure
  if space == "" and name == "environ":
    return _EnvironStandIn()
  if space == "" and name in ("transform", "random"):
    return sys.modules["brainstate." + name]
  return unclaimed(qual)


class _ShimModule(types.ModuleType):
  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    space = self.__name__.partition(".")[2]
    value = resolve(space, name)
    if not isinstance(value, types.ModuleType):
      setattr(self, name, value)  # resolve once; the same object each time
    return value


# What a private module gives at import time beyond placeholders: JAX's own
# public equivalents of brainstate's re-exports of JAX names.
class _EnvironStandIn:
  """``brainstate.environ`` for the fixtures that set brainshard's defaults
  anyway (``set(precision=32)`` in setUps); any other use skips."""
  _stand_in = True

  @staticmethod
  def set(**settings):
    import jax
    if settings == {"precision": 32} and not jax.config.jax_enable_x64:
      return
    _skip(f"brainstate.environ.set({settings}): brainshard has no environ")

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    _skip(f"brainstate.environ.{name}: brainshard has no environ")


def _private_extras(name):
  if name == "brainstate._compatible_import":
    import jax
    import jax.extend
    return {"Tracer": jax.core.Tracer,
            "jaxpr_as_fun": jax.extend.core.jaxpr_as_fun}
  if name == "brainstate._state":
    return {"TRACE_CONTEXT": _TraceContextStandIn(),
            "StateTraceStack": _TraceStackStandIn}
  if name == "brainstate.random._state":
    return {"RandomState": _bs().RandomState}
  return {}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  def find_spec(self, fullname, path=None, target=None):
    if fullname == "brainstate" or fullname.startswith("brainstate."):
      return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
    return None

  def create_module(self, spec):
    module = _ShimModule(spec.name)
    module.__path__ = []
    module.__dict__.update(_private_extras(spec.name))
    return module

  def exec_module(self, module):
    pass


def install():
  """Make ``import brainstate`` (and its submodules) give the shim."""
  for name in [n for n in sys.modules if n.split(".")[0] == "brainstate"]:
    del sys.modules[name]
  sys.meta_path.insert(0, _Finder())
  import brainstate  # noqa: F401  (creates the package and its two spaces)
  import brainstate.random  # noqa: F401
  import brainstate.transform  # noqa: F401
