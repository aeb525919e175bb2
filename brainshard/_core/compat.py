"""Every JAX internal brainshard uses, and nothing else.

No other module imports ``jax._src``, ``jax.extend`` or ``jax.core``; if a JAX
upgrade moves a name, only this file changes (``tests/test_compat.py``
fails naming the missing symbol). The internals, what each is for, and the
public API that would replace it:

=============================================  ===============================================  ===========================
internal                                       used for                                         public replacement
=============================================  ===============================================  ===========================
``jax._src.core.trace_ctx`` /                  the active trace (:func:`current_trace`,          none
``trace_state_strong_ref`` / ``eval_trace``    :func:`at_top_level`, on every call's path)
``jax._src.core.set_current_trace``            computing a frame's value under its own trace    none
                                               (:func:`under_trace`, :func:`eager`)
``DynamicJaxprTrace.new_arg``                  a new jaxpr input mid-trace: discovery turns a   none (the reason for the pin)
                                               State's first read into an input
``jax._src.source_info_util.current``          source info for that input                       none
``jax._src.core.mapped_leading_aval``          one scan step's aval, keeping sharding and vma   ``jax.typeof(x[0])`` on a value
``jax._src.array.ArrayImpl``                   the exact array type the donation rule vouches   ``jax.Array`` (an ABC: too wide)
                                               for, checked by identity on the fast path
``jax._src.util.clear_all_caches``             dropping JAX's staging caches after a State was  ``jax.clear_caches`` (also
                                               read under ``jax.jit`` inside a brainshard trace  drops executables)
``jax._src.traceback_util.register_exclusion``  hiding brainshard's frames from the tracebacks     none
``jax._src.traceback_util.api_boundary``       JAX filters (``JAX_TRACEBACK_FILTERING``); our
                                               entry points are boundaries like JAX's
``jax.extend.core.get_opaque_trace_state``     telling a foreign JAX transform from ours        (jax.extend, semi-public)
``jax.extend.core.jaxpr_as_fun``               evaluating a discovery's jaxpr without Python    ``jax.core.eval_jaxpr``
``jax.core.Tracer``, ``jax.core.ShapedArray``  is-this-traced checks; per-shard avals           (public, re-exported here)
``axis_name`` / ``axes`` locals of JAX's       naming the axis of a collective that failed      none (JAX raises a bare
frames in a traceback                          with a bare AssertionError (an axis the mesh     ``AssertionError``)
                                               lacks: :func:`collective_axis_names`)
``jax.extend.random.define_prng_impl`` /       block keys (``_simulation/random_blocks``): a    none: ``jax.random.bits`` over
``threefry2x32_p`` / ``threefry_prng_impl``    key whose bits hash the global indices of the    the global shape, then a slice
                                               block a shard holds                              (n_shards times the work)
=============================================  ===============================================  ===========================
"""

from __future__ import annotations

from typing import Any

from jax._src import core as _core
from jax._src import source_info_util as _source_info
from jax._src import traceback_util as _traceback_util
from jax._src import util as _util
from jax._src.array import ArrayImpl

from jax import tree_util as _tree_util
from jax.core import ShapedArray, Tracer
from jax.extend.core import get_opaque_trace_state, jaxpr_as_fun
from jax.extend.random import (define_prng_impl, threefry2x32_p,
                                threefry_prng_impl)

__all__ = ["at_top_level", "top_level_source", "current_trace", "new_trace_input", "jaxpr_as_fun",
           "Tracer", "ShapedArray", "is_traced", "varying_axes",
            "get_opaque_trace_state", "step_aval", "eager", "under_trace",
           "forget_staged_closures", "hide_from_tracebacks", "api_boundary",
           "ArrayImpl", "collective_axis_names", "define_prng_impl",
           "threefry2x32_p", "threefry_prng_impl"]

# `ArrayImpl` is the concrete type of every jax.Array a computation returns;
# the donation rule (_core/program/donation.py) only vouches for that type.
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


def top_level_source() -> tuple[str, dict[str, Any]]:
  """:func:`at_top_level` as a Python expression and the names it reads, for
  generated code (``_core/program/fastcall.py``) to inline: on a small dispatch the
  function call itself is a visible cost.

  Example:
    >>> from brainshard._core import compat
    >>> expr, names = compat.top_level_source()
    >>> eval(expr, names)
    True
  """
  if _trace_slot is not None:
    return ("trace_slot.value is eval_trace",
            dict(trace_slot=_trace_slot, eval_trace=_eval_trace))
  return "at_top_level()", dict(at_top_level=at_top_level)  # pragma: no cover


_tree_leaves = _tree_util.tree_leaves


def is_traced(value: Any) -> bool:
  """Whether any leaf of a pytree is a tracer."""
  return any(isinstance(x, Tracer) for x in _tree_leaves(value))


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


api_boundary = _traceback_util.api_boundary  # filters tracebacks below it


def hide_from_tracebacks(path: str) -> None:
  """Leaves frames of files under ``path`` out of the tracebacks JAX filters,
  so an error points at the user's line, as it does for JAX's own frames."""
  _traceback_util.register_exclusion(path)


def eager() -> Any:
  """A context in which JAX runs eagerly even while a transform traces.

  Used to create a State that must live at top level (with a concrete value)
  when it is first needed in the middle of a trace.
  """
  return _core.set_current_trace(_core.eval_trace)


def collective_axis_names(exc: BaseException) -> set:
  """Axis names a JAX collective was called with, read from the
  ``axis_name`` / ``axes`` locals of JAX's frames in ``exc``'s traceback
  (for a collective over an axis the mesh lacks JAX raises a bare
  ``AssertionError``); empty where there are none.

  Example:
    >>> collective_axis_names(ValueError())
    set()
  """
  names: set = set()
  tb = exc.__traceback__
  while tb is not None:
    frame = tb.tb_frame
    if "/jax/" in frame.f_code.co_filename.replace("\\", "/"):
      for key in ("axis_name", "axes"):
        value = frame.f_locals.get(key)
        many = isinstance(value, (tuple, list, set, frozenset))
        values = value if many else (value,)
        names.update(a for a in values if isinstance(a, str))
    tb = tb.tb_next
  return names
