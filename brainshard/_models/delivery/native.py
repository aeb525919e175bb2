"""The optional native push kernel: one loop, compiled by numba, that XLA
calls through ``jax.ffi`` with no Python at run time (``pip install
brainshard[native]``; without numba the XLA kernel of ``push.py`` runs).

The loop is the definition of delivery written out: for each presynaptic
neuron that fired, in increasing global id, for each synapse of its CSR row
in index order, ``buf[receptor, (t + delay) % L, post] += weight``. Every
target therefore adds its inputs in the same order as the XLA kernel (by
presynaptic id, then CSR order), on any number of devices: the ring buffer
is bit for bit the XLA kernel's. It streams each row once (6-9 bytes a
synapse; 6 where every synapse has the same delay, which is then passed
as a scalar) into a buffer that sits in cache: 1.3-2 ns a synaptic event
on this project's 2-core CPU (Brunel's one delay: ~1.1), as fast as the
same loop in C, 2-3x faster than XLA's scatter fed by slices
(docs/models_delivery.md has the figures).

This module is the JAX side: which calls the kernel takes, the FFI calls,
their tangent and their type inside ``shard_map``. The numba side (the
loops and the C-callable handlers XLA calls) is :mod:`.native_loop`,
imported on first use. Nothing is compiled at install: numba compiles the
loops on first use and keeps them on disk (~3 s once per machine; then
~0.3 s a process for the handlers).

Example (the XLA kernel's numbers where numba is missing):
  >>> import jax.numpy as jnp
  >>> from brainshard._models.delivery import native
  >>> from brainshard._models.delivery.push import deliver
  >>> from brainshard._models.delivery.from_arrays import index_from_arrays
  >>> idx = index_from_arrays([0, 0, 1], [1, 1, 0], [0.5, 0.25, -1.0],
  ...                         [1, 2, 1], n=2)
  >>> buf = deliver(jnp.zeros((1, 3, 2)), jnp.array([True, False]), 0, idx)
  >>> buf[0].tolist()
  [[0.0, 0.0], [0.0, 0.5], [0.0, 0.25]]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading
import warnings
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp

from brainshard._transforms.control import cast_varying, vma_tree
from brainshard._models.delivery.index import SynapseIndex

__all__ = ["available", "loads", "supports", "push", "clear"]

# Index field dtypes the loop reads (index.field_dtypes' and a few more).
_INTS = ("uint8", "int8", "uint16", "int16", "int32", "uint32")

_LOCK = threading.Lock()
_TARGETS: dict = {}    # kind -> FFI target name; "loaded" -> None or error
_HANDLERS: list = []   # the cfuncs, kept alive while XLA holds them


def available() -> bool:
  """Whether numba is installed (the ``native`` extra) and the kernel is not
  switched off with ``BRAINSHARD_NATIVE_DELIVERY=0``."""
  if os.environ.get("BRAINSHARD_NATIVE_DELIVERY", "1") == "0":
    return False
  return importlib.util.find_spec("numba") is not None


def loads() -> bool:
  """Whether the numba side imports (tried once per process; numba's own
  start-up, ~2 s). A numba that is installed but does not work (e.g. built
  for another NumPy) is reported once and leaves ``kernel='auto'`` on the
  XLA kernel; ``kernel='native'`` then raises its error."""
  with _LOCK:
    if "loaded" not in _TARGETS:
      try:
        from brainshard._models.delivery import native_loop  # noqa: F401
        _TARGETS["loaded"] = None
      except Exception as e:  # noqa: BLE001 - any failure means "use XLA"
        _TARGETS["loaded"] = e
        warnings.warn(f"brainshard: numba is installed but the native "
                      f"delivery kernel did not load ({type(e).__name__}: "
                      f"{e}); delivering with the XLA kernel.",
                      RuntimeWarning, stacklevel=3)
    return _TARGETS["loaded"] is None


def supports(buf: jax.Array, index: SynapseIndex) -> bool:
  """Whether :func:`push` takes this buffer and index: float32 buffer and
  weights, int32 ``indptr``, and integer fields the loop reads."""
  fields = [index.post, index.delay] + (
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
  the buffer and the weights, so ``jvp`` and ``vmap`` work."""
  return _push(tangent, buf, fired, jnp.asarray(t, jnp.int32), index)


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _push(tangent, buf, fired, t, index):
  rec = index.receptor
  # One delay for all (min_delay == max_delay: bounds the index keeps
  # exact): a scalar of the field's dtype, and the loop reads no delay field.
  delay = index.delay
  if index.min_delay == index.max_delay:
    delay = jnp.asarray(index.min_delay, delay.dtype)
  args = (buf, fired, t, index.indptr, index.post, index.weight, delay,
          *([] if rec is None else [rec]))
  return _call("push", args)


@_push.defjvp
def _push_jvp(tangent, primals, tangents):
  buf, fired, t, index = primals
  dbuf, dindex = tangents[0], tangents[3]
  moved = dataclasses.replace(index, weight=dindex.weight)
  return _push(tangent, buf, fired, t, index), tangent(dbuf, fired, t, moved)


def clear(buf: jax.Array, start, count: int) -> jax.Array:
  """``buf [R, L, n_local]`` with the ``count`` slots from ``start % L``
  on set to 0, in place. XLA's own ``dynamic_update_slice`` would do, but
  beside :func:`push` in a loop body XLA then copies the whole buffer
  twice a step (the custom call's in-place result and the loop's carry are
  not proven to share a buffer); a chain of the two native calls copies
  nothing."""
  return _call("clear", (buf, jnp.asarray(start, jnp.int32),
                         jnp.asarray(count, jnp.int32)))


def _call(kind: str, args: tuple) -> jax.Array:
  """The FFI call of loop ``kind`` on ``args``, updating ``args[0]`` in
  place, typed to vary over every mesh axis its arguments vary over
  inside ``shard_map`` (an FFI result is typed as varying over none)."""
  buf = args[0]
  call = jax.ffi.ffi_call(_target(kind), jax.ShapeDtypeStruct(
      buf.shape, buf.dtype), input_output_aliases={0: 0},
      vmap_method="sequential")
  axes = frozenset().union(*(vma_tree(jax.typeof(a)) for a in args))
  return cast_varying(call(*args), axes)


def _target(kind: str) -> str:
  """The FFI target of loop ``kind``, its handler compiled and registered
  on first use."""
  with _LOCK:
    if kind not in _TARGETS:
      from brainshard._models.delivery import native_loop
      handler = native_loop.HANDLERS[kind]
      name = f"brainshard_delivery_{kind}"
      jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler.address),
                                  platform="cpu")
      _HANDLERS.append(handler)
      _TARGETS[kind] = name
    return _TARGETS[kind]
