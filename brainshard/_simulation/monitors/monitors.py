"""Monitors: what a run records, and how it is recorded inside each chunk.

A monitor names a *source*: ``None`` (the step's return value), a State
(its value after the step), or a callable (``f()`` reading States, or
``f(out)`` given the step's return value). :class:`SpikeMonitor` and
:class:`RateMonitor` read a boolean spike vector per step and share one
compacted event stream per source (see ``_spikes.py``); :class:`StateMonitor`
records any value (a State, selected neurons of it, any function of States)
every ``every`` steps. ``recorder.py`` turns a step and its monitors into a
chunk program's body.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from brainshard._simulation.monitors.neuron_take import (
    LocalTake as _LocalTake, take as _take)
from brainshard._simulation.runner.chunked import takes_arguments
from brainshard._core.state.state import State

__all__ = ["SpikeMonitor", "RateMonitor", "StateMonitor", "source_name",
           "source_key", "host_copy"]


class _Monitor:
  source: Any = None

  def _check_source(self) -> None:
    """A spike source is None, a State or a callable: checked now, not at
    run() (where an array would fail as 'not callable' deep inside)."""
    src = self.source
    if not (src is None or isinstance(src, State) or callable(src)):
      raise TypeError(
          f"{type(self).__name__}: source must be None (the step's return "
          "value), a State, or a callable (f() reading States, or f(out) of "
          f"the step's return value); got {type(src).__name__} {src!r:.60}. "
          "To record an array the step computes, return it from the step or "
          "keep it in a State.")

  def read(self, out: Any) -> Any:
    src = self.source
    if src is None:
      return out
    if isinstance(src, State):
      return src.value
    return src(out) if takes_arguments(src) else src()


class SpikeMonitor(_Monitor):
  """Records spikes as sparse (step, neuron) events.

  Args:
    source: the spike vector ``bool[n]`` of each step: ``None`` (the step's
      return value), a State, or a callable (see the module doc). Spikes
      must be bool (``v > th``): a float or int 0/1 vector is an error, not
      silently "every non-zero value".
    capacity: spikes per shard per chunk that the device buffer holds at
      least (it stores 32-step words, so often more); ``None`` picks one
      from the chunk size.
    on_overflow: ``'grow'`` (compact the chunk again with a bigger buffer;
      nothing is lost) or ``'raise'``: a RuntimeError when a shard has more
      than ``capacity`` spikes in a chunk.

  Example:
    >>> import brainshard as bs
    >>> bs.SpikeMonitor()
    SpikeMonitor(source=None, capacity=None)
  """

  def __init__(self, source: Any = None, *, capacity: int | None = None,
               on_overflow: str = "grow"):
    if on_overflow not in ("grow", "raise"):
      raise ValueError(
          f"on_overflow must be 'grow' or 'raise', got {on_overflow!r}")
    if capacity is not None and (not isinstance(capacity, int) or capacity < 1):
      raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    self.source = source
    self._check_source()
    self.capacity = capacity
    self.on_overflow = on_overflow

  def __repr__(self) -> str:
    return (f"SpikeMonitor(source={source_name(self.source)}, "
            f"capacity={self.capacity})")


class RateMonitor(_Monitor):
  """Records the population's spike count per step (its rate in Hz on the
  result); shares the compacted events of a SpikeMonitor of the same source.

  Example:
    >>> import brainshard as bs
    >>> bs.RateMonitor()
    RateMonitor(source=None)
  """

  def __init__(self, source: Any = None):
    self.source = source
    self._check_source()

  def __repr__(self) -> str:
    return f"RateMonitor(source={source_name(self.source)})"


class StateMonitor(_Monitor):
  """Records a value every ``every`` steps (at the steps ``every - 1``,
  ``2 * every - 1``, ...).

  Args:
    source: a State, or a callable: ``f()`` reading States, or ``f(out)``
      given the step's return value; any pytree of arrays.
    index: optional integer indices along the first axis (e.g. neurons to
      keep); each must be within the value's size (negative ones count from
      the end), else run() raises an IndexError before running.
    every: record every that many steps (computed only on those steps).

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> v = bs.State(jnp.zeros(100), name='v')
    >>> bs.StateMonitor(v, index=[0, 5], every=10)
    StateMonitor(source=v, index=[0, 5], every=10)
  """

  def __init__(self, source: Any, *, index: Any = None, every: int = 1):
    if source is None or not (isinstance(source, State) or callable(source)):
      raise TypeError(
          f"StateMonitor: source must be a State or a callable, got {source!r}")
    if not isinstance(every, int) or every < 1:
      raise ValueError(
          f"StateMonitor: every must be a positive int, got {every!r}")
    self.source = source
    self.index = None if index is None else np.asarray(index)
    if self.index is not None and (
        self.index.dtype == bool
        or not np.issubdtype(self.index.dtype, np.integer)):
      raise TypeError(
          f"StateMonitor({source_name(source)}): index must be integers (neuron "
          f"numbers), got {self.index.dtype} {index!r:.60}; for a mask use "
          "np.flatnonzero(mask).")
    self.every = every
    self._local: _LocalTake | None = None

  def plan(self) -> None:
    """At top level, before tracing: picks neurons per shard when the source
    is a sharded State (see :class:`_LocalTake`)."""
    self._local = _LocalTake.plan(self.source, self.index)

  def value(self, out: Any) -> Any:
    x = self.read(out)
    if self.index is None:
      return x
    self._check_index(x)
    if self._local is not None:
      return self._local(x)
    return jax.tree.map(lambda a: _take(a, self.index), x)

  def _check_index(self, x: Any) -> None:
    """An index out of range would be clamped by JAX (neuron 99 of 64
    recorded as neuron 63): an error instead, naming source, index, size."""
    for leaf in jax.tree.leaves(x):
      shape = tuple(leaf.shape)
      n = shape[0] if shape else 0
      bad = self.index[(self.index < -n) | (self.index >= n)]
      if bad.size:
        raise IndexError(
            f"StateMonitor(source={source_name(self.source)}): index "
            f"{bad.tolist()[:8]} is out of range for {source_name(self.source)}, "
            f"which holds {leaf.dtype}{list(shape)}: {n} rows along its first "
            f"axis, so give indices in [0, {n}) (or [-{n}, 0) from the end).")

  def to_host(self, values: Any) -> Any:
    """Host copies of recorded values, columns in the order of ``index``."""
    values = jax.tree.map(host_copy, values)
    if self._local is None:
      return values
    return values[:, self._local.order]

  def __repr__(self) -> str:
    index = None if self.index is None else self.index.tolist()
    return (f"StateMonitor(source={source_name(self.source)}, index={index}, "
            f"every={self.every})")


def source_name(source: Any) -> str:
  """How messages and reprs name a monitor's source."""
  if source is None or isinstance(source, State):
    return "None" if source is None else (source.name or "State")
  return getattr(source, "__name__", repr(source))


def source_key(source: Any) -> Any:
  """Monitors with equal keys read the same spikes (one stream each)."""
  return ("out",) if source is None else ("id", id(source))


def host_copy(x: Any) -> np.ndarray:
  """A host copy (on CPU ``np.asarray`` may share the device buffer, which
  would then stay alive as long as the record)."""
  return np.array(x, copy=True)
