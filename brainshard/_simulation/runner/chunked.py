"""The chunked K-step loop: a stateful step advanced K steps per compiled call.

One long ``bs.jit(bs.for_loop(step, length=N))`` cannot be interrupted,
shows nothing until it ends and stacks every step's output in device memory.
:class:`ChunkedLoop` runs the same steps as compiled chunks of ``K`` steps
(``bs.jit`` of ``bs.scan`` over the global step indices): one program for
the full chunk and one for the remainder, so a run compiles at most twice,
and the host gets control between chunks (to copy monitor data, stop,
checkpoint, exchange data between sub-meshes ...). The step numbers are the
same as those of one ``bs.for_loop`` of all steps.

:meth:`ChunkedLoop.iterate` dispatches the next chunk before it hands the
previous one out (JAX dispatches asynchronously), so the host's work on a
chunk's outputs overlaps the device's work on the next chunk.
"""

from __future__ import annotations

import collections
import inspect
import re
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

from brainshard._transforms.jit import jit
from brainshard._transforms.loops import scan
from brainshard._core.state.state import State
from brainshard._core.args import fun_name

__all__ = ["ChunkedLoop", "Chunk", "chunk_lengths"]


class Chunk(NamedTuple):
  """One dispatched chunk: its place in the run and its (device) outputs."""
  index: int          # 0, 1, ... within one iterate()
  start: int          # global index of its first step
  length: int         # number of steps
  out: Any            # what the chunk program returned (device arrays)
  before: list        # values of the written States before the chunk
  after: list         # their values after it (futures until it finishes)


def chunk_lengths(n_steps: int, chunk: int) -> list[int]:
  """Full chunks first, then the remainder: ``[4, 4, 2]`` for 10 and 4.

  The remainder comes last so that a run stopped after full chunks and then
  continued needs no program but these two.
  """
  if n_steps < 0 or chunk < 1:
    raise ValueError(
        f"need n_steps >= 0 and chunk >= 1, got {n_steps}, {chunk}")
  full, rest = divmod(n_steps, chunk)
  return [chunk] * full + ([rest] if rest else [])


