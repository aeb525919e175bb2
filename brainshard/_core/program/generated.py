"""Python source generated from templates, compiled under a file name that
:mod:`linecache` knows, so a traceback shows its lines and pdb steps
through it (fastcall.py's generated call).

Example:
  >>> import linecache
  >>> source = fill("def f({arg}):\\n  {body}", arg="x",
  ...               body=["y = x + 1", "return y"])
  >>> print(source)
  def f(x):
    y = x + 1
    return y
  >>> f = compiled(source, "<generated f>", {"__name__": __name__}, "f")
  >>> f(1), linecache.getline(f.__code__.co_filename, 2)
  (2, '  y = x + 1\\n')
  >>> source_of(f) == source + "\\n"
  True
"""

from __future__ import annotations

import linecache
import re
import weakref
from typing import Any, Callable

__all__ = ["fill", "compiled", "source_of"]


def fill(template: str, **parts: Any) -> str:
  """``template`` with its ``{name}`` placeholders filled. A placeholder
  alone on its line takes a block: a string of lines or a list of them,
  each indented as that line; an empty one drops the line. Anywhere else
  it takes one string. What is filled in is not filled again."""
  out = []
  for line in template.splitlines():
    block = re.fullmatch(r"( *)\{(\w+)\}", line)
    if block is None:
      out.append(re.sub(r"\{(\w+)\}", lambda m: str(parts[m[1]]), line))
      continue
    value = parts[block[2]]
    lines = value.splitlines() if isinstance(value, str) else value
    out += [block[1] + part for part in lines]
  return "\n".join(out)


def compiled(source: str, filename: str, ns: dict, name: str) -> Callable:
  """The function ``name`` that ``source`` defines, run in the globals
  ``ns`` and compiled under ``filename`` (with `` #2``, ``#3`` ... where a
  live function has it already). The source is in linecache while the
  function lives, and after a ``linecache.clearcache()`` a traceback or
  pdb finds it again through the frame's globals (``linecache.lazycache``
  asks their ``__loader__``)."""
  base, k = filename, 1
  while filename in linecache.cache:
    k += 1
    filename = f"{base[:-1]} #{k}>" if base.endswith(">") else f"{base} #{k}"
  source += "\n"
  lines = source.splitlines(keepends=True)
  linecache.cache[filename] = (len(source), None, lines, filename)
  ns["__loader__"] = _Source(source)
  exec(compile(source, filename, "exec"), ns)
  fun = ns[name]
  weakref.finalize(fun, _forget, filename, lines).atexit = False
  return fun


def source_of(fun: Callable) -> str:
  """The source :func:`compiled` made ``fun`` from."""
  return fun.__globals__["__loader__"].source


class _Source:
  """The generated source, as a module's loader gives its own."""
  __slots__ = ("source",)

  def __init__(self, source: str):
    self.source = source

  def get_source(self, name: str) -> str:
    return self.source


def _forget(filename: str, lines: list[str]) -> None:
  """Takes the source out of linecache, unless another took its place."""
  entry = linecache.cache.get(filename)
  if entry is not None and len(entry) == 4 and entry[2] is lines:
    del linecache.cache[filename]
