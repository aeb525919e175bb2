"""This machine's limit for delivery: what streaming the fired rows once and
adding each weight into a cache-resident ring buffer costs, measured three
ways on the same index and spikes as the kernels.

- ``c loop``: the delivery loop in C (``C_SOURCE``), compiled with ``gcc -O2
  -march=native`` into a temporary folder for this measurement only (never
  shipped, never built at install; skipped without gcc). It reads the
  index's own arrays and the spikes from files.
- ``xla scatter``: XLA's scatter-add alone, its flat targets and weights
  computed beforehand (one padded row of events per step), so nothing feeds
  it: the floor of any XLA kernel.
- ``xla stream``: a sum over the same precomputed arrays: the read alone.

  >>> "for (int64_t k" in C_SOURCE
  True
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np

C_SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static void *load(const char *dir, const char *name, size_t *n) {
  char path[4096]; snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb"); fseek(f, 0, SEEK_END); *n = ftell(f);
  rewind(f); void *p = malloc(*n + 1); fread(p, 1, *n, f); fclose(f);
  return p;
}
static double cpu(void) {
  struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(int argc, char **argv) {  /* dir n_pre n_local length steps reps */
  const char *dir = argv[1];
  int64_t n_pre = atoll(argv[2]), n = atoll(argv[3]), L = atoll(argv[4]);
  int64_t steps = atoll(argv[5]), reps = atoll(argv[6]); size_t sz;
  int32_t *indptr = load(dir, "indptr", &sz);
  uint16_t *post = load(dir, "post", &sz);
  float *weight = load(dir, "weight", &sz);
  uint8_t *delay = load(dir, "delay", &sz);
  uint8_t *fired = load(dir, "fired", &sz);
  float *buf = calloc(L * n, sizeof(float));
  for (int64_t r = 0; r < reps; r++) {
    double t0 = cpu();
    for (int64_t t = 0; t < steps; t++) {
      for (int64_t q = 0; q < n; q++) buf[(t % L) * n + q] = 0.0f;
      const uint8_t *f = fired + t * n_pre;
      for (int64_t j = 0; j < n_pre; j++) {
        if (!f[j]) continue;
        for (int64_t k = indptr[j]; k < indptr[j + 1]; k++) {
          int64_t s = t % L + delay[k];
          if (s >= L) s -= L;
          buf[s * n + post[k]] += weight[k];
        }
      }
    }
    printf("%.9f\n", cpu() - t0);
  }
  fprintf(stderr, "%g\n", buf[0]);
  return 0;
}
"""


def c_loop_seconds(index, fired, length: int, reps: int) -> list[float]:
  """CPU seconds of each of ``reps`` runs of the C loop over all steps of
  ``fired``; ``[]`` without gcc or for an index the C program does not
  read (uint16 post, uint8 delay, one receptor)."""
  gcc = shutil.which("gcc")
  if (gcc is None or index.receptor is not None
      or index.post.dtype != np.uint16 or index.delay.dtype != np.uint8):
    return []
  with tempfile.TemporaryDirectory() as tmp:
    for name in ("indptr", "post", "weight", "delay"):
      np.asarray(getattr(index, name)).tofile(os.path.join(tmp, name))
    np.asarray(fired, np.uint8).tofile(os.path.join(tmp, "fired"))
    src, exe = os.path.join(tmp, "loop.c"), os.path.join(tmp, "loop")
    with open(src, "w") as f:
      f.write(C_SOURCE)
    subprocess.run([gcc, "-O2", "-march=native", "-o", exe, src], check=True)
    steps, n_pre = fired.shape
    out = subprocess.run(
        [exe, tmp, str(n_pre), str(index.n_local), str(length), str(steps),
         str(reps)], check=True, capture_output=True, text=True).stdout
  return [float(x) for x in out.split()]


def precomputed(index, fired, length: int):
  """``(flat [steps, E], weight [steps, E])``: each step's events as flat
  ring-buffer positions (receptor 0) and weights, padded with an
  out-of-range position and 0 to the busiest step's ``E``."""
  indptr = np.asarray(index.indptr)
  post = np.asarray(index.post).astype(np.int64)
  weight = np.asarray(index.weight)
  delay = np.asarray(index.delay).astype(np.int64)
  n, steps = index.n_local, fired.shape[0]
  rows = []
  for t in range(steps):
    ks = [np.arange(indptr[j], indptr[j + 1]) for j in np.flatnonzero(
        fired[t])]
    k = np.concatenate(ks) if ks else np.zeros(0, np.int64)
    rows.append((((t + delay[k]) % length) * n + post[k], weight[k]))
  width = max(1, max(len(r[0]) for r in rows))
  flat = np.full((steps, width), length * n, np.int32)
  w = np.zeros((steps, width), np.float32)
  for t, (f, x) in enumerate(rows):
    flat[t, :len(f)], w[t, :len(x)] = f, x
  return flat, w


def xla_programs(length: int, n: int):
  """``(scatter, stream)``: jitted ``(flat, weight) -> result`` over all
  steps: the scatter-adds alone into a ``[length * n]`` buffer, and a sum
  that only reads the same arrays."""
  import jax
  import jax.numpy as jnp

  @jax.jit
  def scatter(flat, weight):
    def step(buf, xs):
      f, w = xs
      return buf.at[f].add(w, mode="drop"), None
    return jax.lax.scan(step, jnp.zeros(length * n, jnp.float32),
                        (flat, weight))[0]

  @jax.jit
  def stream(flat, weight):
    def step(acc, xs):
      f, w = xs
      return acc + jnp.sum(w) + jnp.sum(f).astype(jnp.float32), None
    return jax.lax.scan(step, jnp.float32(0), (flat, weight))[0]

  return scatter, stream
