"""Frames: where ``state.value`` goes while a brainshard transform traces.

A State's global slot only ever holds concrete arrays. While a transform
traces a function, every ``state.value`` read or write goes to the innermost
:class:`Frame` on this thread's stack instead. The frame keeps the traced
values for the duration of the trace and records, in first-touch order,
which states were read before being written (the transform's *inputs*) and
which were written (its *outputs*); the transform then writes concrete
results back (:func:`write_results`). Tracers therefore never reach a State's
global slot, and two threads can trace functions that touch the same State
at the same time.

Subclasses decide what a state's value is on its first read inside the frame
(:meth:`Frame.first_read`: a new jaxpr input for discovery, a per-shard
block inside ``shard_map``) and what a write must look like
(:meth:`Frame.write_signature`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax

from brainshard._core import compat
from brainshard._core.errors import StateTraceError
from brainshard._core.state.state import UNSET, State, store
from brainshard._core.threads import FRAME_ACTIVE, frame_stack, thread_frames
from brainshard._core.state.values import (
    Signature, describe_signature, describe_value, signature, to_array)

__all__ = ["Frame", "ReplayFrame", "replay", "union", "gather_values",
           "write_results", "current_signature", "manual_axes"]


@dataclasses.dataclass(slots=True, eq=False)
class _Slot:
  """What one frame knows about one State."""
  state: State
  value: Any
  sig: Signature
  is_input: bool = dataclasses.field(default=False, kw_only=True)
  created: bool = dataclasses.field(default=False, kw_only=True)
  written: bool = dataclasses.field(default=False, init=False)


class Frame:
  """One level of brainshard tracing: holds the traced values of States.

  A frame answers reads and writes of ``state.value`` while its transform
  traces the user function. It records, in first-touch order, which states
  were read before being written (the transform's *inputs*) and which were
  written (its *outputs*). Subclasses decide what a state's value is on its
  first read inside the frame (:meth:`first_read`) and how an outer aval maps
  to an inner one (:meth:`inner_signature`, e.g. per-shard for shard_map).

  The fields below are declared here and set by the frames of the
  transforms that have them; code that runs inside a trace (random draws,
  progress bars) reads them from :func:`frame_stack` to learn where it runs.
  """

  # ``(axis name, size)`` of a ``bs.shard_map`` body's manual mesh axes.
  manual_axes: tuple[tuple[str, int], ...] = ()
  # ``(axis name, size)`` of the ``bs.vmap`` a member frame belongs to.
  vmap_axes: tuple[tuple[Any, int], ...] = ()
  # The mesh of a ``bs.shard_map`` body (None elsewhere).
  mesh: Any = None

  def __init__(self, name: str):
    self.name = name
    self.slots: dict[int, _Slot] = {}
    self.parent: Frame | None = None
    self._trace = None
    self._trace_state = None
    self._foreign_reads = False  # a State read under a JAX transform in it

  # -- lifetime -------------------------------------------------------------

  def __enter__(self) -> "Frame":
    frames = thread_frames
    stack = frames.stack
    self.parent = stack[-1] if stack else None
    self._trace = compat.current_trace()
    self._trace_state = compat.get_opaque_trace_state()
    stack.append(self)
    frames.mode = FRAME_ACTIVE
    return self

  def __exit__(self, *exc) -> None:
    frames = thread_frames
    stack = frames.stack
    assert stack and stack[-1] is self, "brainshard frame stack corrupted"
    stack.pop()
    if not stack:
      frames.mode = frames.idle_mode
    if self._foreign_reads:  # see compat.forget_staged_closures
      compat.forget_staged_closures()

  # -- hooks ----------------------------------------------------------------

  def first_read(self, state: State, outer_value: Any) -> Any:
    """The value of ``state`` inside this frame, given its value outside."""
    return outer_value

  def inner_signature(self, state: State, outer_sig: Signature) -> Signature:
    """The signature ``state`` has inside this frame, given it outside."""
    return outer_sig

  def write_signature(self, state: State) -> Signature:
    """The signature a write of ``state`` in this frame must have (per shard
    in shard_map, where a state may leave with another spec than it came
    in with)."""
    return self.signature_of(state)

  def hint_placement(self, state: State, hint: Any) -> None:
    """Passes where a ``shard_map`` reads and leaves ``state`` (a
    :class:`~brainshard._core.program.placement.PlacementHint`) up to the discoveries
    that will compile the program around it."""
    if self.parent is not None:
      self.parent.hint_placement(state, hint)

  # -- the recording path ---------------------------------------------------

  def inject(self, state: State, value: Any) -> None:
    """Makes ``value`` the state's input value in this frame."""
    self.slots[id(state)] = _Slot(state, value, signature(value), is_input=True)

  def adopt(self, state: State, value: Any) -> None:
    """Registers a State created while this frame is active."""
    self.slots[id(state)] = _Slot(state, value, signature(value), created=True)

  def read(self, state: State) -> Any:
    """``state.value`` as the function being traced in this frame sees it."""
    value = self.lookup(state)
    if compat.get_opaque_trace_state() != self._trace_state:
      # Read under a JAX transform nested in this frame, which may cache
      # the value it closes over past this frame's trace.
      for frame in thread_frames.stack:
        frame._foreign_reads = True
    return value

  def lookup(self, state: State) -> Any:
    """The state's value in this frame, made on first use."""
    slot = self.slots.get(id(state))
    if slot is None:
      # The first read may come from a transform nested in this frame (a
      # bs.jit inside a shard_map body): the value belongs to this frame's
      # trace, or the nested trace would capture it and keep it.
      with compat.under_trace(self._trace):
        outer = self.parent.lookup(state) if self.parent else state.global_value()
        value = self.first_read(state, outer)
      slot = self.slots[id(state)] = _Slot(
          state, value, signature(value), is_input=True)
    return slot.value

  def signature_of(self, state: State) -> Signature:
    slot = self.slots.get(id(state))
    if slot is not None:
      return slot.sig
    outer = (self.parent.signature_of(state) if self.parent
             else state.global_signature())
    return self.inner_signature(state, outer)

  def write(self, state: State, value: Any) -> None:
    if compat.get_opaque_trace_state() != self._trace_state:
      raise StateTraceError(
          f"{state.label()} was written inside a JAX transform that "
          f"brainshard does not manage (such as jax.jit, jax.vmap, "
          f"jax.lax.scan or jax.lax.cond) nested in {self.name}. The write "
          "would leave a tracer in the State. Write states only directly "
          "under brainshard transforms (bs.jit, bs.shard_map, ...), or return "
          "the value from the inner JAX transform and write it outside.")
    ref = self.write_signature(state)
    value = _conform(state, value, ref, self.name)
    slot = self.slots.get(id(state))
    if slot is None:
      slot = self.slots[id(state)] = _Slot(state, value, ref)
    slot.value = value
    slot.sig = ref
    slot.written = True

  def restore(self, state: State, value: Any) -> None:
    """Sets the state's value in this frame without recording a write."""
    slot = self.slots.get(id(state))
    if slot is None:
      self.inject(state, value)
    else:
      slot.value = value

  # -- results --------------------------------------------------------------

  def touched_states(self) -> list[State]:
    return [s.state for s in self.slots.values() if not s.created]

  def input_states(self) -> list[State]:
    return [s.state for s in self.slots.values() if s.is_input and not s.created]

  def written_states(self) -> list[State]:
    return [s.state for s in self.slots.values() if s.written and not s.created]

  def value_of(self, state: State) -> Any:
    return self.slots[id(state)].value


def _conform(state: State, value: Any, ref: Signature, where: str) -> Any:
  """Checks a traced write keeps the state's structure, shapes and dtypes."""
  ref_tree, ref_avals = ref
  owner = f"{where}: {state.label()}"
  leaves, tree = jax.tree.flatten(value)
  if tree != ref_tree:
    raise ValueError(
        f"{owner} holds {describe_signature(ref)} but was written with "
        f"{describe_value(value)}: the pytree structure differs. Inside a "
        "transform a write must keep the state's structure, shape and dtype.")
  out = []
  for x, aval in zip(leaves, ref_avals, strict=True):
    x = to_array(x, owner)
    x_aval = jax.typeof(x)
    if x_aval.dtype != aval.dtype and x_aval.weak_type and (
        jax.dtypes.result_type(aval.dtype, x) == aval.dtype):
      x = jax.lax.convert_element_type(x, aval.dtype)
      x_aval = jax.typeof(x)
    elif x_aval.weak_type:
      x = jax.lax.convert_element_type(x, x_aval.dtype)
    if x_aval.shape != aval.shape or x_aval.dtype != aval.dtype:
      raise ValueError(
          f"{owner} holds {describe_signature(ref)} but was written with "
          f"{describe_value(value)}. Inside a transform a write must keep the "
          "state's structure, shape and dtype: reshape or cast the value, or "
          "give the state its new shape outside the transform.")
    out.append(x)
  return jax.tree.unflatten(tree, out)



class ReplayFrame(Frame):
  """Re-runs the user function inside a JAX transform with known states.

  States outside the known sets are recorded; the transform decides whether
  that means rediscovery (``jit``) or an error.
  """

  def __init__(self, name: str):
    super().__init__(name)
    self.unknown_reads: list[State] = []

  def first_read(self, state: State, outer_value: Any) -> Any:
    self.unknown_reads.append(state)
    return outer_value


def replay(frame: ReplayFrame, fun: Callable, args: tuple, kwargs: dict,
           inputs, outputs: Sequence[State],
           on_unknown: Callable[[ReplayFrame, list], Exception] | str
           ) -> tuple[Any, list[Any]]:
  """Runs ``fun(*args, **kwargs)`` in ``frame`` with ``inputs`` injected.

  ``inputs`` are ``(state, value)`` pairs. Returns the output and the values
  of ``outputs`` afterwards (a state the function did not write keeps the
  value it was given). A function that touches a state beyond the known
  ones raises ``on_unknown(frame, extra_states)``, or, given a string saying
  where it was traced, an error that it must touch the same States each
  time.
  """
  with frame:
    for state, value in inputs:
      frame.inject(state, value)
    out = fun(*args, **kwargs)
    known = {id(s) for s in outputs}
    extra = frame.unknown_reads + [
        s for s in frame.written_states() if id(s) not in known]
    if extra:
      if callable(on_unknown):
        raise on_unknown(frame, extra)
      raise StateTraceError(
          f"{frame.name} touched {extra[0].label()} when traced "
          f"{on_unknown}, but not when its states were discovered for the "
          "same arguments. The function must touch the same States every "
          "time it is traced with the same argument shapes.")
    return out, [frame.lookup(s) for s in outputs]


def union(*groups: Sequence[State]) -> tuple[State, ...]:
  """The states of all ``groups``, each once, in first-seen order."""
  seen: dict[int, State] = {}
  for group in groups:
    for s in group:
      seen.setdefault(id(s), s)
  return tuple(seen.values())


def gather_values(states: Sequence[State], where: str) -> list[Any]:
  """Current values of ``states``: frame-aware, with a fast top-level path."""
  if frame_stack():
    return [s.value for s in states]
  values = [s.slot for s in states]
  for s, v in zip(states, values, strict=True):
    if v is UNSET:
      s.global_value()  # raises the "created inside a transform" error
  return values


def write_results(states: list[State], values: list[Any], where: str) -> None:
  """Writes a transform's results through the recording path.

  Under an enclosing brainshard frame each write is recorded there, so the
  outer transform threads it. At top level the values replace the global
  ones; if they are traced, the transform ran under a foreign JAX transform
  and the write is refused (nothing is written).
  """
  stack = thread_frames.stack
  if stack:
    for state, value in zip(states, values, strict=True):
      stack[-1].write(state, value)
    return
  if states and not compat.at_top_level():
    raise StateTraceError(
        f"{where} writes {states[0].label()}, but it was called under a JAX "
        "transform that brainshard does not manage (such as jax.jit, "
        "jax.vmap or jax.grad), so the State would keep a tracer. Use "
        "brainshard transforms at every level (bs.jit instead of jax.jit).")
  store(states, values)


def current_signature(state: State) -> Signature:
  """The state's signature as the innermost frame (or top level) sees it."""
  stack = thread_frames.stack
  if stack:
    return stack[-1].signature_of(state)
  return state.global_signature()


def manual_axes() -> tuple[tuple[str, int], ...]:
  """``(axis name, size)`` of every manual mesh axis of the ``bs.shard_map``
  bodies being traced on this thread, outermost first (empty outside one).

  A shard_map body's frame carries its axes as :attr:`Frame.manual_axes`.
  """
  axes: list[tuple[str, int]] = []
  for frame in frame_stack():
    for axis in frame.manual_axes:
      if axis not in axes:
        axes.append(axis)
  return tuple(axes)
