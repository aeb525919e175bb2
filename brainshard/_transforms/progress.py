"""Progress bars for compiled loops.

A loop given ``pbar=ProgressBar(...)`` reports from inside the compiled
program with ``jax.debug.callback(..., ordered=False)``: ordered effects
cannot run on more than one device or inside ``shard_map``, unordered ones
can. The callback sits under a ``lax.cond`` that fires every ``freq`` steps
(or as ``count`` asks), so a coarse bar costs one integer comparison per
step. Inside ``bs.shard_map`` only the first shard reports; the host side
also ignores repeated or stale counts, so a report can never go backwards.
"""

from __future__ import annotations

import numbers
import sys
import threading
import time
import warnings
from typing import Any, IO

import jax
import jax.numpy as jnp

from brainshard._core.frames import manual_axes
from brainshard._core.threads import frame_stack

__all__ = ["ProgressBar", "as_progress_bar"]


# tqdm's own options a bar may pass on; the loop sets total/initial, and
# desc/file are ProgressBar's own arguments.
_TQDM_OPTIONS = frozenset({
    "leave", "ncols", "nrows", "mininterval", "maxinterval", "miniters",
    "ascii", "disable", "unit", "unit_scale", "unit_divisor", "dynamic_ncols",
    "smoothing", "bar_format", "position", "postfix", "colour", "delay"})
_SET_BY_LOOP = frozenset({"total", "initial", "iterable"})
DEFAULT_COUNT = 100


