"""One memory measurement in a fresh process (peak RSS is per process).

``python -m benchmarks._memory_child IMPL MIB`` makes a float32 state of MIB
MiB sharded over 8 devices, steps it 3 times with IMPL and prints one JSON
line: the peak resident set size above the state's own footprint, and XLA's
static per-device figures from ``compiled.memory_analysis()``.

IMPL: ``bs-auto`` (bs.jit(bs.shard_map), donate_states='auto'), ``bs-false``
(donate_states=False), ``pure-donate`` / ``pure-keep`` (jax.jit(jax.shard_map)
with / without donate_argnums).
"""

import json
import sys

from benchmarks._harness import fake_devices, peak_rss_mib, reset_peak, rss_mib

fake_devices(8)  # before JAX starts

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import brainshard as bs  # noqa: E402

MIB = 2 ** 20


def main(impl: str, mib: int) -> dict:
  mesh = jax.make_mesh((8,), ("x",))
  n = mib * MIB // 4
  sharding = NamedSharding(mesh, P("x"))
  make = jax.jit(lambda: jnp.ones((n,), jnp.float32), out_shardings=sharding)
  value = make()
  jax.block_until_ready(value)

  def update(v):
    return v * 0.5 + 1.0

  if impl.startswith("bs"):
    state = bs.State(value, name="big", spec=P("x"))
    del value

    def step():
      state.value = update(state.value)

    f = bs.jit(bs.shard_map(step, mesh=mesh, in_specs=(), out_specs=P()),
               donate_states="auto" if impl == "bs-auto" else False)
    analysis = f.lower().compile().memory_analysis()
    run, sync = f, lambda: state.value
  else:
    g = jax.jit(jax.shard_map(update, mesh=mesh, in_specs=P("x"),
                              out_specs=P("x")),
                donate_argnums=0 if impl == "pure-donate" else ())
    analysis = g.lower(value).compile().memory_analysis()
    box = [value]
    del value

    def run():
      box[0] = g(box[0])
    sync = lambda: box[0]
  jax.block_until_ready(sync())
  base = rss_mib()  # the state is resident now, nothing else of size
  exact = reset_peak()  # the peak read below belongs to the steps alone
  for _ in range(3):
    run()
    jax.block_until_ready(sync())
  peak = peak_rss_mib()
  return dict(
      mib=mib, peak_reset=exact,
      rss_base_mib=base, rss_peak_mib=peak,
      rss_peak_over_state_mib=peak - base,
      args_mib=analysis.argument_size_in_bytes / MIB,
      out_mib=analysis.output_size_in_bytes / MIB,
      alias_mib=analysis.alias_size_in_bytes / MIB,
      temp_mib=analysis.temp_size_in_bytes / MIB,
      peak_per_device_mib=(analysis.argument_size_in_bytes
                           + analysis.output_size_in_bytes
                           - analysis.alias_size_in_bytes
                           + analysis.temp_size_in_bytes) / MIB)


if __name__ == "__main__":
  print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
