"""The JAX internals brainshard relies on exist in the installed JAX.

brainshard/_core/compat.py is the only module that touches JAX internals.
If a JAX upgrade moves one, this test fails naming it (and the public API
that would replace it is in compat.py's docstring), instead of brainshard
failing somewhere deep inside a trace.
"""

import importlib
import pathlib
import re

import jax
import pytest

import brainshard as bs

# (module, attribute path) for every internal compat.py uses.
INTERNALS = [
    ("jax._src.core", "trace_ctx"),
    ("jax._src.core", "eval_trace"),
    ("jax._src.core", "set_current_trace"),
    ("jax._src.core", "mapped_leading_aval"),
    ("jax._src.interpreters.partial_eval", "DynamicJaxprTrace.new_arg"),
    ("jax._src.source_info_util", "current"),
    ("jax._src.traceback_util", "register_exclusion"),
    ("jax._src.traceback_util", "api_boundary"),
    ("jax._src.util", "clear_all_caches"),
    ("jax._src.array", "ArrayImpl"),
    ("jax.extend.core", "get_opaque_trace_state"),
    ("jax.extend.core", "jaxpr_as_fun"),
    ("jax.extend.random", "define_prng_impl"),
    ("jax.extend.random", "threefry2x32_p"),
    ("jax.extend.random", "threefry_prng_impl"),
    ("jax.core", "Tracer"),
    ("jax.core", "ShapedArray"),
]

PACKAGE = pathlib.Path(bs.__file__).parent


def _lookup(module: str, path: str):
  obj = importlib.import_module(module)
  for part in path.split("."):
    obj = getattr(obj, part)
  return obj


def test_every_jax_internal_brainshard_uses_exists():
  missing = []
  for module, path in INTERNALS:
    try:
      _lookup(module, path)
    except (ImportError, AttributeError) as e:
      missing.append(f"{module}.{path} ({type(e).__name__}: {e})")
  assert not missing, (
      f"JAX {jax.__version__} lacks internals brainshard needs: "
      + "; ".join(missing)
      + ". Adapt brainshard/_core/compat.py (its docstring says what each is "
      "for and which public API would replace it).")


def test_only_compat_imports_jax_internals():
  pattern = re.compile(r"^\s*(from|import)\s+jax\.(_src|extend|core|interpreters)\b",
                       re.M)
  offenders = [
      str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
      if path.name != "compat.py" and pattern.search(path.read_text())]
  assert not offenders, f"JAX internals imported outside compat.py: {offenders}"
  uses_internal_attrs = re.compile(r"\bjax\.(core|_src|extend)\.")
  offenders = [
      str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
      if path.name != "compat.py" and uses_internal_attrs.search(path.read_text())]
  assert not offenders, f"jax.core/jax._src used outside compat.py: {offenders}"


def test_compat_imports_only_listed_internals():
  source = (PACKAGE / "_core" / "compat.py").read_text()
  imported = set(re.findall(r"^from (jax\._src[\w.]*|jax\.extend[\w.]*|jax\.core)"
                            r" import", source, re.M))
  listed = {module for module, _ in INTERNALS}
  listed |= {m.rsplit(".", 1)[0] for m in listed}
  assert imported <= listed | {"jax._src"}, imported - listed


@pytest.mark.parametrize("module,path", INTERNALS)
def test_internal_is_named_in_compat_docstring(module, path):
  doc = importlib.import_module("brainshard._core.compat").__doc__
  assert path.split(".")[-1] in doc, f"{module}.{path} is not documented"
