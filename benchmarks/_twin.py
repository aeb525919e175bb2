"""What the pure-JAX twins share: a chunk of calls of a hand-threaded step
as one ``jax.jit`` program, and the run loop that dispatches chunks,
compacts their spike words with the library's program and decodes them on
the host, as ``bs.Runner`` records a network's spike recorders.

A twin gives :class:`TwinRun` its ``step(state, *args) -> (state, spikes)``
(one call: ``spikes`` is what a ``bm.Network`` step returns, ``[n]`` or
``[every, n]``), the arrays, and one ``Source`` per recorded word buffer:
``take(spikes)`` (the recorded vector) and ``events(calls, flat)`` (the
call index and flat position of each recorded bit as global ``(steps,
neurons)``). Nothing else of brainshard's State machinery: no ``bs.State``,
``bs.jit``, ``bs.shard_map``, ``bs.Runner`` or monitor.

Example (one neuron that fires every call):
  >>> import jax.numpy as jnp
  >>> src = Source(lambda s: s, lambda c, f: (c, f))
  >>> run = TwinRun(lambda st, x: (st + x, st >= 0), jnp.zeros(1),
  ...               (jnp.ones(1),), [src], chunk=4, calls_per_ms=1.0)
  >>> steps, neurons = run(6.0)
  >>> steps.tolist(), neurons.tolist()
  ([0, 1, 2, 3, 4, 5], [0, 0, 0, 0, 0, 0])
"""

from __future__ import annotations

import collections
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import SingleDeviceSharding

from brainshard._simulation.monitors import spikes as spk
from brainshard._simulation.runner.chunked import chunk_lengths

__all__ = ["Source", "chunk_program", "TwinRun"]


class Source(NamedTuple):
  """One recorded word buffer: ``take(spikes) -> bool [m]`` per call, and
  ``events(calls, flat) -> (steps, neurons)`` back on the host."""
  take: Callable
  events: Callable


def chunk_program(step: Callable, sources: list[Source], length: int):
  """``jax.jit`` of ``length`` calls from global call ``i0``: ``(state,
  args, i0) -> (state, words)``, one word buffer per source (the
  Recorder's ``record_spikes``). No donation: bs.Runner donates nothing."""

  def chunk(state, args, i0):
    base = i0 // spk.BITS

    def body(c, i):
      s, words = c
      s, spikes = step(s, *args)
      words = [spk.record_spikes(w, src.take(spikes), i, base)
               for w, src in zip(words, sources)]
      return (s, words), None

    probe = jax.eval_shape(step, state, *args)[1]
    words = [jnp.zeros((spk.word_rows(length),
                        jax.eval_shape(src.take, probe).shape[0]), jnp.uint32)
             for src in sources]
    calls = i0 + jnp.arange(length, dtype=jnp.int32)
    (state, words), _ = lax.scan(body, (state, words), calls)
    return state, words

  # Outputs pinned to the device: left to jit, the ring buffer came back
  # with the connectivity's one-device mesh in its sharding (JAX 0.12),
  # and the next chunk compiled again.
  return jax.jit(chunk, out_shardings=SingleDeviceSharding(jax.devices()[0]))


class TwinRun:
  """``run(ms) -> (steps, neurons)``: each call continues the simulation
  by ``ms`` (a whole number of calls) and returns its spikes as sorted
  global (step, neuron) events. One chunk is dispatched ahead
  (``ChunkedLoop.iterate``) and each buffer compacted right after its
  dispatch (``Recorder.dispatch``), with the Recorder's capacity growth.
  ``state`` is the state after the last call, ``pos`` the next call's
  index, ``programs`` the chunk programs by length."""

  def __init__(self, step: Callable, state, args: tuple,
               sources: list[Source], *, chunk: int, calls_per_ms: float):
    self.step, self.state, self.args, self.sources = step, state, args, sources
    self.chunk, self.calls_per_ms = chunk, calls_per_ms
    self.programs: dict[int, object] = {}
    self.capacity: list = [None] * len(sources)  # kept between runs
    self.pos = 0

  def _dispatch(self, start: int, length: int):
    if length not in self.programs:
      self.programs[length] = chunk_program(self.step, self.sources, length)
    self.state, words = self.programs[length](self.state, self.args,
                                              np.int32(start))
    comps = [spk.compact(w, self.capacity[k]) for k, w in enumerate(words)]
    for k, c in enumerate(comps):  # async copies to the host
      self.capacity[k] = self.capacity[k] or c.capacity
    return start, length, words, comps

  def _collect(self, start, length, words, comps):  # Recorder._decode
    steps, neurons = [], []
    for k, (w, comp) in enumerate(zip(words, comps)):
      while True:
        try:
          c, f = spk.decode(comp, start, length, start // spk.BITS)
          break
        except spk.Overflow as e:
          self.capacity[k] = spk.grown_capacity(e.needed,
                                                w.shape[0] * w.shape[1])
          comp = spk.compact(w, self.capacity[k])
      s, nn = self.sources[k].events(np.asarray(c, np.int64),
                                     np.asarray(f, np.int64))
      steps.append(s)
      neurons.append(nn)
    return np.concatenate(steps), np.concatenate(neurons)

  def __call__(self, ms: float):
    pending: collections.deque = collections.deque()
    steps, neurons = [], []
    lengths = chunk_lengths(int(round(ms * self.calls_per_ms)), self.chunk)
    end = self.pos + sum(lengths)
    for length in lengths:
      pending.append(self._dispatch(self.pos, length))
      self.pos += length
      # One chunk ahead (ChunkedLoop.iterate): chunk k is decoded once
      # chunk k + 1 is dispatched.
      while len(pending) > 1 or (pending and self.pos == end):
        s, nn = self._collect(*pending.popleft())
        steps.append(s)
        neurons.append(nn)
    if not steps:
      return np.zeros(0, np.int64), np.zeros(0, np.int32)
    steps, neurons = np.concatenate(steps), np.concatenate(neurons)
    order = np.lexsort((neurons, steps))
    return steps[order], neurons[order].astype(np.int32)
