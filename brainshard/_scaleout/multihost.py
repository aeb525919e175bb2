"""Running on JAX's multi-controller runtime (several processes, one program).

Every process runs the same script. States hold *global* ``jax.Array``s: a
value sharded over a mesh that spans processes has only some of its shards
on this process's devices. brainshard's transforms work on such arrays
unchanged; only moving values between host and devices needs care:

- ``bs.place(states, mesh)``: every process holds the whole value;
- ``bs.place(states, mesh, from_process_local=True)``: each process holds
  its own part;
- ``bs.gather(states)``: the whole value back on every host (a collective:
  every process must call it).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.keys import is_typed_key
from brainshard._core.state.state import State

__all__ = ["gather", "init_distributed", "put_global", "put_process_local"]

# Environment variables set by `brainshard.launch` for each process it starts.
ENV_COORDINATOR = "BRAINSHARD_COORDINATOR"
ENV_NUM_PROCESSES = "BRAINSHARD_NUM_PROCESSES"
ENV_PROCESS_ID = "BRAINSHARD_PROCESS_ID"


def _key_spec(spec: P, extra_dims: int) -> P:
  return P(*spec, *([None] * extra_dims))


def put_global(x: Any, sharding: NamedSharding, owner: str) -> Any:
  """``x`` (the same whole value on every process) placed per ``sharding``.

  Typed PRNG keys cannot be ``device_put`` onto devices of other processes,
  so they travel as their raw key data.
  """
  if isinstance(x, jax.Array) and x.sharding == sharding:
    return x
  if is_typed_key(x) and not sharding.is_fully_addressable:
    data = jax.random.key_data(x)
    extra = data.ndim - x.ndim
    data = jax.device_put(data, NamedSharding(
        sharding.mesh, _key_spec(sharding.spec, extra)))
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
  return jax.device_put(x, sharding)


def put_process_local(x: Any, sharding: NamedSharding, owner: str) -> Any:
  """A global array from this process's part ``x`` of it."""
  if is_typed_key(x):
    impl = jax.random.key_impl(x)
    data = np.asarray(jax.random.key_data(x))
    extra = data.ndim - x.ndim
    ks = NamedSharding(sharding.mesh, _key_spec(sharding.spec, extra))
    return jax.random.wrap_key_data(
        put_process_local(data, ks, owner), impl=impl)
  try:
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))
  except ValueError as e:
    raise ValueError(
        f"{owner}: its process-local part of shape {np.shape(x)} does not fit "
        f"spec {sharding.spec} on mesh {dict(sharding.mesh.shape)} with "
        f"{jax.process_count()} process(es): {e}") from None


def _host_value(x: Any) -> np.ndarray:
  if is_typed_key(x):  # typed PRNG keys have no NumPy form: give their raw data
    x = jax.random.key_data(x)
  if not isinstance(x, jax.Array) or x.is_fully_addressable:
    return np.asarray(jax.device_get(x))
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def gather(tree: Any) -> Any:
  """Whole values as NumPy arrays on every host.

  ``tree`` is a State, an array, or a pytree of them; States become their
  values (typed PRNG keys their ``jax.random.key_data``). A value spread
  over several processes is all-gathered
  (``jax.experimental.multihost_utils.process_allgather``), so in a
  multi-process run *every* process must call ``gather`` with the same
  tree. In a single process it is ``jax.device_get``.

  Example:
    >>> import brainshard as bs, jax.numpy as jnp
    >>> bs.gather({'v': bs.State(jnp.arange(3.0))})
    {'v': array([0., 1., 2.], dtype=float32)}
  """
  def one(x):
    if isinstance(x, State):
      return jax.tree.map(_host_value, x.value)
    return _host_value(x)
  return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, State))


def _fail_fast_hook(exc_type, exc, tb) -> None:
  # A failing process must not wait at shutdown for peers that are
  # themselves waiting for it inside a collective: print and leave now.
  traceback.print_exception(exc_type, exc, tb)
  sys.stderr.flush()
  sys.stdout.flush()
  os._exit(1)


def init_distributed(*, fail_fast: bool = True, **kwargs: Any) -> bool:
  """Joins JAX's multi-controller runtime if this is one of several processes.

  - With keyword arguments, calls ``jax.distributed.initialize(**kwargs)``
    (``coordinator_address``, ``num_processes``, ``process_id``, ...).
  - Under ``python -m brainshard.launch``, uses the coordinator, process count
    and id that the launcher set.
  - Under SLURM (``srun``) or Open MPI (``mpirun``) with more than one task,
    calls ``jax.distributed.initialize()``, which detects them.
  - Otherwise does nothing: a single process uses its local devices.

  Call it once, first thing, before any other JAX call. With
  ``fail_fast`` (default), an uncaught exception in a multi-process run
  prints its traceback and ends the process at once, instead of hanging at
  exit while its peers wait for it in a collective.

  Returns:
    True when the process joined a multi-process run.
  """
  env = os.environ
  if kwargs:
    jax.distributed.initialize(**kwargs)
  elif ENV_COORDINATOR in env:
    jax.distributed.initialize(
        coordinator_address=env[ENV_COORDINATOR],
        num_processes=int(env[ENV_NUM_PROCESSES]),
        process_id=int(env[ENV_PROCESS_ID]))
  elif (int(env.get("SLURM_NTASKS", "1")) > 1
        or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1):
    jax.distributed.initialize()
  else:
    return False
  if fail_fast:
    sys.excepthook = _fail_fast_hook
  return True
