"""State objects, their global slots, and the per-thread stack of frames.

A ``State`` holds a pytree of arrays in one global slot, ``_value``, that only
ever contains concrete arrays (other modules read it through the State's
declared internal surface: ``slot``, ``global_value()``, see the class).
While a brainshard transform traces a function, every ``state.value`` read
or write goes to the innermost :class:`Frame` on this thread's stack
instead. The frame keeps the traced
values for the duration of the trace and records which states were read and
written; the transform then writes concrete results back. Tracers therefore
never reach a State's global slot, and two threads can trace functions that
touch the same State at the same time.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from typing import Any, ClassVar, Iterator, Sequence

import jax

from brainshard._core import compat, interrupts
from brainshard._core.program.donation import LENDS, next_lend
from brainshard._core.errors import StateTraceError, check_not_scalar_list
from brainshard._core.program.held import flush, flush_unheld
from brainshard._core.state.extras import StateExtras
from brainshard._core.threads import (
    OWNER, WINDOW, acquire_slots, current_frame, hold_slots, let_go_slots,
    release_slots, thread_frames)
from brainshard._core.state.values import (
    Signature, canonical, describe_signature, describe_value, signature,
    to_array)

__all__ = [
    "State", "ParamState", "ShortTermState", "LongTermState",
    "StateTraceError", "expect_state",
]


_live_states: "weakref.WeakSet[State]" = weakref.WeakSet()

# Creation order: States sort by it, so a dict keyed by States (the gradient
# of `bs.grad(f, grad_states=bs.ParamState)`) is an ordinary pytree that
# jax.jit and optax can flatten (JAX sorts dict keys). `next` on a count is
# atomic under the GIL.
_creation_counter = itertools.count()


class _Marker:
  def __init__(self, text: str):
    self._text = text

  def __repr__(self):
    return self._text


UNSET = _Marker("<unset>")  # the slot of a State that exists only in a trace

# `State._sig` is None only while the value is a compiled call's own output
# that nothing has read since: then that call's successor may donate it
# without counting references (donation.py). Any read through the State, or
# a value put in from outside, leaves the signature there, or LENT, and
# moves the clock LENDS on.
LENT = _Marker("<lent>")


class State(StateExtras):
  """A named, mutable pytree of arrays that brainshard transforms can update.

  Read and write it through ``.value``. Plain Python functions that close over
  States can be passed to :func:`brainshard.jit` and
  :func:`brainshard.shard_map`, which thread the values through a pure JAX
  function and write the results back.

  Args:
    value: a pytree of arrays; Python scalars and NumPy arrays become JAX
      arrays (with a strong dtype). A list or tuple of Python numbers is an
      error (JAX would take it as that many scalars): pass
      ``jnp.asarray([...])``.
    name: an optional name used in error messages and reprs.
    spec: the state's default ``PartitionSpec`` for ``shard_map`` (or a pytree
      of them matching ``value``); ``None`` means replicated.
    axes: logical axis names, one per leading dimension (a tuple of names or
      None, e.g. ``('neuron', None)``), or a pytree of such tuples matching
      ``value``. :func:`brainshard.axis_rules` maps them to mesh axes; an
      explicit ``spec`` wins over ``axes``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(4), name='v')
    >>> v.value = v.value + 1         # outside a transform: a plain write
    >>> bs.jit(lambda x: v.value * x)(2.0)  # inside: read as a traced input
    Array([2., 2., 2., 2.], dtype=float32)
  """

  # True where every ``bs.vmap`` member shares the value even under an int
  # ``state_in_axes`` (a RandomState: the members share the key and each
  # folds in its member index). A class-level hook set by the subclass, so
  # that vmap (a transform) need not import the layers above it.
  vmap_shared: ClassVar[bool] = False
  __slots__ = ("_value", "_sig")  # read per call: in the object (ANALYSIS)

  def __init__(self, value: Any, name: str | None = None, *, spec: Any = None,
               axes: Any = None):
    if isinstance(value, State):
      raise TypeError(
          f"State(...) was given another State {value.label()}; pass its "
          "value (`state.value`) instead.")
    check_not_scalar_list(value, f"{type(self).__name__}"
                          f"({'...' if name is None else repr(name)})")
    self.name, self.spec, self.axes = name, spec, axes
    caller = sys._getframe(1)
    while caller.f_code.co_filename == __file__:  # skip subclasses' __init__
      caller = caller.f_back
    self._origin = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    self._created_in: str | None = None
    self._sig: Signature | _Marker | None = LENT  # see LENT
    self._value = UNSET
    self._placed = None  # see _keep_placed
    self._order = next(_creation_counter)
    interrupts.protect_once()  # a Ctrl-C inside a read (interrupts.py)
    frame = current_frame()
    if frame is not None:
      value = jax.tree.map(lambda x: to_array(x, "State(...)"), value)
      self._sig = signature(value)
      self._created_in = frame.name
      frame.adopt(self, value)
    else:
      self._value = self._checked_top_level(value, "created")
    _live_states.add(self)

  # -- public API -----------------------------------------------------------

  @property
  def value(self) -> Any:
    frames = thread_frames
    mode = frames.mode
    if not mode:  # FRAME_ACTIVE
      return frames.stack[-1].read(self)
    # Read after every step in the notebook pattern: the owner's window (see
    # WINDOW) or the lock, and the slot read inline.
    if mode == OWNER:
      WINDOW.busy += 1
      if WINDOW.lockfree:
        if WINDOW.held is not None:  # a program's results first (held.py)
          flush()
        value = self._value
        if self._sig is None:  # _mark(), inline: the notebook's per-step read
          self._sig, LENDS.last = LENT, self._order
          LENDS.now = next_lend()
        WINDOW.busy -= 1
      else:
        WINDOW.busy -= 1
        value = self._locked_slot()
    else:
      value = self._locked_slot()
    if value is UNSET:
      return self.global_value()  # raises: a transform-local state
    return value

  @value.setter
  def value(self, new_value: Any) -> None:
    self._put(new_value, restore=False)

  def restore_value(self, value: Any) -> None:
    """Sets the value without recording a write (used to inject values)."""
    self._put(value, restore=True)

  def _put(self, value: Any, restore: bool) -> None:
    """To the innermost frame of this thread's trace, else the global slot."""
    stack = thread_frames.stack
    if not stack:
      self.set_global(self._checked_top_level(
          value, "restored" if restore else "written"))
    elif restore:
      stack[-1].restore(self, value)
    else:
      stack[-1].write(self, value)

  def replace(self, value: Any = UNSET, **changes: Any) -> "State":
    """A new State of this type holding ``value``, with this one's name,
    ``spec`` and ``axes`` (brainstate's ``replace``); this one is unchanged.
    ``name=`` (or brainstate's ``_name=``), ``spec=``, ``axes=`` change those;
    without ``value`` the new State holds this one's value.

    Example:
      >>> import brainshard as bs, jax.numpy as jnp
      >>> w = bs.ParamState(jnp.ones(2), name='w')
      >>> w2 = w.replace(jnp.zeros(2))
      >>> type(w2).__name__, w2.name, w2.value, w.value
      ('ParamState', 'w', Array([0., 0.], dtype=float32), Array([1., 1.], dtype=float32))
    """
    if isinstance(value, State):
      return self._replaced_by(value)
    fields = self._replaced_fields(changes)
    if value is UNSET:
      value = self.value
    new = object.__new__(type(self))
    # public attributes (a subclass's too); State.__init__ sets the rest
    vars(new).update({k: v for k, v in vars(self).items()
                      if not k.startswith("_")})
    State.__init__(new, value, **fields)
    return new

  @property
  def sharding(self) -> Any:
    """The ``NamedSharding`` of the current value (a pytree of them for a
    pytree value), or ``None`` where the value is not on a mesh (a single
    device) or is being traced."""
    flush_unheld()
    value = self._value
    if value is UNSET or thread_frames.stack:
      return None
    def named(x):
      s = getattr(x, "sharding", None)
      return s if isinstance(s, jax.sharding.NamedSharding) else None
    return jax.tree.map(named, value)

  def __repr__(self) -> str:
    flush_unheld()
    parts = []
    if self.name is not None:
      parts.append(f"name={self.name!r}")
    if self._value is UNSET:
      parts.append(f"value={describe_signature(self._sig)} (transform-local)")
    else:
      parts.append(f"value={describe_value(self._value)}")
      shardings = jax.tree.leaves(self.sharding)
      if shardings:
        specs = [str(s.spec) for s in shardings]
        parts.append(f"sharding={specs[0] if len(specs) == 1 else specs}")
    if self.spec is not None:
      parts.append(f"spec={self.spec}")
    if self.axes is not None:
      parts.append(f"axes={self.axes}")
    return f"{type(self).__name__}({', '.join(parts)})"

  # States order by creation (equality stays identity, so hashing is by id).
  # jax.jit sorts a {State: ...} dict's keys on every call, so these are
  # kept lean: no isinstance check on the way that succeeds. `>` and `>=`
  # are Python's reflections of these two.
  def __lt__(self, other):
    try:
      return self._order < other._order
    except AttributeError:
      return NotImplemented

  def __le__(self, other):
    try:
      return self._order <= other._order
    except AttributeError:
      return NotImplemented

  def __getstate__(self):  # a copy or a pickle shares the value
    flush_unheld()
    self._lend()
    return self.__dict__, {"_value": self._value, "_sig": self._sig}

  # -- internal surface -------------------------------------------------------
  # What brainshard's other modules use of a State beyond ``value`` (users
  # read and write ``value``); outside _core/ none reads the underscore
  # attributes (tests/test_architecture.py checks it).

  def label(self) -> str:
    """How messages name the State: ``State 'v'``, or its type, value and
    where it was created when it has no name."""
    if self.name is not None:
      return f"{type(self).__name__} {self.name!r}"
    flush_unheld()
    if self._sig is not None and self._sig is not LENT:
      desc = describe_signature(self._sig)
    elif self._value is not UNSET:
      desc = describe_value(self._value)
    else:
      desc = "..."
    return f"{type(self).__name__}({desc}) created at {self._origin}"

  def _lend(self) -> None:
    """Marks the value as handed out: the next call counts it (LENT)."""
    if self._sig is None:
      self._mark()

  def _mark(self) -> None:
    """The value may be shared from now on (LENT), and the clock says so."""
    self._sig, LENDS.last = LENT, self._order  # `last` first: see LENDS
    LENDS.now = next_lend()

  def _locked_slot(self) -> Any:
    acquire_slots()
    try:
      flush()
      self._lend()
      return self._value
    finally:
      release_slots()

  @property
  def slot(self) -> Any:
    """The global slot as is: the concrete value, or ``UNSET`` while the
    State exists only inside a transform. No frame or lock."""
    flush_unheld()
    self._lend()
    return self._value

  def global_value(self) -> Any:
    """The concrete value in the global slot (frames ignored); raises for
    a State created inside a transform that has returned."""
    flush_unheld()
    self._lend()
    value = self._value
    if value is UNSET:
      raise StateTraceError(
          f"{self.label()} was created inside {self._created_in} (at "
          f"{self._origin}) and read after that transform returned. A State "
          "created inside a transformed function exists only while it is "
          "traced: create it outside the function, or return its value.")
    return value

  def global_signature(self) -> Signature:
    """The signature of :meth:`global_value`."""
    value = self.global_value()  # raises for a transform-local state
    if self._sig is LENT:  # computed lazily: write-backs only reset it
      self._sig = signature(value)
    return self._sig

  def _checked_top_level(self, value: Any, action: str) -> Any:
    if not compat.at_top_level() or compat.is_traced(value):
      raise StateTraceError(
          f"{self.label()} was {action} under a JAX transform that "
          "brainshard does not manage (such as jax.jit, jax.vmap or "
          "jax.grad), so the State would keep a tracer. Use the brainshard "
          "transform instead (bs.jit, bs.shard_map, ...), or return the value "
          "from the JAX-transformed function and assign it outside. Reading a "
          "State under jax.jit is allowed: its value is captured as a "
          "constant.")
    if action != "created" and (self._value is UNSET or jax.tree.structure(
        self._value) != jax.tree.structure(value)):
      check_not_scalar_list(value, f"{self.label()} ({action})")
    return canonical(value, self.label())

  def set_global(self, value: Any) -> None:
    """Puts an already checked concrete value in the global slot (a write:
    the signature and placement are forgotten)."""
    locked = hold_slots()  # not while another thread's call donates
    try:
      flush()  # a program's held results first: this write comes after them
      self._mark()  # the caller may still hold the value
      self._value = value
      self._created_in = self._placed = None
    finally:
      let_go_slots(locked)

  def keep_placed_value(self, value: Any) -> None:
    """Replaces the value by the same value placed where a program reads it
    (not a write: see _core/program/placement.py ``keep_placed``)."""
    flush_unheld()
    self._value = value
    self._mark()
    leaf = jax.tree.leaves(value)[:1]
    # A weak reference: a second strong one would stop donation.
    self._placed = weakref.ref(leaf[0]) if leaf else None

  def placed_by_program(self) -> bool:
    """Whether a program, not the user, put the value where it lives."""
    ref = self._placed
    flush_unheld()
    leaf = jax.tree.leaves(self._value)[:1] if ref is not None else ()
    return bool(leaf) and ref() is leaf[0]


class ParamState(State):
  """A trainable parameter (same behaviour as State; a type for filters)."""


class ShortTermState(State):
  """Fast-changing dynamics, e.g. membrane potentials or synaptic currents."""


class LongTermState(State):
  """Slow-changing state kept across runs, e.g. running statistics."""


def expect_state(value: Any, where: str) -> State:
  """``value`` if it is a State, else a ``TypeError`` that says what
  ``where`` (the argument or slot, e.g. ``"StateDictManager['v']"``) got."""
  if not isinstance(value, State):
    raise TypeError(f"{where} must be a State; got {type(value).__name__} "
                    f"({value!r:.60}).")
  return value


def store(states: Sequence[State], values: Sequence[Any]) -> None:
  """Puts concrete results into the states' global slots (top level only).
  The generated call of _core/program/fastcall.py writes its own outputs inline,
  with ``_sig`` None: read by nothing yet (see LENT)."""
  flush_unheld()
  for state, value in zip(states, values, strict=True):
    state._value = value
    state._mark()  # a transform's results may be referenced elsewhere


def live_states() -> Iterator[State]:
  """Every State alive in this process (for leak checks in tests)."""
  return iter(list(_live_states))


