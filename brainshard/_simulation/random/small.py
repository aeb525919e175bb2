"""Exact Poisson and binomial counts for small rates: one 31-bit uniform per
element inverted against a threshold table built on the host.

Row ``k`` of a table holds ``T[k] = round(2**31 * P(X <= k))``, the CDF
summed in float64 and rounded once to a multiple of ``2**-31``, stored as
the int32 ``T[k] - 2**30 - 1``. An element takes 32 bits of the block key
(so a shard's counts are its block of the unsharded counts) as an int32,
shifts them right by one (arithmetic: ``y`` uniform on ``[-2**30,
2**30)``) and counts the rows it exceeds; ``y > T[k] - 2**30 - 1`` has
probability ``1 - T[k] / 2**31``, so ``P(count = k) = (T[k] - T[k-1]) /
2**31``. Each probability is the distribution's to within ``2**-31``
(~5e-10), with no float32 sum that stalls below 1, and a count that
cannot happen (any count at rate 0, more successes than trials) never
does. The rows stop at the first ``k`` where every threshold rounds to
``2**31``.

``bs.random.poisson`` and ``binomial`` draw from a table when the rate is
known at trace time (a Python number, a NumPy array, a jax array outside a
trace) and fits (:func:`poisson_plan`). A traced rate runs the exact loop
of ``random_counts``: its table's size is not known at trace time, and
float32 on the device cannot round the CDF once as float64 does (x64 may
be off). Both are exact, but they draw different numbers from one key, so
a rate passed into ``bs.jit`` as an argument draws other numbers than the
same rate closed over. For traced per-element rates build the table once
on the host (:func:`poisson_table`), keep it in a State sharded like the
rates, and draw with ``bs.random.from_table``.

The counts of a draw are those rows, however they are found. Per-element
tables (and tables traced where the draw is) compare with every row, a
compare and an add per row (signed: one AVX2 compare, where the unsigned
one is two) summed as a tree, which XLA fuses with the hash into one loop.
One table known at trace time (a scalar rate: ``bs.random.poisson(lam)``,
``binomial(n, p)``, ``from_table`` of a constant 1-D table) of at least
``GUIDE_MIN_ROWS`` rows (poisson: ``lam >= 1.91``) is searched with a
guide instead (:func:`guide`, :func:`guided`: a bucket from the draw's
float32 exponent, one gather, one compare), whose cost does not grow with
the rows: the same counts for every draw, so the same numbers as the
compares. On one CPU (``python -m benchmarks random --only small``),
against a uniform draw: ``poisson(lam)`` costs ~1.0-1.2x for ``lam <= 1``
(compares, 12 rows at ``lam = 1``) and ~1.3-1.4x for ``lam`` 2.4 to 10
(the guide; the compares cost 1.4x at 2.4, 1.7x at 5 and 2.1x at 10),
against 15-70x for the exact loop of ``random_counts``. XLA:CPU does not
vectorize the gather (8 scalar loads a vector): it costs about 16 rows of
compares, and it must stay in the hash's fusion (a third use of the
gathered value splits it off, and the hash runs twice).

Example:
  >>> from brainshard._simulation.random import small as random_small
  >>> random_small.poisson_table(0.5)[:3]
  array([ 228772849,  880030186, 1042844520], dtype=int32)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core import compat
from brainshard._core.caches import Cache
from brainshard._simulation.random import blocks

__all__ = ["poisson_table", "binomial_table", "poisson_plan",
           "binomial_plan", "sample", "sample_guided", "counts", "guide",
           "guide_plan", "guided", "guided_at", "ONE"]

ONE = 1 << 31        # T[k] that no draw passes (draws are 31 bits)
_SHIFT = (1 << 30) + 1  # stored: T[k] - _SHIFT, compared with x - 2**30
MAX_ROWS = 128       # a table's rows (compares per element) for the fast path
MAX_ENTRIES = 1 << 20  # a per-element table's rows x elements (4 MiB)
# Below LAM_MIN the 2**-31 steps are a visible fraction of the rate itself
# (lam = 1e-6: P(X >= 1) off by up to 2e-4 of itself); the exact loop is
# cheap there (about two steps).
LAM_MIN = 1e-3


# ----------------------------------------------------------------------------
# Tables (host, float64)


def _thresholds(cdf: np.ndarray) -> np.ndarray:
  """int32 ``[K, *shape]`` from float64 CDFs ``[rows, *shape]``: rounded
  once, cut before the first row that every element's CDF rounds past."""
  t = np.minimum(np.round(cdf * ONE), ONE)
  live = (t < ONE).reshape(len(t), -1).any(1)
  rows = int(np.argmin(live)) if not live.all() else len(t)
  return (t[:rows] - _SHIFT).astype(np.int32)


