"""The package's structure as brainshard/ARCHITECTURE.md states it, checked
from the source alone (pure AST, nothing imported, well under a second):

- every module under brainshard/ is listed in ARCHITECTURE.md, and every
  module listed there exists;
- imports point down the floors ``_core < _transforms < _scaleout <
  _simulation < _models < the public modules`` (function-level imports
  count; ``if TYPE_CHECKING:`` ones do not, they never run);
- no import circles, in the package and in benchmarks/ (a graph of its
  own: benchmarks import the package, never the other way);
- no module reaches another module's private (underscore) names -- reads
  them, writes them (``state._value = v`` is not a definition), or uses
  them in the Python source it generates (its templates' text) -- except
  within one package below a floor (``_simulation/random/``), whose members
  ARCHITECTURE.md lists in the package's section, and the names DECLARED
  below (State's slot ``_value`` and mark ``_sig`` inside ``_core``);
  State and Frame declare the internal surface the others use, and a
  module generating source lists the private names its templates use
  (``SOURCE_PRIVATE_NAMES``);
- no stale module names (from before the package had floors) remain in
  the package, the docs or benchmarks/ANALYSIS.md;
- no ``functools`` cache, which ``bs.clear_caches()`` could not clear.

``python tests/test_architecture.py`` prints every import edge.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "brainshard"
FLOORS = ("_core", "_transforms", "_scaleout", "_simulation", "_models")


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
TREES = {name: ast.parse(p.read_text(), str(p)) for name, p in MODULES.items()}


def floor(module: str) -> int:
  """0 for _core ... 4 for _models, 5 for the public modules above them."""
  parts = module.split(".")
  return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS \
      else len(FLOORS)


class _Scan(ast.NodeVisitor):
  """One walk of a module: its imports that can run, the names it defines,
  the private names it reaches on other objects, and the private names in
  the Python source its strings hold (code it generates).

  A name is defined by a ``def``, a ``class``, an assignment to a name or to
  an attribute of ``self``/``cls``, a parameter, or a string that is just
  that name (``__slots__``, ``object.__setattr__(self, "_x", ...)``). An
  attribute of anything else is reached, not defined: read, or written
  (``state._value = v``, ``del x._y``, ``setattr(x, "_y", v)``), and so is
  ``getattr(x, "_y")``. Any other string is source text: each private name
  in it (``"v._sig is None"``, ``f"{name}._value"``) is reached at its line,
  and a module lists those its family does not define in
  ``SOURCE_PRIVATE_NAMES``.
  """

  def __init__(self, tree: ast.AST):
    self.imports: list[ast.Import | ast.ImportFrom] = []
    self.defined: set[str] = set()
    self.reads: list[tuple[str, int, str]] = []  # (name, line, how)
    self.in_source: list[tuple[str, int]] = []
    self.source_declared: tuple[str, ...] | None = None
    self._docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and ast.get_docstring(node)}
    self.visit(tree)

  def visit_If(self, node: ast.If) -> None:
    if "TYPE_CHECKING" in ast.unparse(node.test):  # never runs
      for stmt in node.orelse:
        self.visit(stmt)
    else:
      self.generic_visit(node)

  def visit_Import(self, node: ast.Import) -> None:
    self.imports.append(node)

  visit_ImportFrom = visit_Import

  def _define(self, node) -> None:
    self.defined.add(node.name)
    self.generic_visit(node)

  visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define

  def visit_Assign(self, node: ast.Assign) -> None:
    if [ast.unparse(t) for t in node.targets] == ["SOURCE_PRIVATE_NAMES"]:
      self.source_declared = ast.literal_eval(node.value)  # not definitions
    else:
      self.generic_visit(node)

  def visit_Attribute(self, node: ast.Attribute) -> None:
    if not _is_self(node.value):
      how = "reads" if isinstance(node.ctx, ast.Load) else "writes"
      self.reads.append((node.attr, node.lineno, how))
    elif not isinstance(node.ctx, ast.Load):
      self.defined.add(node.attr)
    self.generic_visit(node)

  def visit_Call(self, node: ast.Call) -> None:
    by_name = {"getattr": "reads", "hasattr": "reads", "setattr": "writes",
               "delattr": "writes"}.get(getattr(node.func, "id", None))
    if (by_name and len(node.args) >= 2 and not _is_self(node.args[0])
        and isinstance(node.args[1], ast.Constant)):
      self.reads.append((node.args[1].value, node.lineno, by_name))
      for child in [node.args[0], *node.args[2:], *node.keywords]:
        self.visit(child)
    else:
      self.generic_visit(node)

  def visit_Name(self, node: ast.Name) -> None:
    if isinstance(node.ctx, ast.Store):
      self.defined.add(node.id)

  def visit_arg(self, node: ast.arg) -> None:
    self.defined.add(node.arg)

  def visit_Constant(self, node: ast.Constant) -> None:
    if not isinstance(node.value, str) or id(node) in self._docstrings:
      return
    if node.value.isidentifier():  # __slots__, keyword-built namespaces
      self.defined.add(node.value)
    else:
      self._source(node.value, node.lineno)

  def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
    # the text with ``{}`` for each value: f"{name}_value" is no private
    # name, and f"_key_{n}" makes a name (a key), not source
    text = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                   for v in node.values)
    if not text.replace("{}", "x").isidentifier():
      self._source(text, node.lineno)
    for value in node.values:
      if isinstance(value, ast.FormattedValue):
        self.visit(value)

  def _source(self, text: str, line: int) -> None:
    self.in_source += [(name, line) for name in _PRIVATE_IN_TEXT.findall(text)]


# A private name in source text: not part of a longer word, a path
# (``brainshard/_core/program``) or a name made from a value (``{}_value``).
_PRIVATE_IN_TEXT = re.compile(r"(?<![\w/}])_[A-Za-z]\w*(?![\w/])")


def _is_self(node: ast.AST) -> bool:
  return isinstance(node, ast.Name) and node.id in ("self", "cls")


def scan(module: str) -> _Scan:
  found = _SCANS.get(module)
  if found is None or found[0] is not TREES[module]:
    found = _SCANS[module] = (TREES[module], _Scan(TREES[module]))
  return found[1]


_SCANS: dict[str, tuple[ast.AST, _Scan]] = {}


def _targets(module: str, node: ast.AST, modules=MODULES) -> list[str]:
  """The modules of ``modules`` (default: brainshard's) an import statement
  loads."""
  if isinstance(node, ast.Import):
    names = [a.name for a in node.names]
  else:
    if node.level:
      base = module.split(".")
      if modules[module].name != "__init__.py":
        base = base[:-1]
      base = base[:len(base) - node.level + 1]
      source = ".".join(base + ([node.module] if node.module else []))
    else:
      source = node.module
    names = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules
             else source for a in node.names]
  out = []
  for name in names:
    while name not in modules and "." in name:
      name = name.rsplit(".", 1)[0]
    if name in modules:
      out.append(name)
  return out


def import_edges() -> list[tuple[str, str, int]]:
  """``(importer, imported, line)`` for every import that can run."""
  return [(module, target, node.lineno)
          for module in TREES for node in scan(module).imports
          for target in _targets(module, node) if target != module]


def test_edges_are_found():
  # the checks below would pass vacuously on a broken parser
  edges = {(a, b) for a, b, _ in import_edges()}
  assert ("brainshard._core.program.program", "brainshard._core.discovery") in edges
  assert ("brainshard", "brainshard._transforms.jit") in edges
  assert len(edges) > 200


def test_imports_point_down_the_floors():
  upward = [f"{a} (line {line}) imports {b}" for a, b, line in import_edges()
            if floor(b) > floor(a)]
  assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def _cycles(edges, modules=MODULES) -> list[list[str]]:
  graph: dict[str, set[str]] = {m: set() for m in modules}
  for a, b, _ in edges:
    graph[a].add(b)
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found: list[list[str]] = []

  def visit(v: str) -> None:  # Tarjan: strongly connected components
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in graph:
    if v not in index:
      visit(v)
  return found


def test_no_import_circles():
  assert _cycles(import_edges()) == []


def test_the_circle_finder_finds_a_circle():
  edges = import_edges() + [("brainshard._core.state.state",
                             "brainshard._core.frames", 0)]
  assert ["brainshard._core.frames", "brainshard._core.state.state"] in _cycles(
      edges)


# -- benchmarks/: its own graph ---------------------------------------------------

BENCH = ROOT / "benchmarks"
BENCH_MODULES = {_module_name(p): p for p in sorted(BENCH.rglob("*.py"))}


def bench_import_edges() -> list[tuple[str, str, int]]:
  """``(importer, imported, line)`` between benchmarks modules, for every
  import that can run (function-level ones included)."""
  edges = []
  for module, path in BENCH_MODULES.items():
    for node in _Scan(ast.parse(path.read_text(), str(path))).imports:
      edges += [(module, target, node.lineno)
                for target in _targets(module, node, BENCH_MODULES)
                if target != module]
  return edges


def test_benchmark_edges_are_found():
  edges = {(a, b) for a, b, _ in bench_import_edges()}
  assert ("benchmarks.bench_nest", "benchmarks._nest_children") in edges
  assert ("benchmarks._nest_children", "benchmarks._nest_cuba") in edges
  assert ("benchmarks.bench_task", "benchmarks._harness") in edges


def test_no_import_circles_in_benchmarks():
  assert _cycles(bench_import_edges(), BENCH_MODULES) == []


def test_the_circle_finder_finds_a_circle_in_benchmarks():
  # The circle benchmarks had: the NEST mapping reading the command back.
  edges = bench_import_edges() + [("benchmarks._nest_cuba",
                                   "benchmarks.bench_nest", 0)]
  assert ["benchmarks._nest_children", "benchmarks._nest_cuba",
          "benchmarks.bench_nest"] in _cycles(edges, BENCH_MODULES)


def test_no_benchmarks_module_is_over_400_lines():
  # The size rule of the package (test_no_module_is_over_400_lines) holds
  # here too: a benchmark module is one command or one helper.
  long = {name: n for name, n in (
      (str(path.relative_to(BENCH)), len(path.read_text().splitlines()))
      for path in BENCH_MODULES.values()) if n > 400}
  assert not long, long


# -- ARCHITECTURE.md lists every module ----------------------------------------

ARCH = (PKG / "ARCHITECTURE.md").read_text()


def _listed_modules() -> set[str]:
  return set(re.findall(r"`((?:_\w+/(?:\w+/)*)?\w+\.py)`", ARCH))


def test_every_module_is_listed_in_architecture_md():
  on_disk = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
             if not (p.name == "__init__.py" and p.parent != PKG)}
  missing = sorted(on_disk - _listed_modules())
  assert not missing, f"modules ARCHITECTURE.md does not list: {missing}"


def test_every_listed_module_exists():
  gone = sorted(m for m in _listed_modules() if not (PKG / m).is_file())
  assert not gone, f"ARCHITECTURE.md lists modules that do not exist: {gone}"


def test_architecture_md_links_only_inside_the_repository():
  for target in re.findall(r"\]\(([^)]+)\)", ARCH):
    if target.startswith(("http://", "https://", "#")):
      continue
    path = (PKG / target.split("#")[0]).resolve()
    assert ROOT in path.parents and path.exists(), target


# -- private names -------------------------------------------------------------

# Names of other libraries that merely start with an underscore.
FOREIGN = {"_getframe", "_exit", "_replace", "_asdict", "_fields", "_make",
           "_is_owned",  # (an RLock's: held by this thread)
           "_is_gil_enabled",  # (sys's, where the build has it)
           "_register_atexit"}  # (threading's: runs before its threads join)
# Underscore names of a declared surface, and the package that may reach
# them (read, write, or use in generated source):
# - State's slot itself, read and written directly on the core's call path
#   (one attribute load per State per call, where a property would cost a
#   call); elsewhere it is ``state.slot``;
# - its mark (donation.py: None where a compiled call's own output is in the
#   slot, read by nothing since), tested and reset by the same call path and
#   by held.py's write-back, which put those outputs in;
# - its creation number, the key under which the clock of lends names the
#   State (donation.LENDS), read by the generated call when it is made;
# - the note the checkpoint store leaves on an error it has explained, an
#   attribute of its own on an exception object, so it explains it once.
DECLARED = {"_value": "brainshard._core", "_sig": "brainshard._core",
            "_order": "brainshard._core",
            "_bs_noted": "brainshard._scaleout.checkpoint"}


def _declared_families() -> dict[str, str]:
  """``{module path: package}``: the modules ARCHITECTURE.md lists in the
  table of a package's section (``#### `_core/program/`: ...``)."""
  families: dict[str, str] = {}
  package = None
  for line in ARCH.splitlines():
    if line.startswith("#"):
      heading = re.match(r"#### `(_\w+/\w+)/`", line)
      package = heading[1] if heading else None
    row = re.match(r"\| `(_[\w/]+\.py)` \|", line)
    if row and package:
      families[row[1]] = package
  return families


FAMILIES = _declared_families()


def _family(module: str) -> str:
  """A package below a floor is one concept (``_simulation/random/``,
  ``_transforms/shard_map/``): its modules, those its section of
  ARCHITECTURE.md lists, share private names. Any other module is a family
  of its own."""
  path = MODULES[module].relative_to(PKG).as_posix() if module in MODULES \
      else module.split(".", 1)[-1].replace(".", "/") + ".py"
  package = FAMILIES.get(path)
  return "brainshard." + package.replace("/", ".") if package else module


def test_family_membership_is_declared():
  # Each module of a package below a floor is listed in that package's
  # section (its family), and a section lists only its package's modules.
  assert len(FAMILIES) > 40  # the parser found the sections' tables
  outside = [f"{path} listed under {package}/"
             for path, package in FAMILIES.items()
             if not path.startswith(package + "/")]
  unlisted = [str(p.relative_to(PKG)) for p in PKG.glob("_*/*/*.py")
              if p.name != "__init__.py" and
              p.relative_to(PKG).as_posix() not in FAMILIES]
  assert not outside and not unlisted, outside + unlisted


def _family_defs() -> dict[str, set[str]]:
  defs: dict[str, set[str]] = {}
  for module in TREES:
    defs.setdefault(_family(module), set()).update(scan(module).defined)
  return defs


def _reached(module: str, name: str, own: set[str]) -> bool:
  """Whether ``module`` reaches another module's private ``name``."""
  return (name.startswith("_") and not name.startswith("__")
          and name not in own and name not in FOREIGN
          and not module.startswith(DECLARED.get(name, "-") + "."))


def private_reads() -> list[str]:
  """``module: line: how name`` for each private name a module reaches --
  reads, writes, or uses in the source it generates -- that neither it nor
  its family defines."""
  family_defs = _family_defs()
  found = []
  for module in TREES:
    own = family_defs[_family(module)]
    found += [f"{module}:{line}: {how} .{name}"
              for name, line, how in scan(module).reads
              if _reached(module, name, own)]
    found += [f"{module}:{line}: generates source using {name}"
              for name, line in scan(module).in_source
              if _reached(module, name, own)]
    for node in scan(module).imports:
      src = getattr(node, "module", None) or ""
      if src.startswith("brainshard") and _family(src) != _family(module):
        found += [f"{module}:{node.lineno}: imports {a.name}"
                  for a in node.names
                  if a.name.startswith("_") and not a.name.startswith("__")]
  return found


def undeclared_source_names() -> list[str]:
  """Per module, the private names in its source text that its family does
  not define, against its ``SOURCE_PRIVATE_NAMES``: each one used must be
  declared there, each one declared used."""
  family_defs = _family_defs()
  found = []
  for module in TREES:
    s = scan(module)
    used = {name for name, _ in s.in_source}
    foreign = used - family_defs[_family(module)] - FOREIGN
    declared = set(s.source_declared or ())
    found += [f"{module}: generates source using {name}, not in "
              "SOURCE_PRIVATE_NAMES" for name in sorted(foreign - declared)]
    found += [f"{module}: SOURCE_PRIVATE_NAMES lists {name}, which no "
              "source text uses" for name in sorted(declared - used)]
  return found


def test_no_module_reads_another_modules_private_names():
  found = private_reads()
  assert not found, ("private names read across modules (declare them, see "
                     "State and Frame's internal surface):\n" + "\n".join(found))


def test_private_names_in_generated_source_are_declared():
  found = undeclared_source_names()
  assert not found, "\n".join(found)


def test_generated_source_is_scanned():
  # the check above would pass vacuously if the templates were not seen
  fastcall = scan("brainshard._core.program.fastcall")
  assert {"_value", "_sig"} <= {name for name, _ in fastcall.in_source}
  assert fastcall.source_declared == ("_value", "_sig")


def test_the_private_name_check_sees_writes_and_generated_source():
  tree = ast.parse(
      "SOURCE_PRIVATE_NAMES = ('_value',)\n"
      "def f(state, name):\n"
      "  state._value = 1\n"         # State's slot: only inside _core
      "  del state._placed\n"
      "  setattr(state, '_sig', None)\n"
      "  return getattr(state, '_order')\n"
      "ENTRY = 'if x._sig is None:\\n  y = x._value'\n"
      "PART = f'{name}._placed and {name}_value'\n")  # {}_value: a name's
  TREES["brainshard._transforms.probe"] = tree
  try:
    found = [r for r in private_reads()
             if r.startswith("brainshard._transforms.probe:")]
    undeclared = [r for r in undeclared_source_names()
                  if r.startswith("brainshard._transforms.probe:")]
  finally:
    del TREES["brainshard._transforms.probe"]
  probe = "brainshard._transforms.probe:"
  assert found == [probe + "3: writes ._value", probe + "4: writes ._placed",
                   probe + "5: writes ._sig", probe + "6: reads ._order",
                   probe + "7: generates source using _sig",
                   probe + "7: generates source using _value",
                   probe + "8: generates source using _placed"]
  assert undeclared == [
      "brainshard._transforms.probe: generates source using _placed, not in "
      "SOURCE_PRIVATE_NAMES",
      "brainshard._transforms.probe: generates source using _sig, not in "
      "SOURCE_PRIVATE_NAMES"]


def test_the_private_name_check_sees_a_private_read():
  tree = ast.parse("from brainshard._core.state.state import _UNSET\n"
                   "def f(state):\n  return state._value\n")  # not in _core
  TREES["brainshard._transforms.probe"] = tree
  try:
    found = [r for r in private_reads()
             if r.startswith("brainshard._transforms.probe:")]
  finally:
    del TREES["brainshard._transforms.probe"]
  assert found == ["brainshard._transforms.probe:3: reads ._value",
                   "brainshard._transforms.probe:1: imports _UNSET"]


# -- stale module names ----------------------------------------------------------

# Flat modules of the package before it had floors, and modules since moved.
OLD_FLAT = ("args", "axes", "compat", "cond", "control", "describe",
            "donation", "fastcall", "jit", "loops", "multihost", "place",
            "placement", "progress", "random", "shard_map", "specs", "state",
            "stateful")
# Modules that moved into a package of their concept (old path, no ".py").
MOVED = (
    "_core/state",
    "_core/values",
    "_core/state_extras",
    "_core/state_ref",
    "_core/state_dict",
    "_core/state_filter",
    "_core/program",
    "_core/fastcall",
    "_core/placement_source",
    "_core/held",
    "_core/donation",
    "_core/placement",
    "_transforms/shard_map",
    "_transforms/shard_plan",
    "_transforms/shard_frames",
    "_transforms/shard_placement",
    "_transforms/shard_errors",
    "_transforms/vmap",
    "_transforms/vmap_axes",
    "_transforms/autodiff",
    "_transforms/grad_states",
    "_scaleout/checkpoint",
    "_scaleout/checkpoint_store",
    "_simulation/random",
    "_simulation/random_draw",
    "_simulation/random_blocks",
    "_simulation/random_counts",
    "_simulation/random_discrete",
    "_simulation/random_samplers",
    "_simulation/random_extra",
    "_simulation/random_extra_api",
    "_simulation/runner",
    "_simulation/runner_programs",
    "_simulation/chunked",
    "_simulation/progress_chunks",
    "_simulation/monitors",
    "_simulation/recorder",
    "_simulation/records",
    "_simulation/spikes",
    "_simulation/neuron_take",
    "_simulation/plots")
STALE = re.compile(
    r"(?<![\w/.])(?:brainshard/)?_(?:%s)\.py\b|brainshard\._(?:%s)\b"
    r"|_simulation[./]progress\b" % ("|".join(OLD_FLAT), "|".join(OLD_FLAT))
    + "".join(r"|(?<![\w/.])%s\.py\b" % re.escape(m) for m in MOVED)
    # the dotted name, where no package took it over (_core/state/ did)
    + "".join(r"|brainshard\.%s(?![\w.])" % re.escape(m.replace("/", "."))
              for m in MOVED if not (PKG / m).is_dir()))


def _text_files():
  yield from PKG.rglob("*.py")
  yield from PKG.glob("*.md")
  for p in (ROOT / "docs").rglob("*.md"):
    if p.name != "benchmarks.md":  # regenerated by benchmarks/, not by hand
      yield p
  yield ROOT / "benchmarks" / "ANALYSIS.md"


@pytest.mark.parametrize("text", ["see brainshard/_fastcall.py", "`_state.py`",
                                  "brainshard._jit", "_simulation/progress.py",
                                  "`_core/held.py`", "brainshard._core.held import",
                                  "_simulation/random_draw.py"])
def test_stale_pattern_matches_old_names(text):
  assert STALE.search(text)


@pytest.mark.parametrize("text", ["brainshard/_core/state/state.py",
                                  "_core/program/fastcall.py", "random_state.py",
                                  "brainshard._core.jit", "_transforms.progress"])
def test_stale_pattern_spares_current_names(text):
  assert not STALE.search(text)


def test_no_stale_module_names():
  stale = [f"{p.relative_to(ROOT)}:{i}: {m.group(0)}"
           for p in _text_files() if p.exists()
           for i, line in enumerate(p.read_text().splitlines(), 1)
           for m in STALE.finditer(line)]
  assert not stale, "old module names:\n" + "\n".join(stale)


# -- caches ----------------------------------------------------------------------

def test_no_functools_caches():
  # ARCHITECTURE.md: every cache is a Cache (or registered), so that
  # bs.clear_caches() empties it; a functools cache it would never reach.
  found = [f"{module}:{node.lineno}"
           for module, tree in TREES.items() for node in ast.walk(tree)
           if (isinstance(node, ast.Attribute) and node.attr in (
               "lru_cache", "cache", "cached_property")
               and isinstance(node.value, ast.Name)
               and node.value.id == "functools")
           or (isinstance(node, ast.ImportFrom) and node.module == "functools"
               and {"lru_cache", "cache"} & {a.name for a in node.names})]
  assert not found, f"functools caches bs.clear_caches() cannot clear: {found}"


if __name__ == "__main__":  # python tests/test_architecture.py: the edges
  for a, b, line in sorted(set(import_edges())):
    print(f"{a} -> {b}  (line {line})")


def test_every_package_states_its_concept():
  # A package below a floor holds one concept: its docstring says which,
  # and ARCHITECTURE.md gives it a section (its modules share private names).
  inits = sorted(PKG.glob("_*/*/__init__.py"))
  assert inits  # the packages exist; the check below is not vacuous
  for init in inits:
    rel = init.parent.relative_to(PKG).as_posix()
    assert ast.get_docstring(ast.parse(init.read_text())), f"{rel}: no docstring"
    assert f"#### `{rel}/`" in ARCH, f"ARCHITECTURE.md has no section for {rel}/"


def test_no_module_is_a_dumping_ground():
  # A module is one idea, and an idea that needs more becomes a package of
  # modules; no line cap splits an idea, but past 700 lines a module holds
  # more than one.
  long = {name: n for name, n in (
      (str(path.relative_to(PKG)), len(path.read_text().splitlines()))
      for path in PKG.rglob("*.py")) if n > 700}
  assert not long, long


# -- tests follow the code ------------------------------------------------------

# A module whose tests live in a file named for something else: that file,
# and why (a module the public API reaches only through others).
TESTED_IN = {
    "_core/keys.py": ("test_random.py", "typed keys: every RandomState test"),
    "_core/stateful_function.py": ("test_discovery.py",
                                   "bs.StatefulFunction is the discovery"),
    "_core/threads.py": ("test_fastcall.py", "the slots' lock and window"),
    "_core/toplevel.py": ("test_errors.py", "writes under foreign traces"),
    "_models/analysis.py": ("test_spike_analysis.py", "rates and CV of ISI"),
    "_models/delays.py": ("test_delivery.py", "delay_steps as NEST rounds"),
    "_models/layout.py": ("test_population.py", "populations on one axis"),
    "_models/nest_params.py": ("test_network.py", "unknown NEST parameters"),
    "_models/surrogate.py": ("test_delivery_grad.py", "surrogate gradients"),
    "_scaleout/move.py": ("test_task.py", "arrays between sub-meshes"),
    "_transforms/control.py": ("test_loops.py", "loops and branches"),
    "launch.py": ("test_multihost.py", "several processes"),
    "models.py": ("test_network.py", "bs.models' public names"),
}


def test_every_module_has_its_tests():
  """``tests/test_<module>.py``, or for a module of a package a
  ``tests/test_<package>*.py``, or a declared file (TESTED_IN)."""
  tests = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
  missing = []
  for path in sorted(PKG.rglob("*.py")):
    rel = path.relative_to(PKG)
    if path.name == "__init__.py" or str(rel.as_posix()) in TESTED_IN:
      continue
    names = [path.stem] + ([rel.parts[1]] if len(rel.parts) == 3 else [])
    if not any(t == f"test_{n}" or t.startswith(f"test_{n}_")
               for n in names for t in tests):
      missing.append(rel.as_posix())
  assert not missing, f"modules without tests named for them: {missing}"
  gone = [f for f, _ in TESTED_IN.values() if not (ROOT / "tests" / f).exists()]
  assert not gone, gone
