"""Fresh processes for tests/test_record_to.py: a run recording to disk that
the test kills, and one whose memory it measures.

Usage: python tests/record_worker.py SCENARIO PATH

- ``forever PATH``: the network of :func:`make_net` recording to PATH in
  chunks of 32 steps, for far longer than the test waits (it is killed).
- ``memory PATH``: a run recording 32 KiB per step (a trace of 8192 floats)
  to PATH in chunks of 64 steps; prints ``RSS <MiB>`` after 20 chunks and
  ``PEAK <MiB> BYTES <recorded bytes>`` (VmHWM since then) after 200 more.
"""

import sys

N = 64


def make_net(bs, jnp):
  """Leaky neurons with a drive and uniform noise: v, step."""
  v = bs.State(jnp.linspace(0.0, 0.9, N), name="v")
  drive = bs.ParamState(0.02 + 0.1 * jnp.arange(N) / N, name="drive")
  rng = bs.RandomState(0)

  def step():
    x = v.value * 0.97 + drive.value
    x = x + bs.random.uniform(0.0, 0.02, size=x.shape, key=rng)
    spikes = x > 1.0
    v.value = jnp.where(spikes, 0.0, x)
    return spikes
  return v, step


def monitors(bs, v):
  return {"spikes": bs.SpikeMonitor(), "rate": bs.RateMonitor(),
          "v": bs.StateMonitor(v, index=[0, 5, 63]),
          "mean": bs.StateMonitor(lambda: v.value.mean(), every=7)}


def main(scenario: str, path: str) -> None:
  import jax.numpy as jnp
  import brainshard as bs
  if scenario == "forever":
    v, step = make_net(bs, jnp)
    bs.Runner(step, monitors(bs, v), chunk=32, progress=False,
              record_to=path).run(10**8)
    return
  from benchmarks._harness import peak_rss_mib, reset_peak, rss_mib
  wide = bs.ParamState(jnp.arange(8192, dtype=jnp.float32) % 7, name="wide")
  v, step = make_net(bs, jnp)
  runner = bs.Runner(step, {"spikes": bs.SpikeMonitor(),
                            "wide": bs.StateMonitor(wide)},
                     chunk=64, progress=False, record_to=path)
  runner.run(64 * 20)
  print(f"RSS {rss_mib():.1f}", flush=True)
  reset_peak()
  runner.run(64 * 200)
  print(f"PEAK {peak_rss_mib():.1f} BYTES {64 * 200 * 8192 * 4}", flush=True)


if __name__ == "__main__":
  main(*sys.argv[1:])
