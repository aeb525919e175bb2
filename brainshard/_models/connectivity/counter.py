"""Counter-based draws for connectivity: cheap to compile, mesh-independent.

Each generating unit (a target, a source, a block of slots) gets a 64-bit
key from threefry (``jax.random.fold_in`` of the projection's key with the
unit's id); its slot ``j`` of stream ``s`` is then a hash of ``(key, s, j,
attempt)``: three rounds of MurmurHash3's finaliser, a bijection of ``j``
for a fixed key, so a unit's slots never share a value. Per-slot threefry
would cost about a second of XLA compile per call site on a CPU; the hash
costs little to compile or run, and the value of a slot depends only on
its coordinates, never on a shard or a chunk size.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from brainshard._models.connectivity.counter import unit_keys, randint
  >>> keys = unit_keys(jax.random.key(0), jnp.arange(3))
  >>> r = randint(keys, 4, 0, jnp.full(3, 10))
  >>> r.shape, bool(((r >= 0) & (r < 10)).all())
  ((3, 4), True)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["unit_keys", "host_key", "host_fold_in", "bits", "sub_keys", "uniform", "normal", "randint", "mulhi"]

_U = jnp.uint32


def _fmix(h):
  h = h ^ (h >> 16)
  h = h * _U(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * _U(0xC2B2AE35)
  return h ^ (h >> 16)


def unit_keys(key: jax.Array, ids: jax.Array) -> jax.Array:
  """uint32 ``[len(ids), 2]``: the keys of units ``ids`` (threefry)."""
  keys = jax.vmap(jax.random.fold_in, (None, 0))(key, ids.astype(_U))
  return jax.random.key_data(keys)


def host_key(seed: int) -> np.ndarray:
  """uint32 ``[2]``: the data of ``jax.random.key(seed)`` (threefry), on
  the host: the high word only with x64 on, as JAX does."""
  hi = (seed >> 32) & 0xFFFFFFFF if jax.config.jax_enable_x64 else 0
  return np.array([hi, seed & 0xFFFFFFFF], np.uint32)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def host_fold_in(key: np.ndarray, data: Any) -> np.ndarray:
  """uint32 ``[*data.shape, 2]``: ``jax.random.fold_in`` of the key data
  ``key`` (threefry, uint32 ``[2]``) with each of ``data`` (uint32), in
  NumPy: the same words, and no program to compile for a handful of keys
  (a threefry costs ~0.1 s of compile on a CPU at each place it is used)."""
  k0, k1 = np.uint32(key[0]), np.uint32(key[1])
  ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
  shape = np.shape(data)
  x1 = np.asarray(data).astype(np.uint32).reshape(-1)  # arrays wrap quietly
  x0 = np.zeros_like(x1)  # the high word of a uint32 datum
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for i in range(5):   # threefry2x32: 20 rounds, a key injected every 4
    for r in _ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = x0 ^ ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r)))
    x0 = x0 + ks[(i + 1) % 3]
    x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
  return np.stack([x0, x1], -1).reshape(*shape, 2)


def _mix(slots, k0, k1, stream, attempt):
  salt = _U(stream) * _U(0x632BE5AB) + jnp.asarray(attempt, _U) * _U(
      0x9E3779B9)
  h = _fmix(slots ^ k0)
  h = _fmix(h ^ k1 ^ salt)
  return _fmix(h + k0)


def bits(keys: jax.Array, width: int, stream: int, attempt=0) -> jax.Array:
  """uint32 ``[G, width]``: slot ``j`` of each unit's ``stream``."""
  return _mix(jnp.arange(width, dtype=_U)[None, :], keys[:, :1], keys[:, 1:],
              stream, attempt)


def sub_keys(key: jax.Array, ids: jax.Array, stream: int) -> jax.Array:
  """uint32 ``[len(ids), 2]``: keys for ``ids`` under one unit key
  ``key`` (uint32 ``[2]``), by hashing only (no threefry)."""
  ids = ids.astype(_U)
  return jnp.stack([_mix(ids, key[0], key[1], stream, 0),
                    _mix(ids, key[0], key[1], stream, 1)], axis=1)


def uniform(keys, width, stream, attempt=0):
  """float32 in ``(0, 1)`` (24 bits, offset by half a bin)."""
  h = bits(keys, width, stream, attempt)
  u = ((h >> 8).astype(jnp.float32) + 0.5) * jnp.float32(2.0 ** -24)
  # float32 rounds the top bin's 2**24 - 0.5 up to 2**24, i.e. u = 1.0, whose
  # normal is +inf; keep it below 1 (no other draw changes).
  return jnp.minimum(u, jnp.float32(1 - 2.0 ** -24))


def normal(keys, width, stream, attempt=0):
  """Standard normal float32 (inverse CDF of :func:`uniform`)."""
  u = uniform(keys, width, stream, attempt)
  return jnp.float32(2 ** 0.5) * jax.lax.erf_inv(2 * u - 1)


def mulhi(a, b):
  """``(a * b) >> 32`` for uint32 ``a``, ``b`` in 32-bit arithmetic."""
  m16 = _U(0xFFFF)
  ah, al, bh, bl = a >> 16, a & m16, b >> 16, b & m16
  m1 = ah * bl + ((al * bl) >> 16)
  m2 = al * bh + (m1 & m16)
  return ah * bh + (m1 >> 16) + (m2 >> 16)


def randint(keys, width, stream, n):
  """int32 ``[G, width]`` in ``[0, n)`` (``n [G]``, per unit; the
  multiply-shift map, bias below ``n / 2**32``)."""
  h = bits(keys, width, stream)
  return mulhi(h, jnp.asarray(n).astype(_U)[:, None]).astype(jnp.int32)
