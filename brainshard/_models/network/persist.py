"""What a network holds between runs: its States by name (saved and
restored, and a resumed run is the straight run), and the count of STDP
updates its bounded spike history may have made inexact.

:class:`NetworkState` is a base of :class:`~.network.Network`; it reads
the built network's groups, delivery, plastic synapses and archive.

Example: see docs/plasticity.md.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from brainshard._scaleout.checkpoint.checkpoint import save_states

__all__ = ["NetworkState"]


class NetworkState:
  """The States of a built network (a base of ``Network``)."""

  @property
  def plasticity_overflow(self) -> int:
    """STDP updates so far that may have missed a post spike: a post
    neuron fired more than ``history`` times within one synapse's window
    (raise ``Network(history=...)``); 0 means every update was NEST's."""
    if not self.plastic:
      return 0
    return int(sum(np.asarray(p.overflow.value).sum() for p in self.plastic))

  def states(self) -> dict:
    """Every State of the built network by name: neurons, input queue,
    step counter, synapses (plastic weights and their rules' state, the
    post neurons' spike history); for ``bs.save_states`` and
    ``bs.restore_states`` (or :meth:`save` and :meth:`restore`)."""
    self.build()
    return self._states()

  def _states(self) -> dict:
    d, out = self.delivery, {}
    found = [s for g in self.groups for s in g.states.values()]
    found += [d.buffer, d.current, d.t]
    for p in self.plastic:
      found += p.states()
    if self.archive is not None:
      found.append(self.archive.history)
    for s in found:  # names as checkpoint keys: word characters only
      out[re.sub(r"\W", "_", s.name)] = s
    return out

  def save(self, path: Any, *, overwrite: bool = False) -> None:
    """Saves :meth:`states` (and the time reached) to ``path``; a network
    built by the same script on the same mesh continues from it with
    :meth:`restore`, as the straight run would."""
    self.build()
    step = self.runner.step_count
    save_states(path, self.states(), overwrite=overwrite, metadata={
        "step": step, "time": step * self.runner.dt, "dt": self.runner.dt})

  def restore(self, path: Any) -> None:
    """Restores what :meth:`save` wrote; the run (and its records' times)
    continues from the saved time."""
    self.build()
    self.runner.restore(path)
