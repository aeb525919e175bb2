"""The core every transform is built on: states and frames, discovery, the
compiled program and its one call path, call arguments, spec algebra,
placement, donation, and ``compat`` (every JAX internal). See
``brainshard/ARCHITECTURE.md``."""
