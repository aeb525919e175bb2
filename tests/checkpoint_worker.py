"""Fresh processes for tests/test_checkpoint.py.

Usage: python tests/checkpoint_worker.py SCENARIO ARGS...

- ``resume CKPT OUT STEPS``: build the CUBA-like network on 8 devices,
  restore it from CKPT, run STEPS more steps, save every State to OUT (.npz).
- ``one_device CKPT OUT``: on a 1-device process, restore the network's
  States (created unplaced, as on a laptop) and save them to OUT.
- ``slow_save CKPT WHERE``: overwrite CKPT with new values, stopping for a
  minute WHERE ('writing': while orbax writes, 'pointer': after the new
  version is committed but before CURRENT moves, 'replace': with the new
  pointer file written, as it replaces CURRENT); the test kills it there.
- ``multihost_save CKPT`` (under brainshard.launch, 2 x 4 devices): run the
  network sharded over both processes and save it (then overwrite it with
  an asynchronous save that both processes commit in the background).
- ``multihost_restore CKPT OUT``: restore that checkpoint in one process of
  8 devices and save the values to OUT.

Each prints ``READY`` when it is about to do the thing a test waits for.
"""

import os
import sys
import time

N, STEPS = 64, 20


def network(bs, jax, mesh):
  """A small sharded LIF network with per-shard noise, in the style of
  examples/cuba.py: neurons split over mesh axis 'x', every step all-gathers
  the spikes; the noise is drawn inside shard_map (different on each
  shard). Returns (states dict, run(n_steps))."""
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import PartitionSpec as P
  w = np.random.default_rng(0).normal(0, 0.8, (N, N)).astype(np.float32)
  states = {
      "v": bs.ShortTermState(jnp.linspace(-1.0, 1.0, N), "v", spec=P("x")),
      "syn": bs.ShortTermState({"ge": jnp.zeros(N), "gi": jnp.zeros(N)},
                               "syn", spec=P("x")),
      "ref": bs.ShortTermState(jnp.zeros(N, jnp.int32), "ref", spec=P("x")),
      "w": bs.ParamState(jnp.asarray(w), "w", spec=P("x", None)),
      "rng": bs.RandomState(7, "rng"),
  }
  v, syn, ref, wst, rng = (states[k] for k in ("v", "syn", "ref", "w", "rng"))

  def step():
    noise = rng.normal(size=v.value.shape)  # per-shard numbers
    ge, gi = syn.value["ge"] * 0.9, syn.value["gi"] * 0.8
    resting = ref.value > 0
    new_v = jnp.where(resting, v.value, 0.95 * v.value + ge - gi + 0.3 * noise)
    spikes = (new_v > 1.0) & ~resting
    v.value = jnp.where(spikes, -1.0, new_v)
    ref.value = jnp.where(spikes, 3, jnp.maximum(ref.value - 1, 0))
    fired = jax.lax.all_gather(spikes, "x", tiled=True).astype(jnp.float32)
    drive = wst.value @ fired
    syn.value = {"ge": ge + jnp.maximum(drive, 0) * 0.1,
                 "gi": gi + jnp.maximum(-drive, 0) * 0.1}
    return spikes

  sharded = bs.shard_map(step, mesh=mesh, out_specs=P("x"))
  runs = {}

  def run(n):
    if n not in runs:
      runs[n] = bs.jit(lambda: bs.for_loop(sharded, length=n))
    return runs[n]()

  return states, run


def values(bs, states):
  """Every State's leaves as NumPy arrays (keys as their raw data)."""
  import jax
  out = {}
  for key, state in states.items():
    for i, leaf in enumerate(jax.tree.leaves(bs.gather(state))):
      out[f"{key}/{i}"] = leaf
  return out


def _mesh(jax, n):
  return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


def resume(ckpt, out, steps):
  import jax
  import numpy as np
  import brainshard as bs
  states, run = network(bs, jax, _mesh(jax, 8))
  bs.place(list(states.values()), _mesh(jax, 8))
  bs.restore_states(ckpt, states)
  run(int(steps))
  np.savez(out, **values(bs, states))


def one_device(ckpt, out):
  import jax
  import numpy as np
  import brainshard as bs
  assert jax.device_count() == 1
  states, _ = network(bs, jax, _mesh(jax, 1))
  meta = bs.restore_states(ckpt, states)
  for state in states.values():
    for leaf in jax.tree.leaves(state.value):
      assert not leaf.committed, state  # unplaced, as freshly created
  np.savez(out, **values(bs, states), step=meta["step"])


def slow_save(ckpt, where):
  import jax
  import jax.numpy as jnp
  import brainshard as bs
  from brainshard._scaleout.checkpoint import store
  x = bs.State(jnp.full((256, 1024), 2.0), "x")  # 1 MiB
  def stop(*args, **kwargs):
    print("READY", flush=True)
    time.sleep(60)
  if where == "pointer":
    store.write_pointer = stop
  elif where == "replace":  # the new CURRENT is written, not yet moved
    replace = os.replace
    def stop_at_current(src, dst, *args, **kwargs):
      if os.path.basename(dst) == store.POINTER:
        stop()
      return replace(src, dst, *args, **kwargs)
    store.os.replace = stop_at_current
  else:  # inside orbax, after the temporary directory was created
    ocp = store.orbax()
    handler = ocp.PyTreeCheckpointHandler
    original = handler.async_save
    async def slow(self, *args, **kwargs):
      stop()
      return await original(self, *args, **kwargs)
    handler.async_save = slow
  bs.save_states(ckpt, [x], overwrite=True)
  print("the save was not stopped", flush=True)


def multihost_save(ckpt):
  import jax
  import numpy as np
  import brainshard as bs
  assert bs.init_distributed()
  assert jax.process_count() == 2
  mesh = _mesh(jax, 8)
  states, run = network(bs, jax, mesh)
  bs.place(list(states.values()), mesh)
  jax.block_until_ready(run(STEPS))
  assert not states["v"].value.is_fully_addressable
  # Held whole by every process (never placed): written once.
  states["count"] = bs.State(np.arange(5, dtype=np.int32), "count")
  bs.save_states(ckpt, states, metadata={"step": 0})
  # Overwritten asynchronously: both processes commit in the background.
  handle = bs.save_states(ckpt, states, overwrite=True, block=False,
                          metadata={"step": STEPS})
  got = values(bs, states)
  handle.wait()
  assert sorted(os.listdir(ckpt)) == ["CURRENT", "v00000002"], os.listdir(ckpt)
  if jax.process_index() == 0:
    np.savez(os.path.join(ckpt + ".expected.npz"), **got)
  print("OK multihost_save", flush=True)


def multihost_restore(ckpt, out):
  import jax
  import numpy as np
  import brainshard as bs
  mesh = jax.make_mesh((2, 4), ("a", "x"))  # another layout of 8 devices
  states, _ = network(bs, jax, _mesh(jax, 8))
  states["count"] = bs.State(np.zeros(5, np.int32), "count")
  with jax.set_mesh(mesh):
    meta = bs.restore_states(ckpt, states)
  assert states["v"].sharding.spec == jax.sharding.PartitionSpec("x")
  assert states["v"].sharding.mesh == mesh
  np.savez(out, **values(bs, states), step=meta["step"])


if __name__ == "__main__":
  scenario, *args = sys.argv[1:]
  globals()[scenario](*args)
