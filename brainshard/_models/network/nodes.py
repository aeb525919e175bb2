"""What ``Network.create`` returns: a handle on some of a network's neurons.

A :class:`NodeCollection` is a contiguous range of the network's global
neuron ids (populations are laid end to end in the order they are created),
as NEST's ``NodeCollection`` of neurons: it slices (``E[:50]``), joins
neighbours (``E + I`` when ``I`` follows ``E``), and names its population.
brainshard's ids count from 0 over the neurons only (NEST's node ids count
from 1 and give devices ids too).

Example:
  >>> from brainshard._models.network.nodes import NodeCollection
  >>> E = NodeCollection(None, 0, 80, 'E')
  >>> I = NodeCollection(None, 80, 100, 'I')
  >>> (E + I).ids, E[:10].ids, len(E[5:15])
  ((0, 100), (0, 10), 10)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NodeCollection", "DeviceNode"]


class NodeCollection:
  """Neurons ``[start, stop)`` of ``network`` (global ids)."""

  def __init__(self, network: Any, start: int, stop: int, label: str):
    self.network, self.start, self.stop, self.label = (
        network, int(start), int(stop), label)

  @property
  def ids(self) -> tuple[int, int]:
    """The global id range ``(start, stop)``."""
    return self.start, self.stop

  def __len__(self) -> int:
    return self.stop - self.start

  def __repr__(self) -> str:
    return f"NodeCollection({self.label!r}, ids [{self.start}, {self.stop}))"

  def __getitem__(self, key: Any) -> NodeCollection:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
      key = slice(int(key), int(key) + 1 if key != -1 else None)
    if not isinstance(key, slice) or key.step not in (None, 1):
      raise TypeError(f"{self!r}: index with an int or a contiguous slice "
                      f"(E[:50]), got {key!r}.")
    start, stop, _ = key.indices(len(self))
    return NodeCollection(self.network, self.start + start,
                          self.start + max(start, stop),
                          f"{self.label}[{start}:{max(start, stop)}]")

  def __add__(self, other: NodeCollection) -> NodeCollection:
    if not isinstance(other, NodeCollection) or other.network is not (
        self.network):
      raise TypeError(f"{self!r} + {other!r}: both must be neurons of one "
                      "network.")
    lo, hi = sorted((self, other), key=lambda c: c.start)
    if lo.stop != hi.start:
      raise ValueError(
          f"{self!r} + {other!r}: the ids are not contiguous; a connection "
          "takes one range of neurons (create populations in the order you "
          "want to join them, or connect each one).")
    return NodeCollection(self.network, lo.start, hi.stop,
                          f"{lo.label}+{hi.label}")


class DeviceNode:
  """A stimulation device of ``network`` (``Network.create``'s handle):
  ``net.connect(device, neurons, syn_spec=...)``."""

  def __init__(self, network: Any, device: Any, label: str):
    self.network, self.device, self.label = network, device, label

  def __repr__(self) -> str:
    return f"DeviceNode({self.label!r}, {self.device!r})"
