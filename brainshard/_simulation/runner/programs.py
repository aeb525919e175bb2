"""A Runner's chunk programs: compiled ahead of time, and never again unsaid.

A chunk program is compiled for the shapes, dtypes and placements of the
States it reads. The States are placed once (see _core/program/placement.py), so a
continued ``Runner.run`` compiles nothing. If a State does change between
runs in a way placement cannot undo (a new shape or dtype, or a value put
elsewhere by hand that no ``shard_map`` inside says where to place), the
next chunk compiles again -- for a big model that is seconds that would
otherwise look like simulation time -- so :class:`ProgramWatch` warns,
naming the State, before that chunk runs.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax
import numpy as np

from brainshard._core.specs import canonical_spec
from brainshard._core.state.state import State
from brainshard._simulation.runner.chunked import ChunkedLoop, chunk_lengths

__all__ = ["ProgramWatch"]


class ProgramWatch:
  """Per chunk length, the input signature its program was compiled for.

  ``prepare(loop, n, start)`` places the States the chunk programs of a run
  of ``n`` steps read, warns naming every State whose signature differs
  from the one its program was compiled for, and returns the lengths whose
  program is not compiled yet. ``compile(loop, n, start)`` compiles those
  ahead of time and returns the seconds it took.
  """

  def __init__(self, name: str):
    self.name = name
    self.signatures: dict[int, dict[int, tuple[State, tuple]]] = {}

  def prepare(self, loop: ChunkedLoop, n: int, start: int) -> list[int]:
    todo = []
    for length in sorted(set(chunk_lengths(n, loop.chunk))):
      now = _input_signatures(loop.program(length), start)
      before = self.signatures.get(length)
      if before is None:
        todo.append(length)
      else:
        self._warn_changed(length, before, now)
      self.signatures[length] = now
    return todo

  def compile(self, loop: ChunkedLoop, n: int, start: int) -> float:
    t0 = time.perf_counter()
    todo = self.prepare(loop, n, start)
    for length in todo:
      loop.program(length).lower(np.int32(start)).compile()
    return time.perf_counter() - t0 if todo else 0.0

  def _warn_changed(self, length: int, before: dict, now: dict) -> None:
    changed = [(s, before[k][1], sig) for k, (s, sig) in now.items()
               if k in before and before[k][1] != sig]
    if not changed:
      return
    what = "; ".join(f"{s.label()} was {_text(old)}, now {_text(new)}"
                     for s, old, new in changed)
    warnings.warn(
        f"bs.Runner({self.name}): the {length}-step chunk program compiles "
        f"again (as long as the first run's compile): {what}. Keep a "
        "State's shape, dtype and placement between runs (assign "
        "jax.device_put(new_value, state.sharding)) to reuse the compiled "
        "program.", UserWarning, stacklevel=3)


def _input_signatures(jitted: Any, start: int) -> dict[int, tuple[State, tuple]]:
  """``{id(state): (state, signature)}`` of the values the chunk program
  would be called with now: placed as its call places them (read-only
  States keep that placement), so only what would compile again differs."""
  def read(program):
    mask, _, jargs, _ = program.prepare((np.int32(start),), {})
    values = program.state_values(mask, jargs)
    return {id(s): (s, _signature(v))
            for s, v in zip(program.reads, values, strict=True)}
  return jitted.with_program((np.int32(start),), {}, read)


def _signature(value: Any) -> tuple:
  """What ``jax.jit``'s cache sees of a value: per leaf, shape, dtype, weak
  type and, when committed, where it lies (one spelling per placement)."""
  out = []
  for x in jax.tree.leaves(value):
    where = None
    if getattr(x, "committed", False):
      s = x.sharding
      spec = getattr(s, "spec", None)
      where = (frozenset(d.id for d in s.device_set),
               None if spec is None else canonical_spec(spec, x.ndim))
    out.append((tuple(x.shape), str(x.dtype), jax.typeof(x).weak_type, where))
  return tuple(out)


def _text(sig: tuple) -> str:
  parts = []
  for shape, dtype, _, where in sig:
    place = "uncommitted"
    if where is not None:
      ids = sorted(where[0])
      place = f"on devices {ids[0]}-{ids[-1]}" if len(ids) > 1 else (
          f"on device {ids[0]}")
      if where[1] is not None:
        place += f" {where[1]}"
    parts.append(f"{dtype}{list(shape)} {place}")
  return ", ".join(parts)