def _distinct(table_of, *params: np.ndarray) -> np.ndarray:
  """``table_of(*values)`` (float64 CDF ``[rows, m]`` for ``m`` distinct
  parameter tuples) spread over the broadcast shape of ``params``: the
  work is per distinct value (a per-population rate has a handful)."""
  shape = np.broadcast_shapes(*(p.shape for p in params))
  flat = np.stack([np.broadcast_to(p, shape).ravel() for p in params], -1)
  values, index = np.unique(flat, axis=0, return_inverse=True)
  cdf = table_of(*values.T)
  return _thresholds(cdf[:, index.ravel()].reshape(len(cdf), *shape))


def _poisson_cdf(lam: np.ndarray) -> np.ndarray:
  # far enough into the tail that P(X > k) < 2**-33 for every lam
  top = float(lam.max(initial=0.0))
  k = np.arange(int(top + 12 * math.sqrt(top) + 40))[:, None]
  with np.errstate(divide="ignore", invalid="ignore"):
    logp = k * np.log(lam) - lam - _lgamma(k + 1)
  pmf = np.where(lam == 0, (k == 0).astype(np.float64), np.exp(logp))
  return np.cumsum(pmf, 0)


def _binomial_top(n: np.ndarray, p: np.ndarray) -> int:
  """Rows enough for every ``n, p``: the tail past the mean + 12 sd + 40
  is below ``2**-33``."""
  mean = n * p
  top = np.minimum(n, np.ceil(mean + 12 * np.sqrt(mean) + 40))
  return int(top.max(initial=0)) + 1


def _binomial_cdf(n: np.ndarray, p: np.ndarray) -> np.ndarray:
  k = np.arange(_binomial_top(n, p))[:, None]
  with np.errstate(divide="ignore", invalid="ignore"):
    logp = (_lgamma(n + 1) - _lgamma(k + 1) - _lgamma(np.maximum(n - k, 0) + 1)
            + k * np.log(p) + (n - k) * np.log1p(-p))
  pmf = np.where(k > n, 0.0, np.exp(logp))
  pmf = np.where(p == 0, (k == 0).astype(np.float64), pmf)
  pmf = np.where(p == 1, (k == n).astype(np.float64), pmf)
  return np.cumsum(pmf, 0)


def _lgamma(x: np.ndarray) -> np.ndarray:
  return np.vectorize(math.lgamma, otypes=[np.float64])(x)


def poisson_table(lam: Any) -> np.ndarray:
  """The threshold table ``[K, *shape]`` (int32) of Poisson(``lam``), per
  element of ``lam`` (concrete, finite, >= 0): ``round(2**31 * P(X <= k))
  - 2**30 - 1`` for ``k < K`` (module docstring). Draw from it with
  ``bs.random.from_table``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.poisson_table([0.0, 2.4]).shape
    (17, 2)
  """
  lam = np.asarray(lam, np.float64)
  if not (np.isfinite(lam).all() and (lam >= 0).all()):
    raise ValueError(f"bs.random.poisson_table: lam must be finite and >= 0 "
                     f"(got {lam}).")
  return _distinct(_poisson_cdf, lam)


def binomial_table(n: Any, p: Any) -> np.ndarray:
  """The threshold table ``[K, *shape]`` (int32) of binomial(``n``,
  ``p``), as :func:`poisson_table` (``n`` integers >= 0, ``p`` in [0, 1]).

  Example:
    >>> import brainshard as bs
    >>> (bs.random.binomial_table(3, 0.5) + 2**30 + 1).tolist()  # 2**31 * CDF
    [268435456, 1073741824, 1879048192]
  """
  n, p = np.asarray(n, np.float64), np.asarray(p, np.float64)
  if not ((n >= 0).all() and (n == np.round(n)).all() and (p >= 0).all()
          and (p <= 1).all()):
    raise ValueError(f"bs.random.binomial_table: n must be integers >= 0 and "
                     f"p in [0, 1] (got n={n}, p={p}).")
  return _distinct(_binomial_cdf, n, p)


# ----------------------------------------------------------------------------
# When bs.random.poisson and binomial use a table


