"""Checkpoint throughput: ``bs.save_states`` / ``bs.restore_states`` against
orbax used directly on the same pytree, and against ``np.save`` of the
gathered arrays.

The States hold ``--gib`` GiB of float32 sharded over 8 (faked CPU) devices:
a ``[rows, 1024]`` matrix split by rows, a vector split the same way, and a
RandomState. Each repeat times, in rotating order:

- brainshard: ``save_states`` into a fresh directory (blocking), then
  ``restore_states`` into the same States (target shardings: theirs);
- orbax: ``ocp.PyTreeCheckpointer`` save of ``{name: value}`` (key data for
  the key), then restore with ``ArrayRestoreArgs`` carrying the shardings;
- numpy: gather every array to the host and ``np.save`` it; restore with
  ``np.load`` + ``jax.device_put`` onto the sharding.

Throughput is bytes / median seconds (GB/s, 1e9 bytes). The goal is
brainshard within 1.1x of orbax direct (the ratio of median times, save and
restore). Restores read files the page cache still holds, as in a resumed
run on the same machine.

Usage:
  python -m benchmarks checkpoint [--gib 1.0] [--repeats 5] [--dir DIR]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

from benchmarks._harness import clock, fake_devices, parser

fake_devices(8)  # before JAX starts

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import brainshard as bs  # noqa: E402


def make_states(gib: float, mesh) -> dict:
  rows = max(8, int(gib * 2**30 / 4 / 1025) // 8 * 8)
  sharding = NamedSharding(mesh, P("x"))
  w = jax.jit(lambda: jax.random.normal(jax.random.key(0), (rows, 1024)),
              out_shardings=sharding)()
  v = jax.device_put(jnp.arange(rows, dtype=jnp.float32), sharding)
  return {"w": bs.ParamState(w, "w"), "v": bs.State(v, "v"),
          "rng": bs.RandomState(1, "rng")}


def nbytes(states: dict) -> int:
  return sum(x.nbytes for s in states.values()
             for x in jax.tree.leaves(s.value)
             if not jnp.issubdtype(x.dtype, jax.dtypes.prng_key))


def _key_data(x):
  return jax.random.key_data(x) if jnp.issubdtype(
      x.dtype, jax.dtypes.prng_key) else x


def bs_case(states, root):
  def save(i):
    bs.save_states(os.path.join(root, f"bs{i}"), states)

  def restore(i):
    bs.restore_states(os.path.join(root, f"bs{i}"), states)
    jax.block_until_ready([s.value for s in states.values()])
  return save, restore


def orbax_case(states, root):
  import orbax.checkpoint as ocp

  def tree():
    return {k: _key_data(s.value) for k, s in states.items()}

  def save(i):
    with ocp.PyTreeCheckpointer() as ckpt:
      ckpt.save(os.path.join(root, f"ocp{i}"), args=ocp.args.PyTreeSave(tree()))

  def restore(i):
    target = tree()
    args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(
        sharding=x.sharding, global_shape=x.shape, dtype=x.dtype), target)
    with ocp.PyTreeCheckpointer() as ckpt:
      out = ckpt.restore(os.path.join(root, f"ocp{i}"),
                         args=ocp.args.PyTreeRestore(item=target,
                                                     restore_args=args))
    jax.block_until_ready(out)
  return save, restore


def numpy_case(states, root):
  def save(i):
    d = os.path.join(root, f"np{i}")
    os.makedirs(d)
    for k, s in states.items():
      np.save(os.path.join(d, k + ".npy"), np.asarray(_key_data(s.value)))

  def restore(i):
    d = os.path.join(root, f"np{i}")
    out = [jax.device_put(np.load(os.path.join(d, k + ".npy")),
                          _key_data(s.value).sharding)
           for k, s in states.items()]
    jax.block_until_ready(out)
  return save, restore


def timed(fn, i) -> float:
  with clock() as t:
    fn(i)
  return t.s


def run(gib: float, repeats: int, root: str) -> dict:
  mesh = jax.make_mesh((8,), ("x",))
  states = make_states(gib, mesh)
  size = nbytes(states)
  cases = {"brainshard": bs_case(states, root),
           "orbax": orbax_case(states, root),
           "numpy": numpy_case(states, root)}
  names = list(cases)
  times = {n: {"save": [], "restore": []} for n in names}
  for r in range(repeats + 1):  # the first round warms up
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
      save, restore = cases[name]
      t_save, t_restore = timed(save, r), timed(restore, r)
      if r:
        times[name]["save"].append(t_save)
        times[name]["restore"].append(t_restore)
    for entry in os.listdir(root):
      shutil.rmtree(os.path.join(root, entry))
  report = {"bytes": size, "repeats": repeats}
  for name in names:
    for op in ("save", "restore"):
      med = statistics.median(times[name][op])
      ratios = [a / b for a, b in zip(times[name][op], times["orbax"][op])]
      report[f"{name}.{op}"] = {"s": med, "GB/s": size / med / 1e9,
                                "ratio_vs_orbax": statistics.median(ratios)}
  return report


def main(argv=None) -> dict:
  ap = parser(__doc__, repeats=5)
  ap.add_argument("--gib", type=float, default=1.0,
                  help="GiB of State (smaller for a quick run)")
  ap.add_argument("--dir", default=None,
                  help="where to write (default: a temporary directory)")
  args = ap.parse_args(argv)
  root = tempfile.mkdtemp(prefix="bench_ckpt_", dir=args.dir)
  try:
    report = run(args.gib, args.repeats, root)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  print(f"{report['bytes'] / 2**30:.3f} GiB of State over 8 devices, "
        f"{report['repeats']} repeats (median)")
  print(f"{'':12s} {'save GB/s':>10s} {'x orbax':>8s} {'restore GB/s':>13s} "
        f"{'x orbax':>8s}")
  for name in ("brainshard", "orbax", "numpy"):
    s, r = report[f"{name}.save"], report[f"{name}.restore"]
    print(f"{name:12s} {s['GB/s']:10.2f} {s['ratio_vs_orbax']:8.2f} "
          f"{r['GB/s']:13.2f} {r['ratio_vs_orbax']:8.2f}")
  return report
