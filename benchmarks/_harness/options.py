"""The command line every ``python -m benchmarks COMMAND`` shares: a parser
described by its module's docstring, with the options several commands
take, and their ``--json`` output.

  >>> ap = parser("Times a thing.\\n\\nMore.", repeats=7, json=True)
  >>> args = ap.parse_args([])
  >>> args.repeats, args.json
  (7, None)
"""

from __future__ import annotations

import argparse
import json as json_


def parser(doc: str, *, prog: str | None = None, repeats: int | None = None,
           json: bool = False, child: bool = False) -> argparse.ArgumentParser:
  """A command's parser, its description the first paragraph of ``doc``
  (the module's docstring); ``prog`` where ``python -m benchmarks`` does not
  name it (cli.py does). ``repeats``: a ``--repeats`` option with that
  default; ``json``: ``--json FILE``; ``child``: the hidden ``--child
  SPEC`` of a command that measures in processes of its own."""
  p = argparse.ArgumentParser(
      prog=prog, description=" ".join(doc.split("\n\n")[0].split()))
  if repeats is not None:
    p.add_argument("--repeats", type=int, default=repeats,
                   help="interleaved repeats (default: %(default)s)")
  if json:
    p.add_argument("--json", metavar="FILE",
                   help="also write the results to this file")
  if child:
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
  return p


def write_json(path: str | None, result, indent: int = 2) -> None:
  """Writes ``result`` to ``path`` (``--json FILE``); nothing if None."""
  if path:
    with open(path, "w") as f:
      json_.dump(result, f, indent=indent)