class ChunkedLoop:
  """Advances a stateful ``step`` in compiled chunks of ``chunk`` steps.

  Args:
    step: the step; may close over States (a ``bs.shard_map`` step too).
      Called as ``step()``, or ``step(i)`` with ``index=True`` (``i``: the
      global int32 step index), or ``step(carry, i) -> (carry, y)`` when
      ``init`` is given.
    chunk: steps per compiled call (``K``).
    init: optional ``init(i0, length) -> carry``, traced inside the chunk
      program: a per-chunk carry (e.g. a monitor's buffer) that starts anew
      in every chunk and is returned beside the stacked outputs.
    index: pass the global step index to ``step`` (without ``init``).
    donate_states: as in :func:`brainshard.jit` for the chunk programs. The
      default ``False`` keeps every chunk's input values intact, so a chunk
      that was dispatched but is not wanted can be undone (see ``iterate``).

  A chunk program returns the stacked per-step outputs ``ys`` (leading axis:
  the step), or ``(carry, ys)`` with ``init``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(()), name='v')
    >>> def step():
    ...   v.value = v.value + 1.0
    ...   return v.value
    >>> loop = bs.ChunkedLoop(step, chunk=4)
    >>> [(c.start, c.length, c.out.tolist()) for c in loop.iterate(6)]
    [(0, 4, [1.0, 2.0, 3.0, 4.0]), (4, 2, [5.0, 6.0])]
    >>> v.value, loop.compiles
    (Array(6., dtype=float32), 2)
  """

  def __init__(self, step: Callable, chunk: int, *,
               init: Callable | None = None,
               index: bool = False, donate_states: bool | str = False,
               name: str | None = None):
    if not isinstance(chunk, (int, np.integer)) or chunk < 1:
      raise ValueError(
          f"ChunkedLoop: chunk must be a positive int, got {chunk!r}")
    self.step = step
    self.chunk = int(chunk)
    self.init = init
    self.index = bool(index) or init is not None
    self.donate_states = donate_states
    self._label = name or fun_name(step)
    self.name = f"bs.ChunkedLoop({self._label})"
    self._programs: dict[int, Any] = {}
    self._writes: tuple[State, ...] | None = None

  def __repr__(self) -> str:
    return f"<{self.name}, chunk={self.chunk}>"

  @property
  def compiles(self) -> int:
    """How many chunk programs were built (one per distinct length)."""
    return len(self._programs)

  def program(self, length: int) -> Any:
    """The compiled ``bs.jit`` program of ``length`` steps, called with the
    global index of its first step (an int32 scalar)."""
    prog = self._programs.get(length)
    if prog is None:
      prog = self._programs[length] = jit(
          self._chunk_fun(length), donate_states=self.donate_states)
    return prog

  def _chunk_fun(self, length: int) -> Callable:
    step, init = self.step, self.init
    if init is None:
      body = (lambda c, i: (c, step(i))) if self.index else (
          lambda c, i: (c, step()))
    else:
      body = step

    def chunk(i0):
      steps = i0 + jnp.arange(length, dtype=jnp.int32)
      carry = init(i0, length) if init is not None else ()
      carry, ys = scan(body, carry, steps)
      return (carry, ys) if init is not None else ys

    label = re.sub(r"\W", "_", self._label.rsplit(".", 1)[-1])
    chunk.__name__ = chunk.__qualname__ = f"chunk{length}_{label}"
    return chunk

  def written_states(self) -> tuple[State, ...]:
    """The States a chunk writes (found by tracing, without running)."""
    if self._writes is None:
      prog = self.program(self.chunk)
      self._writes = tuple(
          prog.stateful.discover(np.int32(0)).write_states)
    return self._writes

  def __call__(self, start: int, length: int) -> Any:
    """Dispatches ``length`` steps from global step ``start``; returns the
    chunk's outputs (device arrays; JAX computes them asynchronously)."""
    return self.program(length)(np.int32(start))

  def iterate(self, n_steps: int, start: int = 0, *,
              stop: Callable[[], bool] | None = None, ahead: int = 1,
              then: Callable[[Any], Any] | None = None) -> Iterator[Chunk]:
    """Runs ``n_steps`` steps from ``start``, yielding each :class:`Chunk`.

    Up to ``ahead`` further chunks are dispatched before a chunk is handed
    out, so the caller's work on it overlaps the device's work. ``stop()``
    is asked before each dispatch; once it says True no chunk is started.
    ``then(out)``, if given, runs right after each dispatch (e.g. to queue
    device work on the chunk's outputs ahead of the next chunk); the Chunk
    then holds its result as ``out``.
    When the iteration ends early (``break``, an exception, ``close()``),
    chunks dispatched but not yet handed out are undone: every written
    State gets back its value from before them (they still run to the end
    on the device, but their results are dropped). So afterwards the States
    are exactly those of a run of the chunks handed out.
    """
    writes = self.written_states()
    pending: collections.deque[Chunk] = collections.deque()
    lengths = chunk_lengths(int(n_steps), self.chunk)
    pos, k = int(start), 0
    try:
      while True:
        while (k < len(lengths) and len(pending) <= ahead
               and not (stop is not None and stop())):
          before = [s.value for s in writes]
          out = self(pos, lengths[k])
          if then is not None:
            out = then(out)
          pending.append(Chunk(k, pos, lengths[k], out, before,
                               [s.value for s in writes]))
          pos += lengths[k]
          k += 1
        if not pending:
          return
        yield pending.popleft()
    finally:
      if pending:
        restore(writes, pending[0].before)


def restore(states: Sequence[State], values: Sequence[Any]) -> None:
  """Sets ``states`` back to ``values`` (values kept from before a chunk)."""
  for s, v in zip(states, values):
    s.value = v


def takes_arguments(fun: Callable) -> bool:
  """Whether ``fun`` has a required positional parameter."""
  try:
    params = inspect.signature(fun).parameters.values()
  except (TypeError, ValueError):
    return True
  return any(p.default is p.empty and p.kind in (
      p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
