"""Op counts of lowered (StableHLO) and compiled (optimised HLO) programs,
with names, locations and metadata stripped, for parity tests."""

from __future__ import annotations

import collections
import re

_STABLEHLO_OP = re.compile(
    r"""^\s*(?:%[\w#:]+(?:\s*,\s*%[\w#:]+)*\s*=\s*)?"?([a-z_]+\.[a-z_]+)"?[\s(<{]""")
_HLO_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*)$")
_HLO_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_METADATA = re.compile(r",?\s*metadata=\{[^}]*\}")
# `stablehlo.convert %x : tensor<8xf32>` (one type, no `->`): a convert to
# the type the value already has, which JAX emits to drop a weak type and
# XLA removes; it computes nothing, so it is not counted.
_IDENTITY_CONVERT = re.compile(r"stablehlo\.convert\s+%[\w#:]+\s*:\s*tensor<[^>]*>\s*$")


def lowered_ops(text: str) -> collections.Counter:
  """``Counter`` of StableHLO/SDY/func operations in ``Lowered.as_text()``."""
  ops = collections.Counter()
  for line in text.splitlines():
    m = _STABLEHLO_OP.match(line)
    if m and m.group(1) not in ("sdy.mesh",) and not (
        _IDENTITY_CONVERT.search(line)):
      ops[m.group(1)] += 1
  return ops


def compiled_ops(text: str) -> collections.Counter:
  """``Counter`` of HLO opcodes in ``Compiled.as_text()`` (every
  computation, fusions included)."""
  ops = collections.Counter()
  for line in text.splitlines():
    m = _HLO_INSTR.match(_METADATA.sub("", line))
    if not m:
      continue
    op = _HLO_OPCODE.search(" " + m.group(1))
    if op:
      ops[op.group(1)] += 1
  return ops


def donated_args(text: str) -> int:
  """Arguments a lowered program lets XLA alias with an output."""
  return text.count("tf.aliasing_output") + text.count("jax.buffer_donor")
