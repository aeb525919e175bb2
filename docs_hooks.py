"""mkdocs hook (mkdocs.yml ``hooks:``): the API index lists, with their
docstrings, the names of ``brainshard.__all__`` that no page under
``docs/api/`` documents with a ``::: brainshard.NAME`` line, so a public
name added without a docs entry still appears in the reference (and
tests/test_docs_site.py can tell). Move such a name to its group's page."""

from __future__ import annotations

import pathlib
import re

_DIRECTIVE = re.compile(r"^:::\s*brainshard\.([A-Za-z_][A-Za-z0-9_]*)\s*$", re.M)
_MARKER = "<!-- undocumented names -->"


def documented_names(api_dir: pathlib.Path) -> set[str]:
  """The flat names a ``::: brainshard.NAME`` line on an API page covers."""
  names: set[str] = set()
  for page in sorted(api_dir.glob("*.md")):
    names.update(_DIRECTIVE.findall(page.read_text()))
  return names


def public_names() -> list[str]:
  # Imported here, not at module level: mkdocs loads hooks before plugins.
  import brainshard
  return list(brainshard.__all__)


def on_page_markdown(markdown: str, page, config, files) -> str:
  if page.file.src_uri != "api/index.md" or _MARKER not in markdown:
    return markdown
  api_dir = pathlib.Path(config["docs_dir"]) / "api"
  missing = [n for n in public_names() if n not in documented_names(api_dir)]
  if not missing:
    return markdown.replace(_MARKER, "")
  body = ["## Not yet in a group", "",
          "Public names that no API page lists yet:", ""]
  body += [f"::: brainshard.{n}\n    options:\n      heading_level: 3\n"
           for n in missing]
  return markdown.replace(_MARKER, "\n".join(body))


# -- griffe extension (mkdocs.yml: mkdocstrings ... extensions) ---------------
# brainshard's docstrings are Google style with Sphinx-isms: an ``Example:``
# heading (griffe knows only ``Examples:``, and would render the doctest as
# nested quotes) and ``:func:`name``` roles. Rewrite both before parsing so
# the doctests render as code.

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


def markdown_docstring(text: str) -> str:
  text = _EXAMPLE.sub(r"\1Examples:", text)
  return _ROLE.sub(lambda m: f"``{m.group(1).rsplit('.', 1)[-1]}``", text)


try:
  import griffe as _griffe
except ImportError:  # only mkdocstrings needs it
  _griffe = None

if _griffe is not None:
  class DocstringSections(_griffe.Extension):
    """Makes ``Example:`` an examples section and ``:role:`x``` code."""

    def on_object(self, *, obj, **kwargs) -> None:
      if obj.docstring is not None:
        obj.docstring.value = markdown_docstring(obj.docstring.value)