def _concrete(*params: Any) -> list[np.ndarray] | None:
  if compat.is_traced(params):
    return None
  return [np.asarray(p, np.float64) for p in params]


def _fits(table: np.ndarray) -> bool:
  return len(table) <= MAX_ROWS and (table.ndim == 1
                                     or table.size <= MAX_ENTRIES)


def poisson_plan(lam: Any) -> np.ndarray | None:
  """The table ``bs.random.poisson(lam)`` draws from, or None where it
  runs the exact loop: a traced rate (its table's size is not known at
  trace time), a rate outside ``0`` and ``[LAM_MIN, 2 * MAX_ROWS]``, or a
  table over ``MAX_ROWS`` rows (over ``MAX_ENTRIES`` entries per element)."""
  values = _concrete(lam)
  if values is None:
    return None
  (lam,) = values
  ok = np.isfinite(lam) & ((lam == 0) | (lam >= LAM_MIN))
  if not ok.all() or lam.max(initial=0) > 2 * MAX_ROWS or (
      lam.size > MAX_ENTRIES):
    return None
  table = poisson_table(lam)
  return table if _fits(table) else None


def binomial_plan(n: Any, p: Any) -> np.ndarray | None:
  """The table ``bs.random.binomial(n, p)`` draws from, or None (as
  :func:`poisson_plan`, with the mean ``n * min(p, 1 - p)`` for the rate;
  ``n`` that are not integers run the exact loop)."""
  values = _concrete(n, p)
  if values is None:
    return None
  n, p = values
  small = n * np.minimum(p, 1 - p)
  ok = (np.isfinite(n) & (n >= 0) & (n == np.round(n)) & (p >= 0) & (p <= 1)
        & ((small == 0) | (small >= LAM_MIN)))
  if not ok.all() or np.broadcast(n, p).size > MAX_ENTRIES:
    return None
  if _binomial_top(n, p) > 2 * MAX_ROWS:  # not built: too many rows anyway
    return None
  table = binomial_table(n, p)
  return table if _fits(table) else None


# ----------------------------------------------------------------------------
# The guide: an indexed search of one table (host-built, int32)
#
# A draw ``x = y + 2**30`` in ``[0, 2**31)`` is at distance ``d`` from the
# nearer end; ``z = y ^ (2**30 - 1)`` is ``-(d + 1)`` below the middle and
# ``d`` above, and the bucket is float32(z)'s sign, exponent and top
# GUIDE_BITS mantissa bits (a logical shift): 2**GUIDE_BITS buckets per
# octave of ``d``, as fine as one draw near either end, where the tail rows
# crowd (``P(X > k)`` of a few ``2**-31``), and ``d / 2**GUIDE_BITS`` wide in
# the middle, where the rows are ``P(X = k)`` apart. float32 rounds ``z`` to
# 24 bits, but monotonically, so a bucket is an interval of draws; the host
# finds them (:func:`buckets`) and each draw's place in its bucket with the
# same code on NumPy (:func:`_bucket`). The offset, ``z`` less the bucket's
# float with the rest of the mantissa cleared, decreases with ``x`` within a
# bucket (``|offset| <= 2**23``). A bucket's entry is ``rel * 128 + base``:
# its count at its first draw (``base`` <= 127) and at most one threshold
# inside it, as the offset it has there (``rel``; ``-2**24``: none), so
# ``count = (e & 127) + (e >= offset * 128)``. Where a bucket holds more
# thresholds, the others stay compares of every element (``extra``; counts
# add over any split of the rows): none for the tables of poisson(lam) and
# binomial this module builds (tests/test_random_counts.py). The entries
# are int32 ``[2**14 + 157 * 2**GUIDE_BITS + 1]`` (~100 KiB, ~3,200 of
# them live), one table size for every row count: one compiled program.

GUIDE_BITS = 6
GUIDE_MIN_ROWS = 16  # fewer rows: the compares of counts cost less
_BASE = 127  # an entry: rel * 128 + base (base: the count, <= 127)
_NO_REL = -(1 << 24)  # no threshold in the bucket: no offset is <= it


