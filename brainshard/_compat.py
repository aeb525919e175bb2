"""The two JAX internals brainshard relies on, kept in one place.

Discovery turns a State's value into a jaxpr *input* the first time it is
read, in the middle of a trace. JAX has no public API for adding an input to
a trace in flight, so this module reaches into ``jax._src`` for exactly that
and nothing else; if a JAX upgrade moves these names, only this file changes.
"""

from __future__ import annotations

from typing import Any

from jax._src import core as _core
from jax._src import source_info_util as _source_info
from jax._src import util as _util
from jax._src.array import ArrayImpl

from jax.extend.core import get_opaque_trace_state

__all__ = ["at_top_level", "current_trace", "new_trace_input",
            "get_opaque_trace_state", "step_aval", "eager", "under_trace",
           "forget_staged_closures",
           "ArrayImpl"]

# `ArrayImpl` is the concrete type of every jax.Array a computation returns;
# the donation rule (brainshard/_donation.py) only vouches for that type.
# `at_top_level` is on every call's path, so it reads the thread-local trace
# slot directly instead of going through `trace_ctx.trace`'s property.
_eval_trace = _core.eval_trace
_trace_slot = getattr(_core, "trace_state_strong_ref", None)

if _trace_slot is not None:
  def at_top_level() -> bool:
    """True when no JAX transform is tracing on this thread (eager mode)."""
    return _trace_slot.value is _eval_trace
else:  # pragma: no cover - older/newer JAX without the slot
  def at_top_level() -> bool:
    """True when no JAX transform is tracing on this thread (eager mode)."""
    return _core.trace_ctx.trace is _core.eval_trace


def current_trace() -> Any:
  """The JAX trace that is active on this thread right now."""
  return _core.trace_ctx.trace


def new_trace_input(trace: Any, aval: Any) -> Any:
  """Appends a new input of type ``aval`` to the jaxpr being built by ``trace``.

  ``trace`` must be the ``DynamicJaxprTrace`` of a ``jax.make_jaxpr`` call;
  the new input is placed after the function's own arguments.
  """
  try:
    new_arg = trace.new_arg
  except AttributeError:  # pragma: no cover - only on an incompatible JAX
    raise RuntimeError(
        "brainshard needs a jaxpr trace that supports new inputs, but the "
        f"active trace is {type(trace).__name__}. This JAX version is not "
        "supported; see pyproject.toml for the supported range.") from None
  return new_arg(aval, _source_info.current())


def varying_axes(aval: Any) -> frozenset:
  """Mesh axes a value inside ``shard_map`` varies over (its 'vma')."""
  mat = getattr(aval, "mat", None)
  if mat is not None:
    return frozenset(mat.varying)
  return frozenset(getattr(aval, "vma", ()))


def step_aval(aval: Any) -> Any:
  """The aval of one step ``x[i]`` of a value scanned over its leading axis.

  Keeps the sharding of the other dimensions and the varying manual axes,
  exactly as ``jax.lax.scan`` will present the step to its body.
  """
  return _core.mapped_leading_aval(aval.shape[0], aval)


def under_trace(trace: Any) -> Any:
  """A context in which ``trace`` is the active trace on this thread.

  A frame computes a state's value lazily, on its first read, which may come
  from a transform nested inside it; doing so under the frame's own trace
  keeps the value (and anything derived from it) out of the nested trace.
  """
  return _core.set_current_trace(trace)


def forget_staged_closures() -> None:
  """Drops JAX's tracing (staging) caches, keeping compiled executables.

  ``jax.jit``, ``jax.checkpoint`` and ``lax`` control flow cache the jaxpr
  of a function per argument types, together with the values it closed
  over. A State read inside such a function, nested in a brainshard
  transform, is closed over as that transform's tracer; when the transform
  traces again (discovery, then the real trace), JAX would reuse the cached
  jaxpr and its dead tracer. Calls of compiled programs (C++ dispatch) are
  not affected. Public replacement: none (``jax.clear_caches`` also drops
  compiled executables).
  """
  _util.clear_all_caches()


def eager() -> Any:
  """A context in which JAX runs eagerly even while a transform traces.

  Used to create a State that must live at top level (with a concrete value)
  when it is first needed in the middle of a trace.
  """
  return _core.set_current_trace(_core.eval_trace)
