"""The host side of a chunked run: its progress bar and its stop button.

Both live on the host between chunks, so neither adds anything to the
compiled programs. The stop button is SIGINT (Ctrl-C, a notebook's stop
button): while a run is going it only sets a flag that the run reads before
dispatching each chunk; an exception raised inside a compiled callback would
surface as a ``JaxRuntimeError`` and leave the run half-done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any, IO, Iterator

from brainshard._transforms.progress import TextBar, tqdm_class as _tqdm_class

__all__ = ["StopButton", "ChunkBar"]


class StopButton:
  """Within ``with``: the first SIGINT sets ``pressed``; a second one raises
  ``KeyboardInterrupt`` (the run then rolls back to its last whole chunk),
  at once or, inside :meth:`critical`, at its end; any further SIGINT is
  ignored, so nothing cuts that rollback short.

  The handler is installed only in the main thread (Python delivers signals
  there) and the previous handler is put back on exit.

  Example:
    >>> import os, signal
    >>> with StopButton() as stop:
    ...   os.kill(os.getpid(), signal.SIGINT)
    ...   _ = stop.wait_for_signal()
    >>> stop.pressed
    True
  """

  def __init__(self):
    self._event = threading.Event()
    self._previous: Any = None
    self._installed = False
    self._critical = 0
    self._deferred = False
    self._stopping = False  # the second SIGINT raised: later ones are ignored

  @property
  def pressed(self) -> bool:
    return self._event.is_set()

  def __call__(self) -> bool:
    return self._event.is_set()

  def wait_for_signal(self, timeout: float = 5.0) -> bool:
    """Waits (in Python, so the handler can run) until pressed."""
    end = time.monotonic() + timeout
    while not self.pressed and time.monotonic() < end:
      time.sleep(0.001)
    return self.pressed

  def _handler(self, signum: int, frame: Any) -> None:
    if not self._event.is_set():
      self._event.set()
    elif self._stopping:
      pass  # a KeyboardInterrupt is already on its way: let the cleanup run
    elif self._critical:
      self._deferred = True
    else:
      self._stopping = True
      raise KeyboardInterrupt

  @contextlib.contextmanager
  def critical(self) -> Iterator[None]:
    """A section a second SIGINT must not cut in two (States being written,
    records being appended): its KeyboardInterrupt waits for the end."""
    self._critical += 1
    try:
      yield
    finally:
      self._critical -= 1
      if not self._critical and self._deferred:
        self._deferred = False
        self._stopping = True
        raise KeyboardInterrupt

  def __enter__(self) -> "StopButton":
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGINT, self._handler)
      self._installed = True
    return self

  def __exit__(self, *exc: Any) -> None:
    if self._installed:
      signal.signal(signal.SIGINT, self._previous)
      self._installed = False


class ChunkBar:
  """One bar for a chunked run: steps, steps/s, simulated time per wall
  second, ETA. ``tqdm`` (``tqdm.auto`` in notebooks) when installed and
  ``use_tqdm`` is not False, else a one-line text bar."""

  def __init__(self, total: int, dt: float | None, desc: str | None = None,
               file: IO[str] | None = None, use_tqdm: bool | None = None):
    self.dt = dt
    self.n = 0
    self.start = time.perf_counter()
    cls = _tqdm_class() if use_tqdm is not False else None
    self._tqdm = cls is not None
    self.bar = _ChunkTextBar(total, desc, file, self._sim_rate) if cls is None \
        else cls(total=total, desc=desc, unit="step", file=file,
                 dynamic_ncols=True)

  def _sim_rate(self) -> str:
    elapsed = time.perf_counter() - self.start
    if not self.dt or elapsed <= 0:
      return ""
    return f"{self.n * self.dt * 1e-3 / elapsed:.3g} s sim/s"

  def update(self, k: int) -> None:
    self.n += k
    if self._tqdm:
      self.bar.set_postfix_str(self._sim_rate(), refresh=False)
    self.bar.update(k)

  def close(self) -> None:
    self.bar.close()


class _ChunkTextBar(TextBar):
  """The text bar with an ETA and the simulated time per wall second."""

  def __init__(self, total: int, desc: str | None, file: IO[str] | None,
               sim_rate):
    self.sim_rate = sim_rate
    super().__init__(total, desc, file)

  def _status(self, elapsed: float, rate: float) -> str:
    eta = (self.total - self.n) / rate if rate > 0 else float("nan")
    sim = self.sim_rate()
    return (f"{self.n}/{self.total} steps [{elapsed:.1f}s < ETA {eta:.1f}s, "
            f"{rate:.1f} steps/s{', ' + sim if sim else ''}]")
