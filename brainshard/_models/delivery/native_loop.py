"""The numba side of the native push kernel (imported only where numba is
installed, by :mod:`.native`): the delivery loop and the two XLA FFI
handlers that call it, reading XLA's call frame by address.

The loops are compiled once per machine (numba's on-disk cache; the first
process pays ~5-10 s of CPU, later ones ~0.3 s). One loop serves every
index dtype: an element is read through :func:`_load`, which switches on
the array's XLA dtype code; the switch does not depend on the element, so
LLVM hoists it out of the loop
(measured: 1.12 vs 1.10 ns an event for a loop specialised to uint16 and
uint8, the same within noise).

The frame's layout is XLA's FFI C API (``xla/ffi/api/c_api.h``; its minor
versions only append fields), as 8-byte words:

- ``XLA_FFI_CallFrame``: [1] extension_start, [4] stage, [9] args.args
  (``void**``), [14] rets.rets (``void**``);
- ``XLA_FFI_Buffer``: [2] dtype, [3] data, [4] rank, [5] dims;
- ``XLA_FFI_Extension_Base``: [1] type, [2] next; the metadata extension's
  [3] points at ``XLA_FFI_Metadata``, whose int32s [6], [7] and [8] are
  ``api_version.major``, ``.minor`` and ``traits``.

>>> import numpy as np
>>> _CODES[np.dtype(np.uint16)], _CODES[np.dtype(np.float32)]
(7, 11)
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

__all__ = ["HANDLERS", "push_handler", "clear_handler"]

ARGS, RETS, EXECUTE, METADATA = 9, 14, 3, 1

# XLA_FFI_DataType codes of the integer dtypes an index field may have.
_CODES = {np.dtype(t): c for t, c in (
    (np.int8, 2), (np.int16, 3), (np.int32, 4), (np.uint8, 6),
    (np.uint16, 7), (np.uint32, 8), (np.float32, 11))}
_S8, _S16, _S32, _U8, _U16, _U32 = 2, 3, 4, 6, 7, 8
_NO_ARRAY = 0  # the receptor code of an index without a receptor field
# Bytes of each field of the next fired neuron's row asked for while the
# current row is delivered: a row starts at an unpredictable address (its
# first lines are a miss each, ~0.1 ns an event of Brunel's 1,250-synapse
# rows; the hardware prefetcher takes over within the row).
_AHEAD_BYTES = 1024


def _pointer(to):
  """A numba intrinsic: an address (int64) as a pointer to ``to``."""
  @intrinsic
  def at(typingctx, addr):
    sig = types.CPointer(to)(types.int64)

    def codegen(context, builder, signature, args):
      return builder.inttoptr(args[0], context.get_value_type(
          signature.return_type))
    return sig, codegen
  return at


_word, _i32, _f32 = (_pointer(t) for t in (types.int64, types.int32,
                                             types.float32))
_s8, _s16, _u8, _u16, _u32 = (_pointer(t) for t in (
    types.int8, types.int16, types.uint8, types.uint16, types.uint32))


@intrinsic
def _prefetch_array(typingctx, arr, k):
  """LLVM's prefetch (read, keep in all caches) of ``arr[k]``: a hint,
  never a fault, even past the end."""
  sig = types.void(arr, k)

  def codegen(context, builder, signature, args):
    data = context.make_array(signature.args[0])(context, builder,
                                                 args[0]).data
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = builder.module.declare_intrinsic(
        "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(),
                                              [i8p, i32, i32, i32]))
    builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), i8p),
                      ir.Constant(i32, 0), ir.Constant(i32, 3),
                      ir.Constant(i32, 1)])
    return context.get_dummy_value()
  return sig, codegen


@numba.njit(cache=True)
def _buffer(frame, table, k):
  """(data, dims, dtype code) of argument (``table = ARGS``) or result
  (``RETS``) ``k``."""
  b = numba.carray(_word(numba.carray(_word(frame[table]), k + 1)[k]), 6)
  return b[3], b[5], b[2] & 0xFFFFFFFF


@numba.njit(cache=True)
def _Loaded(at, code):  # noqa: N802 - a record, spelled as its type
  """An integer array of any dtype, read element by element through
  :func:`_load` (where a field's dtype has no loop of its own)."""
  return (np.int64(at), np.int64(code))


@numba.njit(cache=True)
def _Zeros():  # noqa: N802
  """No receptor field: every synapse on receptor 0."""
  return ()


def _at(x, k):
  """Element ``k`` of ``x`` (an array, a :func:`_Loaded`, a
  :func:`_Zeros`) as uint64; compiled by numba only (its overload)."""
  raise NotImplementedError("numba only")


@overload(_at)
def _at_numba(x, k):
  if isinstance(x, types.Array):
    return lambda x, k: np.uint64(x[k])
  if isinstance(x, types.BaseTuple) and len(x.types) == 2:
    return lambda x, k: _load(x[0], x[1], k)
  return lambda x, k: np.uint64(0)


def _prefetch(x, k, stop):
  """Asks for the cache lines of ``x[k:stop]`` (at most ``_AHEAD_BYTES``)
  ahead of their use; nothing for a :func:`_Loaded` / :func:`_Zeros`.
  Compiled by numba only (its overload)."""
  raise NotImplementedError("numba only")


@overload(_prefetch)
def _prefetch_numba(x, k, stop):
  if isinstance(x, types.Array):
    size = x.dtype.bitwidth // 8
    step, lines = 64 // size, _AHEAD_BYTES // 64

    def fetch(x, k, stop):
      for q in range(lines):
        at = k + np.uint64(q * step)
        if at >= stop:
          break
        _prefetch_array(x, at)
    return fetch
  return lambda x, k, stop: None


@numba.njit(cache=True)
def _load(at, code, k):
  """Element ``k`` of the integer array at address ``at`` (XLA dtype
  ``code``) as uint64; a negative value wraps past every bound, so the
  loop drops it."""
  if code == _U8:
    return np.uint64(_u8(at)[k])
  if code == _U16:
    return np.uint64(_u16(at)[k])
  if code == _S32:
    return np.uint64(np.int64(_i32(at)[k]))
  if code == _U32:
    return np.uint64(_u32(at)[k])
  if code == _S16:
    return np.uint64(np.int64(_s16(at)[k]))
  if code == _S8:
    return np.uint64(np.int64(_s8(at)[k]))
  return np.uint64(0)


@numba.njit(cache=True)
def _push(frame):
  """``buf[receptor, (t + delay) % L, post] += weight`` for the synapses of
  every fired neuron, in increasing presynaptic id, then CSR order.
  Arguments: buf, fired, t, indptr, post, weight, delay[, receptor];
  result 0: buf (the same memory)."""
  out_at, dims_at, _ = _buffer(frame, RETS, 0)
  dims = numba.carray(_word(dims_at), 3)
  n_rec, length = np.uint64(dims[0]), np.uint64(dims[1])
  n_local = np.uint64(dims[2])
  fired_at, fdims_at, _ = _buffer(frame, ARGS, 1)
  n_pre = numba.carray(_word(fdims_at), 1)[0]
  fired = numba.carray(_u8(fired_at), n_pre)
  t = np.uint64(numba.carray(_i32(_buffer(frame, ARGS, 2)[0]), 1)[0]
                % np.int64(length))
  indptr = numba.carray(_i32(_buffer(frame, ARGS, 3)[0]), n_pre + 1)
  post_at, post_dims, post_code = _buffer(frame, ARGS, 4)
  cap = numba.carray(_word(post_dims), 1)[0]
  weight = numba.carray(_f32(_buffer(frame, ARGS, 5)[0]), cap)
  delay_at, _, delay_code = _buffer(frame, ARGS, 6)
  # one delay for every synapse: a scalar (rank 0) of the field's dtype
  same = _rank(frame, ARGS, 6) == 0
  rec_at, rec_code = np.int64(0), _NO_ARRAY
  if frame[ARGS - 2] > 7:  # args.size: a receptor field was passed
    rec_at, _, rec_code = _buffer(frame, ARGS, 7)
  a = (_f32(out_at), fired, indptr, t, length, n_local, n_rec, weight, same)
  # The usual fields (index.field_dtypes: uint16 or int32 post, uint8
  # delay, no or uint8 receptor) get loops of their own types (4 loops,
  # ~2 s each to compile, once per machine); any other dtypes the loop
  # that reads through _load (measured 1.6x slower).
  if post_code == _U16 and rec_code in (_NO_ARRAY, _U8):
    _by_delay(a, numba.carray(_u16(post_at), cap), delay_at, delay_code,
              rec_at, rec_code, cap)
  elif post_code == _S32 and rec_code in (_NO_ARRAY, _U8):
    _by_delay(a, numba.carray(_i32(post_at), cap), delay_at, delay_code,
              rec_at, rec_code, cap)
  else:
    _rows(a, _Loaded(post_at, post_code), _Loaded(delay_at, delay_code),
          _Loaded(rec_at, rec_code))


@numba.njit(cache=True)
def _rank(frame, table, k):
  """The rank of argument (``table = ARGS``) or result ``k``."""
  b = numba.carray(_word(numba.carray(_word(frame[table]), k + 1)[k]), 6)
  return b[4]


@numba.njit(cache=True)
def _by_delay(a, post, delay_at, delay_code, rec_at, rec_code, cap):
  if delay_code == _U8:
    _by_receptor(a, post, numba.carray(_u8(delay_at), cap), rec_at,
                 rec_code, cap)
  else:
    _rows(a, post, _Loaded(delay_at, delay_code), _Loaded(rec_at, rec_code))


@numba.njit(cache=True)
def _by_receptor(a, post, delay, rec_at, rec_code, cap):
  if rec_code == _NO_ARRAY:
    _rows(a, post, delay, _Zeros())
  else:
    _rows(a, post, delay, numba.carray(_u8(rec_at), cap))


@numba.njit(cache=True)
def _rows(a, post, delay, rec):
  """The loop. ``post``, ``delay``, ``rec``: arrays of their own dtype, or
  a :class:`_Loaded` / :class:`_Zeros` read through :func:`_at`; ``same``
  (``a``'s last): one delay, ``delay``'s element 0, for every synapse.
  Indices are unsigned, so numba emits no negative-index checks (the loop
  then runs as fast as in C); targets and receptors out of range are
  dropped, as by the XLA kernel's ``mode='drop'``. While a row is
  delivered, the first lines of the next fired row are asked for
  (:func:`_prefetch`)."""
  out, fired, indptr, t, length, n_local, n_rec, weight, same = a
  plane = length * n_local
  n_pre = fired.shape[0]
  # one delay: the slot once a call (a delay is at most L, see below)
  slot0 = t + _at(delay, 0)
  if slot0 >= length:
    slot0 -= length
  j = _next(fired, 0)
  while j < n_pre:
    following = _next(fired, j + 1)
    if following < n_pre:
      lo, hi = np.uint64(indptr[following]), np.uint64(indptr[following + 1])
      _prefetch(weight, lo, hi)
      _prefetch(post, lo, hi)
      _prefetch(rec, lo, hi)
      if not same:
        _prefetch(delay, lo, hi)
    lo, hi = np.uint64(indptr[j]), np.uint64(indptr[j + 1])
    if same and slot0 < length:
      for k in range(lo, hi):
        p = _at(post, k)
        r = _at(rec, k)
        if p < n_local and r < n_rec:
          out[r * plane + slot0 * n_local + p] += weight[k]
    elif not same:
      for k in range(lo, hi):
        p = _at(post, k)
        slot = t + _at(delay, k)
        # One subtraction, not a loop: a conditional move, where a loop's
        # branch mispredicts on mixed delays (the microcircuit: 1.9 -> 1.3
        # ns an event). A delay is at most L (ring_length), so slot < 2 L;
        # a longer one is dropped below.
        if slot >= length:
          slot -= length
        r = _at(rec, k)
        if p < n_local and r < n_rec and slot < length:
          out[r * plane + slot * n_local + p] += weight[k]
    j = following


@numba.njit(cache=True)
def _next(fired, j):
  """The first fired neuron from ``j`` on (``len(fired)``: none)."""
  n = fired.shape[0]
  while j < n and not fired[j]:
    j += 1
  return j


@numba.njit(cache=True)
def _clear(frame):
  """``count`` slots of ``buf [R, L, n]`` from ``start % L`` on set to 0.
  Arguments: buf, start, count; result 0: buf."""
  out_at, dims_at, _ = _buffer(frame, RETS, 0)
  dims = numba.carray(_word(dims_at), 3)
  n_rec, length, n_local = dims[0], dims[1], dims[2]
  out = numba.carray(_f32(out_at), n_rec * length * n_local)
  start = numba.carray(_i32(_buffer(frame, ARGS, 1)[0]), 1)[0] % length
  count = numba.carray(_i32(_buffer(frame, ARGS, 2)[0]), 1)[0]
  for r in range(n_rec):
    for c in range(min(count, length)):
      base = (r * length + (start + c) % length) * n_local
      out[base:base + n_local] = 0.0


@numba.njit(cache=True)
def _answer(frame):
  """Whether this call is XLA's metadata query, answered: the API version
  is the running XLA's own (``XLA_FFI_Api.api_version``, int32s [8] and
  [9] of the API struct; 0.1, which XLA accepts from any handler, if the
  frame has no API) and no traits."""
  ext = frame[1]
  while ext != 0:
    e = numba.carray(_word(ext), 4)
    if (e[1] & 0xFFFFFFFF) == METADATA:
      meta = numba.carray(_i32(e[3]), 9)
      if frame[2] != 0:
        api = numba.carray(_i32(frame[2]), 10)
        meta[6], meta[7] = api[8], api[9]
      else:
        meta[6], meta[7] = 0, 1
      meta[8] = 0
      return True
    ext = e[2]
  return False


@numba.cfunc(types.int64(types.int64), cache=True)
def push_handler(address):
  """The ``XLA_FFI_Handler`` of the push loop: the call frame's address in,
  a null error out."""
  frame = numba.carray(_word(address), 22)
  if not _answer(frame) and (frame[4] & 0xFFFFFFFF) == EXECUTE:
    _push(frame)
  return 0


@numba.cfunc(types.int64(types.int64), cache=True)
def clear_handler(address):
  """The ``XLA_FFI_Handler`` of the clear loop."""
  frame = numba.carray(_word(address), 22)
  if not _answer(frame) and (frame[4] & 0xFFFFFFFF) == EXECUTE:
    _clear(frame)
  return 0


HANDLERS = {"push": push_handler, "clear": clear_handler}
