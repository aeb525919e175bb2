"""Errors brainshard raises, and keeping library frames out of tracebacks."""

from __future__ import annotations

__all__ = ["StateTraceError", "Rediscover"]


class StateTraceError(RuntimeError):
  """A State was used in a way that would leak a tracer or a dead value."""


class Rediscover(Exception):
  """Internal: a trace touched States outside the program's known set; the
  program is grown to the union and the call retried (program.py)."""

  def __init__(self, reads, writes):
    super().__init__("internal: brainshard state set changed")
    self.reads = list(reads)
    self.writes = list(writes)
