"""JAX's persistent compilation cache, on by default in the user's cache
folder, so that a second run of a script compiles (almost) nothing.

``import brainshard`` points JAX's own cache (``jax_compilation_cache_dir``)
at ``$XDG_CACHE_HOME/brainshard/jax`` (``~/.cache/brainshard/jax``) and
caches programs that took at least 0.1 s to compile (JAX's default is 1 s,
which leaves out most of a network's programs). This changes JAX's
configuration for the whole process, other JAX code included. It does
nothing where the cache is already configured (``JAX_COMPILATION_CACHE_DIR``
or ``jax.config``), and is off with ``BRAINSHARD_COMPILATION_CACHE=0`` in
the environment, or :func:`compilation_cache` ``(None)`` at any time.

Example:
  >>> import brainshard as bs
  >>> folder = bs.compilation_cache()          # where it is now (or None)
  >>> bs.compilation_cache(None)               # off
  >>> bs.compilation_cache() is None
  True
  >>> _ = bs.compilation_cache(folder)         # as before
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import jax
from jax.experimental.compilation_cache.compilation_cache import reset_cache

__all__ = ["compilation_cache", "default_folder", "enable_by_default"]

# Programs compiled faster than this are not worth a file: most of a
# network's programs compile in 0.1-1 s on a CPU.
MIN_COMPILE_SECONDS = 0.1


def default_folder() -> pathlib.Path:
  """``$XDG_CACHE_HOME/brainshard/jax``, else ``~/.cache/brainshard/jax``."""
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(
      os.path.expanduser("~"), ".cache")
  return pathlib.Path(root) / "brainshard" / "jax"


def compilation_cache(folder: Any = ..., *,
                      min_compile_seconds: float = MIN_COMPILE_SECONDS
                      ) -> str | None:
  """Sets JAX's persistent compilation cache to ``folder`` (None: off) and
  returns the folder in use; with no argument, only returns it. Changes
  JAX's configuration for the whole process."""
  if folder is not ...:
    jax.config.update("jax_compilation_cache_dir",
                      None if folder is None else os.fspath(folder))
    if folder is not None:
      jax.config.update("jax_enable_compilation_cache", True)
      jax.config.update("jax_persistent_cache_min_compile_time_secs",
                        float(min_compile_seconds))
    # JAX decides once per process whether the cache is used (at its first
    # compile); a reset makes the next compile look again.
    reset_cache()
  if not jax.config.jax_enable_compilation_cache:
    return None
  return jax.config.jax_compilation_cache_dir


def enable_by_default() -> None:
  """What ``import brainshard`` does: the cache in :func:`default_folder`,
  unless it is switched off or already configured."""
  if os.environ.get("BRAINSHARD_COMPILATION_CACHE", "1").lower() in (
      "0", "false", "off", "no"):
    return
  if jax.config.jax_compilation_cache_dir:  # the user's own choice
    return
  compilation_cache(default_folder())