class ProgressBar:
  """Shows the progress of a compiled ``for_loop`` / ``scan`` as it runs.

  Uses ``tqdm`` when it is installed (``tqdm.auto`` in notebooks with
  ipywidgets), else a one-line text bar.

  Args:
    freq: report every ``freq`` steps (also readable as ``print_freq``,
      brainstate's name).
    desc: a label shown before the bar (default: the loop's name), or
      brainstate's ``(format, fn)``: at each report the label is
      ``format.format(**fn({'i': step}))``, ``fn`` called while the loop is
      traced (so it may use traced values) and returning a dict.
    count: how many times the bar reports over the whole loop (brainstate's
      ``count``): every ``ceil(steps / count)`` steps, so at most ``count``
      reports; a loop of fewer steps reports every step. Give ``freq`` or
      ``count``, not both; with neither, ``count=100``.
    file: where the bar is written (default: ``sys.stderr``).
    use_tqdm: True/False to force or avoid tqdm; None uses it if importable.
    **tqdm_kwargs: tqdm options (e.g. ``leave=False``, ``ncols=80``), passed
      on when the bar is a tqdm bar.

  Arguments are checked here: an unknown keyword is a ``TypeError`` naming
  it, a bad value a ``TypeError`` or ``ValueError``. Two ProgressBars with
  the same settings are equal, so a loop called again with a fresh but
  equal bar reuses its compiled program.

  Example:
    >>> import io, brainshard as bs, jax.numpy as jnp
    >>> out = io.StringIO()
    >>> v = bs.State(jnp.zeros(()), name='v')
    >>> def step(i):
    ...   v.value = v.value + i
    >>> _ = bs.for_loop(step, jnp.arange(10.0),
    ...                 pbar=bs.ProgressBar(freq=5, file=out, use_tqdm=False))
    >>> '100% 10/10' in out.getvalue()
    True
    >>> bs.ProgressBar(count=20)     # about 20 reports, whatever the length
    ProgressBar(count=20, desc=None)
  """

  def __init__(self, freq: int | None = None, desc: str | None = None, *,
               count: int | None = None, file: IO[str] | None = None,
               use_tqdm: bool | None = None, **tqdm_kwargs: Any):
    self.freq = _positive_int(freq, "freq")
    self.count = _positive_int(count, "count")
    if freq is not None and count is not None:
      raise ValueError(
          f"ProgressBar: give freq (report every that many steps) or count "
          f"(report that many times), not both; got freq={freq!r}, "
          f"count={count!r}.")
    desc = _check_desc(desc)
    if file is not None and not callable(getattr(file, "write", None)):
      raise TypeError(
          f"ProgressBar: file must have a write() method (like sys.stderr or "
          f"io.StringIO()), got {type(file).__name__}.")
    if use_tqdm is not None and not isinstance(use_tqdm, bool):
      raise TypeError(
          f"ProgressBar: use_tqdm must be True, False or None, got {use_tqdm!r}.")
    _check_tqdm_kwargs(tqdm_kwargs, use_tqdm)
    self.desc = desc
    self.file = file
    self.use_tqdm = use_tqdm
    self.tqdm_kwargs = tqdm_kwargs

  @property
  def print_freq(self) -> int | None:
    """brainstate's name for ``freq``."""
    return self.freq

  def _key(self) -> tuple:
    return (self.freq, self.count, self.desc, id(self.file), self.use_tqdm,
            tuple(sorted((k, repr(v)) for k, v in self.tqdm_kwargs.items())))

  def __eq__(self, other: Any) -> bool:
    return isinstance(other, ProgressBar) and self._key() == other._key()

  def __hash__(self) -> int:
    return hash(self._key())

  def __repr__(self) -> str:
    every = (f"freq={self.freq}" if self.count is None
             else f"count={self.count}")
    return f"ProgressBar({every}, desc={self.desc!r})"

  def steps_between_reports(self, total: int) -> int:
    """How many steps apart a loop of ``total`` steps reports."""
    if self.freq is not None:
      return self.freq
    count = self.count if self.count is not None else DEFAULT_COUNT
    return max(1, -(-total // count))  # ceil: at most `count` reports

  def bind(self, total: int, name: str) -> "_Ticker":
    """The reporter of one traced loop of ``total`` steps."""
    return _Ticker(_HostBar(self, total, name),
                   self.steps_between_reports(total))


def _positive_int(x: Any, what: str) -> int | None:
  if x is None:
    return None
  if isinstance(x, bool) or not isinstance(x, numbers.Integral):
    raise TypeError(
        f"ProgressBar: {what} must be a positive int or None, got "
        f"{type(x).__name__} {x!r}.")
  if x < 1:
    raise ValueError(f"ProgressBar: {what} must be a positive int, got {x!r}.")
  return int(x)


def _check_desc(desc: Any) -> Any:
  if desc is None or isinstance(desc, str):
    return desc
  if not isinstance(desc, (tuple, list)):
    raise TypeError(
        f"ProgressBar: desc must be a str, a (format, fn) pair or None, got "
        f"{type(desc).__name__} {desc!r}.")
  if len(desc) != 2:
    raise ValueError(
        f"ProgressBar: a desc pair is (format string, fn returning a dict); "
        f"got {len(desc)} item(s): {desc!r}.")
  fmt, fn = desc
  if not isinstance(fmt, str) or not callable(fn):
    raise TypeError(
        f"ProgressBar: a desc pair is (format string, fn returning a dict); "
        f"got ({type(fmt).__name__}, {type(fn).__name__}).")
  return (fmt, fn)


def _desc_data(desc: Any, step: Any) -> dict:
  """The traced values a ``(format, fn)`` desc formats with ({} for a str)."""
  if not isinstance(desc, tuple):
    return {}
  data = desc[1]({"i": step})
  if not isinstance(data, dict):
    raise TypeError(
        f"ProgressBar: the desc function {desc[1]!r} must return a dict of "
        f"values for {desc[0]!r}, but returned {type(data).__name__}.")
  return data


def _check_tqdm_kwargs(kwargs: dict, use_tqdm: bool | None) -> None:
  for k in kwargs:
    if k in _SET_BY_LOOP:
      raise TypeError(
          f"ProgressBar got {k}=, which the loop sets (its number of steps); "
          "leave it out.")
    if k not in _TQDM_OPTIONS:
      raise TypeError(
          f"ProgressBar got an unexpected keyword argument {k!r}. It takes "
          "freq, desc, count, file, use_tqdm and these tqdm options: "
          f"{', '.join(sorted(_TQDM_OPTIONS))}.")
  if kwargs and use_tqdm is False:
    raise TypeError(
        f"ProgressBar: {', '.join(sorted(kwargs))} "
        f"{'is a tqdm option' if len(kwargs) == 1 else 'are tqdm options'}, "
        "but use_tqdm=False.")


def as_progress_bar(pbar: Any) -> ProgressBar | None:
  """``pbar=`` of a loop: None, a ProgressBar, or an int (its freq)."""
  if pbar is None or pbar is False:
    return None
  if pbar is True:
    return ProgressBar()
  if isinstance(pbar, ProgressBar):
    return pbar
  if isinstance(pbar, numbers.Integral):
    return ProgressBar(freq=pbar)
  raise TypeError(
      f"pbar must be a bs.ProgressBar, an int (report every that many steps) "
      f"or None; got {type(pbar).__name__}.")


class _Ticker:
  """Emits the progress callbacks into the loop being traced."""

  def __init__(self, host: "_HostBar", freq: int):
    self.host = host
    self.freq = freq

  def tick(self, step: Any) -> None:
    """Called at the end of step ``step`` (counting from 0).

    One callback per reported step, inside the loop: XLA orders nothing
    between independent side effects, and it may fold a loop's final
    counter into a constant, so a report after the loop could overtake the
    reports made inside it.
    """
    if not _callbacks_supported(self.host.name):
      return
    n = step + 1
    data = _desc_data(self.host.config.desc, step)
    pred = ((n % self.freq) == 0) | (n == self.host.total) | (step == 0)
    first = _first_shard()
    if first is not None:
      pred = jnp.logical_and(pred, first)
    jax.lax.cond(pred, self._report, lambda n, data: None, n, data)

  def _report(self, n: Any, data: dict) -> None:
    jax.debug.callback(self.host.update, n, data, ordered=False)


def _callbacks_supported(name: str) -> bool:
  """False in a shard_map that is manual over only some axes of a mesh whose
  other axes are Explicit: JAX cannot lower callbacks there (it closes over
  their operands in a nested shard_map), so the bar is skipped with a
  warning rather than failing the loop."""
  for frame in frame_stack():
    mesh = frame.mesh
    manual = {a for a, _ in frame.manual_axes}
    if mesh is None or not manual:
      continue
    if any(t == jax.sharding.AxisType.Explicit and a not in manual
           for a, t in zip(mesh.axis_names, mesh.axis_types)):
      warnings.warn(
          f"{name}: no progress bar inside a shard_map that is manual over "
          f"only {sorted(manual)} of the Explicit mesh axes "
          f"{mesh.axis_names}: JAX cannot run callbacks there. Make the "
          "shard_map manual over all axes, or use AxisType.Auto for the "
          "others.", stacklevel=2)
      return False
  return True


def _first_shard() -> Any:
  """Inside ``bs.shard_map`` bodies: is this the first shard? (else None)."""
  axes = manual_axes()
  if not axes:
    return None
  return jax.lax.axis_index(tuple(a for a, _ in axes)) == 0


class _HostBar:
  """The host side of one traced loop; every run of it starts a new bar."""

  def __init__(self, config: ProgressBar, total: int, name: str):
    self.config = config
    self.total = total
    self.name = name
    self.lock = threading.Lock()
    self.bar: Any = None
    self.n = 0

  def update(self, n: Any, data: dict | None = None) -> None:
    n = int(n)
    with self.lock:
      if n == self.n and self.bar is not None:
        return  # the same count reported twice
      if self.bar is None or n < self.n:  # a new run of the loop
        self._close()
        self.bar = self._open()
        self.n = 0
      if data:
        self._describe(data)
      self.bar.update(n - self.n)
      self.n = n
      if n >= self.total:
        self._close()

  def _close(self) -> None:
    if self.bar is not None:
      self.bar.close()
      self.bar = None
    self.n = 0

  def _describe(self, data: dict) -> None:
    label = self.config.desc[0].format(**data)
    if hasattr(self.bar, "set_description"):  # tqdm
      self.bar.set_description(label, refresh=False)
    else:
      self.bar.desc = label

  def _open(self) -> Any:
    cfg = self.config
    desc = cfg.desc if isinstance(cfg.desc, str) else self.name
    tqdm = tqdm_class() if cfg.use_tqdm is not False else None
    if tqdm is None and cfg.use_tqdm:
      raise ImportError("ProgressBar(use_tqdm=True) needs tqdm: pip install tqdm")
    if tqdm is not None:
      return tqdm(total=self.total, desc=desc, file=cfg.file,
                  **cfg.tqdm_kwargs)
    return TextBar(self.total, desc, cfg.file)


def tqdm_class() -> Any:
  try:
    import tqdm  # noqa: F401
  except ImportError:
    return None
  try:
    import ipywidgets  # noqa: F401
    from tqdm.auto import tqdm as cls
  except ImportError:  # tqdm.auto warns in notebooks without ipywidgets
    from tqdm import tqdm as cls
  return cls


class TextBar:
  """A minimal one-line bar for when tqdm is not installed."""

  def __init__(self, total: int, desc: str | None, file: IO[str] | None):
    self.total = total
    self.desc = desc
    self.file = file
    self.n = 0
    self.start = time.perf_counter()
    self._write()

  def update(self, k: int) -> None:
    self.n += k
    self._write()

  def close(self) -> None:
    self._write()
    self._out().write("\n")
    self._out().flush()

  def _out(self) -> IO[str]:
    return self.file if self.file is not None else sys.stderr

  def _status(self, elapsed: float, rate: float) -> str:
    """What follows the percentage (subclasses add ETA and more)."""
    return f"{self.n}/{self.total} [{elapsed:.1f}s, {rate:.1f} steps/s]"

  def _write(self) -> None:
    elapsed = time.perf_counter() - self.start
    rate = self.n / elapsed if elapsed > 0 else 0.0
    pct = 100.0 * self.n / self.total if self.total else 100.0
    prefix = f"{self.desc}: " if self.desc else ""
    self._out().write(f"\r{prefix}{pct:3.0f}% {self._status(elapsed, rate)}")
    self._out().flush()
