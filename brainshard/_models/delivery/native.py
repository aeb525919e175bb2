"""The optional native push kernel: one loop, compiled by numba, that XLA
calls through ``jax.ffi`` with no Python at run time (``pip install
brainshard[native]``; without numba the XLA kernel of ``push.py`` runs).

The loop is the definition of delivery written out: for each presynaptic
neuron that fired, in increasing global id, for each synapse of its CSR row
in index order, ``buf[receptor, (t + delay) % L, post] += weight``. Every
target therefore adds its inputs in the same order as the XLA kernel (by
presynaptic id, then CSR order), on any number of devices: the ring buffer
is bit for bit the XLA kernel's. It streams each row once (6-9 bytes a
synapse) into a buffer that sits in cache, about 1 ns a synaptic event on
this project's 2-core CPU, 2-3x faster than XLA's scatter fed by gathers
and slices (docs/models_delivery.md has the figures).

How XLA calls it: numba compiles a C-callable ``XLA_FFI_Handler`` (a
``cfunc`` of ``int64(int64)``: the call frame's address in, a null error
out) that reads the call frame's buffers by their addresses. The frame's
layout is XLA's FFI C API (``xla/ffi/api/c_api.h``, stable across minor
versions: fields are only appended), mirrored in the offsets below; the
handler answers XLA's metadata query with the API version of the jaxlib it
runs under, read from the header jaxlib ships. One handler is compiled per
combination of index field dtypes, once per process (~1 s).

Example (skipped where numba is missing):
  >>> import jax.numpy as jnp
  >>> from brainshard._models.delivery import native
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> idx = index_from_arrays([0, 0, 1], [1, 1, 0], [0.5, 0.25, -1.0],
  ...                         [1, 2, 1], n=2)
  >>> buf = jnp.zeros((1, 3, 2))
  >>> if native.available():
  ...   buf = native.push(buf, jnp.array([True, False]), 0, idx, None)
  ... else:
  ...   buf = buf.at[0, 1, 1].set(0.5).at[0, 2, 1].set(0.25)
  >>> buf[0].tolist()
  [[0.0, 0.0], [0.0, 0.5], [0.0, 0.25]]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import threading
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._transforms.control import cast_varying, vma_tree
from brainshard._models.delivery.index import SynapseIndex

__all__ = ["available", "supports", "push", "clear"]

# The kernel reads these index field dtypes (the narrow ones of
# index.field_dtypes and the small signed ones tests use).
_INTS = ("uint8", "int8", "uint16", "int16", "int32", "uint32")

# XLA_FFI_CallFrame as 8-byte words: [1] extension_start, [4] stage,
# [9] args.args (void**), [14] rets.rets (void**). XLA_FFI_Buffer: [2]
# dtype, [3] data, [4] rank, [5] dims. XLA_FFI_Extension_Base: [1] type,
# [2] next; the metadata extension's [3] points at XLA_FFI_Metadata, whose
# int32s [6], [7], [8] are api_version.major, .minor and traits.
_ARGS, _RETS, _EXECUTE, _METADATA = 9, 14, 3, 1

_LOCK = threading.Lock()
_TARGETS: dict = {}    # (post, delay, receptor) dtype names -> target name
_HANDLERS: list = []   # compiled cfuncs, kept alive while XLA holds them


def available() -> bool:
  """Whether numba is installed (the ``native`` extra) and the kernel is not
  switched off with ``BRAINSHARD_NATIVE_DELIVERY=0``."""
  if os.environ.get("BRAINSHARD_NATIVE_DELIVERY", "1") == "0":
    return False
  return importlib.util.find_spec("numba") is not None


def supports(buf: jax.Array, index: SynapseIndex) -> bool:
  """Whether :func:`push` takes this buffer and index: a float32 buffer and
  integer fields of the dtypes the kernel is compiled for."""
  fields = [index.post, index.delay, index.indptr] + (
      [] if index.receptor is None else [index.receptor])
  return (buf.dtype == jnp.float32 and index.weight.dtype == jnp.float32
          and index.indptr.dtype == jnp.int32
          and all(jnp.dtype(a.dtype).name in _INTS for a in fields))


def push(buf: jax.Array, fired: jax.Array, t, index: SynapseIndex,
         tangent: Callable) -> jax.Array:
  """``buf`` (float32 ``[R, L, n_local]``) plus the synapses of the neurons
  that fired (``fired`` bool ``[n_pre]``) in step ``t``: the same additions
  in the same order as ``push.py``'s XLA kernel. CPU only; per shard inside
  ``bs.shard_map``. ``tangent(buf, fired, t, index)``, a kernel JAX can
  differentiate (the XLA one), gives the tangent: delivery is linear in
  the buffer and the weights, so ``jvp``, ``grad`` and ``vmap`` work."""
  return _push(tangent, buf, fired, jnp.asarray(t, jnp.int32), index)


def clear(buf: jax.Array, start, count) -> jax.Array:
  """``buf [R, L, n_local]`` with the ``count`` slots from ``start % L``
  on set to 0, in place. XLA's own ``dynamic_update_slice`` would do, but
  beside :func:`push` in a loop body XLA then copies the whole buffer
  twice a step (the custom call's in-place output and the loop's carry are
  not proven to share a buffer); a chain of the two native calls copies
  nothing."""
  call = jax.ffi.ffi_call(
      _target(("clear",)), jax.ShapeDtypeStruct(buf.shape, buf.dtype),
      input_output_aliases={0: 0}, vmap_method="sequential")
  args = (buf, jnp.asarray(start, jnp.int32), jnp.asarray(count, jnp.int32))
  return _varying_as(call(*args), args)


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _push(tangent, buf, fired, t, index):
  rec = index.receptor
  key = (index.post.dtype.name, index.delay.dtype.name,
         None if rec is None else rec.dtype.name)
  call = jax.ffi.ffi_call(
      _target(key), jax.ShapeDtypeStruct(buf.shape, buf.dtype),
      input_output_aliases={0: 0}, vmap_method="sequential")
  args = (buf, fired, t, index.indptr, index.post, index.weight,
          index.delay, *([] if rec is None else [rec]))
  return _varying_as(call(*args), args)


def _varying_as(out, args):
  """``out`` varying over every mesh axis its arguments vary over inside
  ``shard_map`` (an FFI call's result is typed as varying over none)."""
  axes = frozenset().union(*(vma_tree(jax.typeof(a)) for a in args))
  return cast_varying(out, axes)


@_push.defjvp
def _push_jvp(tangent, primals, tangents):
  buf, fired, t, index = primals
  dbuf, dindex = tangents[0], tangents[3]
  moved = dataclasses.replace(index, weight=dindex.weight)
  return _push(tangent, buf, fired, t, index), tangent(dbuf, fired, t, moved)


def _target(key: tuple) -> str:
  """The FFI target of ``key`` (``("clear",)`` or the push kernel's field
  dtypes), compiled and registered on first use."""
  with _LOCK:
    if key not in _TARGETS:
      handler = _compile_clear() if key == ("clear",) else _compile_push(
          *key)
      name = "brainshard_" + ("clear" if key == ("clear",) else "push_"
                              + "_".join(k or "none" for k in key))
      jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler.address),
                                  platform="cpu")
      _HANDLERS.append(handler)
      _TARGETS[key] = name
    return _TARGETS[key]


