"""brainshard's benchmark suite: every figure a ratio against hand-threaded
pure JAX measured in the same process. Run ``python -m benchmarks --help``."""