def _bucket(y, xp=jnp):
  """``(index, offset)`` of int32 draws ``y`` in ``[-2**30, 2**30)``, on
  jax.numpy or NumPy (the host's tables): the bucket, and the draw's
  position in it (decreasing in ``y`` within a bucket; ``|offset| <=
  2**23``)."""
  i32 = np.int32
  # -(1 + the distance to the lower end) below the middle, the distance to
  # the upper end above
  z = y ^ i32(0x3FFFFFFF)
  mask = i32(-(1 << (23 - GUIDE_BITS)))
  if xp is np:
    f = z.astype(np.float32).view(np.int32)
    with np.errstate(invalid="ignore"):  # y past the range: 2**31
      lo = (f & mask).view(np.float32).astype(np.int32)
    index = (f.view(np.uint32) >> np.uint32(23 - GUIDE_BITS)).view(np.int32)
  else:
    f = jax.lax.bitcast_convert_type(z.astype(jnp.float32), jnp.int32)
    lo = jax.lax.bitcast_convert_type(f & mask, jnp.float32).astype(jnp.int32)
    index = jax.lax.shift_right_logical(f, i32(23 - GUIDE_BITS))
  return index, z - lo


# rows -> guide(rows); ("device", rows) -> on the device; None -> buckets()
_GUIDES = Cache(maxsize=512)


def buckets() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Every bucket that a draw ``x = y + 2**30`` in ``[0, 2**31)`` falls
  in: ``(index, xlo, xhi)`` (int64), the draws ``xlo .. xhi``. The index
  increases with ``x`` below the middle and decreases above, so each
  value's first draw is bisected."""
  if None not in _GUIDES:
    _GUIDES[None] = _buckets()
  return _GUIDES[None]


def _buckets():
  out = []
  for a0, b0, sign in ((0, 1 << 30, 1), (1 << 30, 1 << 31, -1)):
    ends = _bucket(np.array([a0, b0 - 1], np.int64) - (1 << 30), np)[0]
    want = np.arange(ends.min(), ends.max() + 1, dtype=np.int64)
    a, b = np.full_like(want, a0), np.full_like(want, b0)
    for _ in range(32):  # the first x whose index is past want (by sign)
      mid = (a + b) // 2
      index = _bucket((mid - (1 << 30)).astype(np.int32), np)[0]
      past = (index - want) * sign >= 0 if sign > 0 else index <= want
      a, b = np.where(past, a, mid + 1), np.where(past, mid, b)
    first = a if sign > 0 else a[::-1]  # increasing x
    values = want if sign > 0 else want[::-1]
    last = np.append(first[1:], b0) - 1
    live = last >= first
    out.append((values[live], first[live], last[live]))
  return tuple(np.concatenate(c) for c in zip(*out))