def _api_version() -> tuple[int, int]:
  """The XLA FFI API version of the running jaxlib (its bundled header);
  0.1, which every supported jaxlib accepts, if the header is missing."""
  import jaxlib
  header = os.path.join(os.path.dirname(jaxlib.__file__), "include", "xla",
                        "ffi", "api", "c_api.h")
  try:
    with open(header) as f:
      text = f.read()
  except OSError:
    return 0, 1
  got = [re.search(rf"#define XLA_FFI_API_{k}\s+(\d+)", text)
         for k in ("MAJOR", "MINOR")]
  return (int(got[0][1]), int(got[1][1])) if all(got) else (0, 1)


def _pointer(to):
  """A numba intrinsic: an address (int64) as a pointer to ``to``."""
  from numba import types
  from numba.extending import intrinsic

  @intrinsic
  def at(typingctx, addr):
    sig = types.CPointer(to)(types.int64)

    def codegen(context, builder, signature, args):
      return builder.inttoptr(args[0], context.get_value_type(
          signature.return_type))
    return sig, codegen
  return at


def _handler(kernel):
  """A C-callable ``XLA_FFI_Handler`` (a numba ``cfunc``) that answers
  XLA's metadata query and, when XLA executes it, calls ``kernel(frame)``
  (an njit function of the call frame as int64 words)."""
  import numba
  from numba import types
  word, int32 = _pointer(types.int64), _pointer(types.int32)
  major, minor = _api_version()

  @numba.cfunc(types.int64(types.int64))
  def handler(address):
    frame = numba.carray(word(address), 22)
    ext = frame[1]
    while ext != 0:  # XLA asks for the handler's metadata once
      e = numba.carray(word(ext), 4)
      if (e[1] & 0xFFFFFFFF) == _METADATA:
        meta = numba.carray(int32(e[3]), 9)
        meta[6], meta[7], meta[8] = major, minor, 0
        return 0
      ext = e[2]
    if (frame[4] & 0xFFFFFFFF) == _EXECUTE:
      kernel(frame)
    return 0
  return handler


