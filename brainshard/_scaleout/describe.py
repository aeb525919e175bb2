"""Where States live: ``describe`` (a table) and ``visualize`` (one array)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

from brainshard._scaleout.place import states_in
from brainshard._core.keys import is_typed_key
from brainshard._core.state.state import State, expect_state

__all__ = ["describe", "visualize", "StateInfo", "StateTable", "device_ids"]


class StateInfo(NamedTuple):
  """One row of :func:`describe`: one array leaf of one State.

  A named tuple: ``name`` (the State's name, or its path in what was
  described; a pytree leaf adds its own path), ``type`` (the State's class
  name), ``shape``, ``dtype``, ``spec`` (its PartitionSpec as text),
  ``devices`` (how many devices hold a part of it) and
  ``bytes_per_device`` (the largest part any one device holds).

  Example:
    >>> import jax.numpy as jnp, brainshard as bs
    >>> row = bs.describe(bs.State(jnp.zeros(4), name='v'))[0]
    >>> isinstance(row, bs.StateInfo), row.name, row.shape, row.bytes_per_device
    (True, 'v', (4,), 16)
  """
  name: str
  type: str
  shape: tuple
  dtype: str
  spec: str             # the PartitionSpec, or where an unsharded value is
  devices: int          # how many devices hold a part of it
  bytes_per_device: int  # the largest part any one device holds


def _bytes(n: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if n < 1024 or unit == "GiB":
      return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return str(n)  # pragma: no cover


class StateTable(list):
  """The rows of :func:`describe`; prints as a table.

  A list of :class:`StateInfo` rows; ``str()`` of it is the aligned table
  with a total, and ``.bytes_per_device`` is what the rows take on the
  fullest device.

  Example:
    >>> import jax.numpy as jnp, brainshard as bs
    >>> table = bs.describe([bs.State(jnp.zeros(4), name='v'),
    ...                      bs.ParamState(jnp.zeros((2, 2)), name='w')])
    >>> isinstance(table, bs.StateTable), len(table), table.bytes_per_device
    (True, 2, 32)
  """

  def __init__(self):
    super().__init__()
    self._devices: list = []  # per row, the devices holding it (describe)

  def _add(self, row: StateInfo, devices) -> None:
    self.append(row)
    self._devices.append(devices)

  @property
  def bytes_per_device(self) -> int:
    """Bytes the rows take on the fullest device (if they share devices)."""
    per: dict[Any, int] = {}
    for row, devices in zip(self, self._devices):
      for d in devices:
        per[d] = per.get(d, 0) + row.bytes_per_device
    return max(per.values(), default=0)

  @property
  def unplaced(self) -> list[str]:
    """Names of the rows left on one device (a State made from a plain
    array) beside rows spread over a mesh: a program reading them on the
    mesh moves them there. Empty where nothing is spread over a mesh.

    Example:
      >>> import jax, jax.numpy as jnp, brainshard as bs
      >>> mesh = jax.make_mesh((2,), ('x',))
      >>> v = bs.State(jnp.zeros(4), 'v', spec=jax.P('x'))
      >>> _ = bs.place(v, mesh)
      >>> bs.describe([v, bs.State(jnp.zeros(3), 'table')]).unplaced
      ['table']
    """
    if not any(r.devices > 1 for r in self):
      return []
    return [r.name for r in self if _on_one_device(r)]

  def __str__(self) -> str:
    head = ("name", "type", "shape", "dtype", "spec", "devices",
            "bytes/device")
    # States on different device groups (sub-mesh tasks): say which devices.
    groups = {frozenset(d) for d in self._devices if d}
    which = (lambda d: f"{len(d)} ({device_ids(d)})") if len(groups) > 1 else (
        lambda d: str(len(d)))
    marked = set(self.unplaced)
    body = [(r.name, r.type, str(r.shape), r.dtype,
             r.spec + (" *" if r.name in marked else ""), which(d),
             _bytes(r.bytes_per_device)) for r, d in zip(self, self._devices)]
    foot = ("total", "", "", "", "", "", _bytes(self.bytes_per_device))
    widths = [max(len(row[i]) for row in [head, *body, foot])
              for i in range(len(head))]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
    rule = "  ".join("-" * w for w in widths)
    lines = [fmt(head), rule, *map(fmt, body), rule, fmt(foot)]
    if marked:
      lines.append(_UNPLACED_NOTE.format(", ".join(sorted(marked))))
    return "\n".join(lines)

  __repr__ = __str__


_UNPLACED_NOTE = (
    "* on one device beside States spread over a mesh: {}. A program on "
    "the mesh moves such a State there on its first call and keeps it there; "
    "to place it now (and size the run from this table), use "
    "bs.place(state, mesh) or create it with bs.sharded_init.")


def _on_one_device(row: StateInfo) -> bool:
  return row.devices == 1 and row.spec.startswith("on ")


def device_ids(devices: Any) -> str:
  """Device ids as text: ``0-3`` for a run of three or more, else ``0,5``."""
  ids = sorted(d.id for d in devices)
  if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
    return f"{ids[0]}-{ids[-1]}"
  return ",".join(map(str, ids))


def _itemsize(x: Any) -> int:
  if is_typed_key(x):  # an extended dtype numpy does not know
    return x.dtype.itemsize
  return np.dtype(x.dtype).itemsize


def _row(name: str, state: State, x: Any) -> tuple[StateInfo, set]:
  sharding = getattr(x, "sharding", None)
  shape = tuple(x.shape)
  if isinstance(sharding, jax.sharding.NamedSharding):
    spec = str(sharding.spec)
  elif sharding is not None and len(sharding.device_set) == 1:
    spec = f"on {next(iter(sharding.device_set))}"
  else:
    spec = str(sharding)
  shard = sharding.shard_shape(shape) if sharding is not None else shape
  devices = set(sharding.device_set) if sharding is not None else set()
  return StateInfo(name, type(state).__name__, shape, str(x.dtype), spec,
                   len(devices), math.prod(shard) * _itemsize(x)), devices


def describe(states: Any) -> StateTable:
  """A table of States: name, type, shape, dtype, spec, devices and bytes per
  device (one row per array leaf; pytree-valued states get a row per leaf).

  ``states`` is a State or a pytree of them; unnamed states are named by
  their path in it. Print the result for a table; the rows are
  :class:`StateInfo` tuples.

  Example:
    >>> import jax, jax.numpy as jnp, brainshard as bs
    >>> mesh = jax.make_mesh((2,), ('x',))
    >>> w = bs.ParamState(jnp.zeros((4, 3)), 'w', spec=jax.P('x'))
    >>> _ = bs.place(w, mesh)
    >>> print(bs.describe({'w': w}))
    name   type        shape   dtype    spec     devices  bytes/device
    -----  ----------  ------  -------  -------  -------  ------------
    w      ParamState  (4, 3)  float32  P('x',)  2        24 B
    -----  ----------  ------  -------  -------  -------  ------------
    total                                                 24 B
  """
  paths = jax.tree_util.tree_flatten_with_path(
      states, is_leaf=lambda x: isinstance(x, State))[0]
  seen: set[int] = set()
  table = StateTable()
  states_in(states, "bs.describe")  # rejects leaves that are not States
  for path, state in paths:
    if id(state) in seen:
      continue
    seen.add(id(state))
    base = state.name or jax.tree_util.keystr(path) or type(state).__name__
    value = state.global_value()
    leaves = jax.tree_util.tree_flatten_with_path(value)[0]
    for leaf_path, x in leaves:
      name = base + (jax.tree_util.keystr(leaf_path) if len(leaves) > 1
                     or leaf_path else "")
      row, devices = _row(name, state, x)
      table._add(row, devices)
  return table


def visualize(state: State, leaf: Any = None, **kwargs: Any) -> None:
  """Draws which device holds which part of a State's value (1-D or 2-D),
  with ``jax.debug.visualize_array_sharding`` (needs the ``rich`` package).

  Args:
    state: the State.
    leaf: for a pytree-valued state, which leaf: its position in
      ``jax.tree.leaves(state.value)`` or its path string (e.g. ``"['w']"``).
    kwargs: passed to ``jax.debug.visualize_array_sharding``.
  """
  expect_state(state, "bs.visualize's state")
  leaves = jax.tree_util.tree_flatten_with_path(state.global_value())[0]
  if leaf is None:
    if len(leaves) != 1:
      raise ValueError(
          f"bs.visualize: {state.label()} has {len(leaves)} leaves; choose "
          "one with leaf= (a position or one of "
          f"{[jax.tree_util.keystr(p) for p, _ in leaves]}).")
    x = leaves[0][1]
  elif isinstance(leaf, int):
    x = leaves[leaf][1]
  else:
    by_path = {jax.tree_util.keystr(p): v for p, v in leaves}
    if leaf not in by_path:
      raise KeyError(
          f"bs.visualize: {state.label()} has no leaf {leaf!r}; its leaves "
          f"are {list(by_path)}.")
    x = by_path[leaf]
  try:
    import rich  # noqa: F401  (jax.debug needs it)
  except ImportError:
    raise ImportError(
        "bs.visualize draws with the `rich` package: pip install rich "
        "(or brainshard[viz]).") from None
  jax.debug.visualize_array_sharding(x, **kwargs)