def guide(rows: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """``(entries, extra)`` of the threshold rows ``rows`` (stored int32, one
  table for every element; at most 127 rows): ``entries`` int32 for
  :func:`guided`, ``extra`` the stored rows it leaves to compares.
  ``guided(bits, *guide(rows)) == counts(bits, rows)`` for every draw
  (tests/test_random_counts.py checks every bucket's edges)."""
  if rows not in _GUIDES:
    _GUIDES[rows] = _guide(rows)
  return _GUIDES[rows]


def _guide(rows):
  stored = np.asarray(rows, np.int64)
  if len(stored) > _BASE:
    raise ValueError(f"guide: at most {_BASE} rows (got {len(stored)}).")
  t = stored + _SHIFT  # count(x) = #{k : x >= t[k]}, x in [0, 2**31)
  index, xlo, xhi = buckets()
  # thresholds inside a bucket past its first: compares of every element
  first = np.searchsorted(t, xlo, "right")
  stop = np.searchsorted(t, xhi, "right")
  extra = np.zeros(len(t), bool)
  for f, e in zip(first[stop - first > 1], stop[stop - first > 1]):
    extra[f + 1:e] = True
  kept = t[~extra]
  first = np.searchsorted(kept, xlo, "right")
  inside = np.searchsorted(kept, xhi, "right") > first
  one = kept[np.minimum(first, len(kept) - 1)] if len(kept) else xlo
  # the offset decreases with x in a bucket: x >= one iff offset <= its
  at, rel = _bucket((one - (1 << 30)).astype(np.int32), np)
  assert (at[inside] == index[inside]).all()
  rel = np.where(inside, rel.astype(np.int64), _NO_REL)
  entries = np.zeros(int(index.max()) + 1, np.int64)
  entries[index] = rel * (_BASE + 1) + first
  return entries.astype(np.int32), stored[extra].astype(np.int32)


def guided(bits: jax.Array, entries: Any, extra: Sequence[Any] = ()
           ) -> jax.Array:
  """int32 counts of 31 of the ``bits`` (uint32) by the guide ``entries``
  and the compares of rows ``extra`` (:func:`guide`): :func:`counts`'s."""
  out = _lookup(bits, entries)
  return out + counts(bits, list(extra)) if len(extra) else out


def guided_at(bits: jax.Array, entries: Any, at: jax.Array) -> jax.Array:
  """:func:`guided` with a guide per element: ``entries`` holds guides
  side by side (flat), element ``i``'s from ``at[i]`` on (each guide with
  no ``extra`` rows). One gather whatever guide an element reads."""
  return _lookup(bits, entries, at)


def _lookup(bits: jax.Array, entries: Any, at: Any = None) -> jax.Array:
  """The guide's count of 31 of the ``bits``: the draw's bucket, one
  gather of its entry (from ``at`` on), one compare."""
  y = jax.lax.bitcast_convert_type(bits, jnp.int32) >> 1
  index, offset = _bucket(y)
  if at is not None:
    index = at + index
  # one gather, used twice (a third use splits it from the hash's fusion)
  e = jnp.asarray(entries).at[index].get(mode="promise_in_bounds")
  return (e & np.int32(_BASE)) + (e >= (offset << np.int32(7))).astype(
      jnp.int32)


# ----------------------------------------------------------------------------
# The draw


def sample(key: jax.Array, table: jax.Array, *, shape: tuple[int, ...],
           dtype: Any) -> jax.Array:
  """Counts of shape ``shape`` from ``table`` ``[*param_shape, K]`` (the
  rows last, as the draw path's event axes; ``param_shape`` broadcasts
  against ``shape``): the rows that 31 bits of the block key exceed."""
  if table.shape[-1] == 0:
    return jnp.zeros(shape, dtype)
  rows = [table[..., k] for k in range(table.shape[-1])]
  if len(shape) == 1 and table.ndim == 1:
    # One table for every element: the compares join the hash on the
    # padded lanes (bits of a block key are a function of the element's
    # counter: the first n lanes are the draw).
    return blocks.lanes(
        lambda m: counts(jax.random.bits(key, (m,), jnp.uint32), rows),
        shape[0], jax.random.key_data(key)[0]).astype(dtype)
  return counts(jax.random.bits(key, shape, jnp.uint32), rows).astype(dtype)


def guide_plan(table: Any) -> tuple[np.ndarray, np.ndarray] | None:
  """:func:`guide` of ``table`` (as jax arrays) where it draws for less
  than the compares of every row: one table (1-D) known at trace time, of
  GUIDE_MIN_ROWS to 127 rows; else None."""
  if compat.is_traced(table) or np.ndim(table) != 1 or not (
      GUIDE_MIN_ROWS <= len(table) <= _BASE):
    return None
  rows = tuple(np.asarray(table).tolist())
  on_device = _GUIDES.get(("device", rows))
  if on_device is None:  # an eager draw copies ~100 KiB of entries once
    with jax.ensure_compile_time_eval():
      on_device = _GUIDES["device", rows] = tuple(
          jnp.asarray(a) for a in guide(rows))
  return on_device


def sample_guided(key: jax.Array, entries: jax.Array, extra: jax.Array, *,
                  shape: tuple[int, ...], dtype: Any) -> jax.Array:
  """:func:`sample` of one table by its guide ``entries`` and rows
  ``extra`` (:func:`guide`): the same counts."""
  rows = [extra[k] for k in range(extra.shape[-1])]
  fn = lambda s: guided(jax.random.bits(key, s, jnp.uint32),  # noqa: E731
                        entries, rows)
  if len(shape) == 1:  # the search joins the hash on padded lanes
    return blocks.lanes(lambda m: fn((m,)), shape[0],
                        jax.random.key_data(key)[0]).astype(dtype)
  return fn(shape).astype(dtype)


def counts(bits: jax.Array, rows: Sequence[jax.Array]) -> jax.Array:
  """int32 counts: how many of the thresholds ``rows`` (each broadcasting
  against ``bits``) 31 of the ``bits`` (uint32) exceed."""
  # An arithmetic shift: a value LLVM cannot prove >= 0, so it compares
  # signed (vpcmpgtd) rather than unsigned (a mask compare and a move).
  x = jax.lax.bitcast_convert_type(bits, jnp.int32) >> 1
  rows = [(x > row).astype(jnp.int32) for row in rows]
  while len(rows) > 1:  # a tree: the adds need not wait on each other
    rows = [sum(rows[i:i + 2]) for i in range(0, len(rows), 2)]
  return rows[0]