def _buffer():
  """njit ``buffer(frame, table, k) -> (data, dims)``: the addresses of
  argument (``table = _ARGS``) or result (``_RETS``) ``k``."""
  import numba
  from numba import types
  word = _pointer(types.int64)

  @numba.njit(inline="always")
  def buffer(frame, table, k):
    b = numba.carray(word(numba.carray(word(frame[table]), k + 1)[k]), 6)
    return b[3], b[5]
  return buffer


def _compile_push(post_t: str, delay_t: str, rec_t: str | None):
  """The handler of :func:`push` for these field dtypes. Arguments: buf,
  fired, t, indptr, post, weight, delay[, receptor]; result 0: buf."""
  import numba
  from numba import types
  word, int32, f32, flag = (_pointer(t) for t in (
      types.int64, types.int32, types.float32, types.uint8))
  post_p, delay_p = _pointer(getattr(types, post_t)), _pointer(
      getattr(types, delay_t))
  rec_p = _pointer(getattr(types, rec_t or "uint8"))
  has_rec = rec_t is not None
  carray, buffer, rows = numba.carray, _buffer(), numba.njit(_rows(has_rec))

  @numba.njit
  def kernel(frame):
    out_at, dims_at = buffer(frame, _RETS, 0)
    dims = carray(word(dims_at), 3)
    n_rec, length, n_local = dims[0], dims[1], dims[2]
    fired_at, fdims_at = buffer(frame, _ARGS, 1)
    n_pre = carray(word(fdims_at), 1)[0]
    cap = carray(word(buffer(frame, _ARGS, 4)[1]), 1)[0]
    t = carray(int32(buffer(frame, _ARGS, 2)[0]), 1)[0]
    rec_at = buffer(frame, _ARGS, 7)[0] if has_rec else frame[0]
    rows(carray(f32(out_at), n_rec * length * n_local),
         carray(flag(fired_at), n_pre),
         np.uint64(t % length), np.uint64(length), np.uint64(n_local),
         np.uint64(n_rec),
         carray(int32(buffer(frame, _ARGS, 3)[0]), n_pre + 1),
         carray(post_p(buffer(frame, _ARGS, 4)[0]), cap),
         carray(f32(buffer(frame, _ARGS, 5)[0]), cap),
         carray(delay_p(buffer(frame, _ARGS, 6)[0]), cap),
         carray(rec_p(rec_at), cap if has_rec else 0))
  return _handler(kernel)


def _compile_clear():
  """The handler of :func:`clear`. Arguments: buf, start, count; result 0:
  buf."""
  import numba
  from numba import types
  word, int32, f32 = (_pointer(t) for t in (types.int64, types.int32,
                                              types.float32))
  carray, buffer = numba.carray, _buffer()

  @numba.njit
  def kernel(frame):
    out_at, dims_at = buffer(frame, _RETS, 0)
    dims = carray(word(dims_at), 3)
    n_rec, length, n_local = dims[0], dims[1], dims[2]
    out = carray(f32(out_at), n_rec * length * n_local)
    start = carray(int32(buffer(frame, _ARGS, 1)[0]), 1)[0] % length
    count = carray(int32(buffer(frame, _ARGS, 2)[0]), 1)[0]
    for r in range(n_rec):
      for c in range(min(count, length)):
        slot = (start + c) % length
        base = (r * length + slot) * n_local
        out[base:base + n_local] = 0.0
  return _handler(kernel)


def _rows(has_rec: bool):
  """The loop, for an index with or without a receptor field (a constant
  to numba: the other branch is not compiled). Indices are unsigned, so
  numba emits no negative-index checks and the loop runs as fast as the
  same loop in C. Targets and receptors out of range are dropped, as by
  the XLA kernel's ``mode='drop'``."""
  def rows(out, fired, t, length, n_local, n_rec, indptr, post, weight,
           delay, rec):
    plane = length * n_local
    for j in range(fired.shape[0]):
      if fired[j]:
        for k in range(np.uint64(indptr[j]), np.uint64(indptr[j + 1])):
          p = np.uint64(post[k])
          slot = t + np.uint64(delay[k])
          while slot >= length:
            slot -= length
          if has_rec:
            r = np.uint64(rec[k])
            if p < n_local and r < n_rec:
              out[r * plane + slot * n_local + p] += weight[k]
          elif p < n_local:
            out[slot * n_local + p] += weight[k]
  return rows
