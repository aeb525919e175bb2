"""Every Python block in docs/ and README.md runs as written.

Each page's ```` ```python ```` blocks run in order in one namespace, on the
8 faked CPU devices, one test per page. A block written as a doctest
(``>>>``) is run as one, so its shown outputs are checked too. A block that
cannot run here (it joins other hosts, say) carries, on the line before
it, ``<!-- snippet: not run (why) -->``: visible in the page's source, and
read here. Where a page says what its code gives, ``CHECKS`` checks it
(these were once separate tests per page: one place now, each block run
once).
"""

from __future__ import annotations

import dataclasses
import doctest
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import brainshard as bs

ROOT = pathlib.Path(__file__).resolve().parents[1]

# A code fence: its indent (a block inside a tab or a list is indented), its
# backticks and its language.
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})[ \t]*(?P<lang>[^`\s]*)")
_OPT_OUT = re.compile(r"^\s*<!-- snippet: not run \((?P<why>[^()]*(?:\([^()]*\)[^()]*)*)\) -->\s*$")
# Anything that looks like an opt-out, so a misspelt one fails loudly
# instead of being silently ignored (and the block then failing oddly).
_OPT_OUT_LIKE = re.compile(r"<!--\s*snippet", re.I)


@dataclasses.dataclass
class Block:
  page: str       # relative to the repository root
  line: int       # 1-based line of the opening fence
  code: str       # dedented by the fence's indent
  skip: str | None  # the opt-out's reason, or None: the block runs

  @property
  def doctest(self) -> bool:
    return self.code.lstrip().startswith(">>>")


def pages() -> list[str]:
  found = sorted(p.relative_to(ROOT).as_posix()
                 for p in (ROOT / "docs").rglob("*.md"))
  return ["README.md"] + found


def blocks(page: str) -> list[Block]:
  """The page's Python blocks, with the opt-out (if any) before each."""
  lines = (ROOT / page).read_text().splitlines()
  found, i = [], 0
  while i < len(lines):
    m = _FENCE.match(lines[i])
    if not m:
      i += 1
      continue
    indent, ticks = m["indent"], m["ticks"]
    end = i + 1
    while end < len(lines) and not re.fullmatch(
        re.escape(indent) + "`{%d,}[ \t]*" % len(ticks), lines[end]):
      end += 1
    if m["lang"] in ("python", "py", "pycon"):
      body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
              for ln in lines[i + 1:end]]
      prev = i - 1
      while prev >= 0 and not lines[prev].strip():
        prev -= 1
      opt = _OPT_OUT.match(lines[prev]) if prev >= 0 else None
      found.append(Block(page, i + 1, "\n".join(body) + "\n",
                         opt["why"].strip() if opt else None))
    i = end + 1
  return found


def run_block(block: Block, ns: dict) -> None:
  name = f"{block.page}:{block.line}"
  if not block.doctest:
    # Line numbers in a traceback point into the page.
    code = "\n" * block.line + block.code
    exec(compile(code, block.page, "exec"), ns)
    return
  test = doctest.DocTestParser().get_doctest(
      block.code, ns, name, block.page, block.line)
  report: list[str] = []
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
  # clear_globs=False: the page's later blocks use this one's names.
  result = runner.run(test, out=report.append, clear_globs=False)
  ns.update(test.globs)  # a DocTest runs in a copy of the names it is given
  assert not result.failed, "".join(report)


# ---------------------------------------------------------------------------
# What some pages say their code gives. Each check runs after the block with
# that index (negative: counted from the page's end), with the page's
# namespace and what the page printed since the last check.

def _readme(ns, out):
  v, n = ns["v"], ns["n"]
  # Three steps of v += (1 - v) / 10 from zero, on every element.
  expected = 1 - 0.9 ** 3
  np.testing.assert_allclose(np.asarray(v.value), np.full(n, expected),
                             rtol=1e-6)
  np.testing.assert_allclose(float(ns["total"]), n * expected, rtol=1e-5)
  assert "P('x'" in out.out


def _index_loop(ns, out):
  n = ns["n"]
  # v relaxes towards 1 with tau = 10: after k steps v = 1 - 0.9**k.
  assert abs(float(ns["total"]) - n * (1 - 0.9 ** 3)) < 1e-4
  assert ns["totals"].shape == (1000,)
  assert abs(float(ns["totals"][-1]) - n * (1 - 0.9 ** 1003)) < 1e-3


def _simulation_demo(ns, out):
  assert "mean rate" in out.out and "CUBA" in out.err  # the progress bar


def _ensemble_sweep(ns, out):
  assert "(1000, 8)" in out.out
  V, W, tau = ns["V"], ns["W"], ns["tau"]

  def pure(v, _):
    v = jax.vmap(lambda v, t: v + (-v + W.value @ v + 1.0) / t)(v, tau.value)
    return v, None
  ref = jax.lax.scan(pure, jnp.zeros((8, 100)), length=1000)[0]
  np.testing.assert_allclose(V.value, ref, atol=1e-5, rtol=1e-5)
  ns["__reference"] = ref


def _ensemble_sharded(ns, out):
  assert "(8,)" in out.out
  V, W, tau, ref = ns["V"], ns["W"], ns["tau"], ns["__reference"]
  # tau now lives split over the mesh where the sharded call read it (a
  # State is placed once); the reference takes its numbers.
  want = jax.vmap(lambda v, t: v + (-v + W.value @ v + 1.0) / t)(
      ref, np.asarray(tau.value))
  np.testing.assert_allclose(V.value, want, atol=1e-5, rtol=1e-5)


def _checkpointing(ns, out):
  v = ns["v"]
  np.testing.assert_array_equal(bs.gather(v), ns["after_500"])
  assert v.sharding.spec == P("x") and v.sharding.mesh.shape == {"a": 2, "x": 4}


def _runner(ns, out):
  text = out.out
  assert "<Result: 2000 steps" in text and "memmap" in text
  # record_to: read back with bs.load_records and with plain zarr; continued
  assert "CV of ISI" in text and "0 2000 4000 True" in text and "\n3000\n" in text
  assert "10 2" in text.replace("Array(", "").replace(", dtype=int32)", "")


def _models_delivery(ns, out):
  spikes = ns["spikes"]
  assert spikes.shape == (100, 10, 200) and "(100, 10, 200)" in out.out
  assert 1 < float(spikes.mean()) / ns["h"] * 1000 < 200  # Hz: it fires


def _multihost_gather(ns, out):
  np.testing.assert_array_equal(ns["power"], 0.25)  # (1 - 0.5) ** 2
  assert "0.25" in out.out


def _submesh(ns, out):
  # the loop by hand: 100 blocks of both areas on the host
  sa, sb = np.zeros(1600), np.zeros(800)
  va, vb = np.zeros(1600), np.zeros(800)
  for _ in range(100):
    va = 0.95 * va + 0.05 * (1.0 + np.repeat(sb, 2))
    vb = 0.9 * vb + 0.1 * sa.reshape(-1, 2).mean(1)
    sa, sb = np.tanh(va), np.tanh(vb)
  np.testing.assert_allclose(ns["sa"], sa, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ns["sb"], sb, rtol=1e-5, atol=1e-6)
  # each area's State stayed on its own half
  assert set(ns["va"].value.devices()) == set(ns["mesh_a"].devices.flat)


def _training_data_parallel(ns, out):
  w, b = ns["w"], ns["b"]
  x, y = np.asarray(ns["x"]), np.asarray(ns["y"])
  # The page's claim: the shard_map gradient is the single-device one.
  loss = lambda w_, b_: jnp.mean((x @ w_ + b_ - y) ** 2)  # noqa: E731
  want = jax.value_and_grad(loss, argnums=(0, 1))(
      np.asarray(w.value), np.asarray(b.value))
  np.testing.assert_allclose(ns["value"], want[0], rtol=1e-6)
  np.testing.assert_allclose(ns["grads"][w], want[1][0], rtol=1e-6)
  np.testing.assert_allclose(ns["grads"][b], want[1][1], rtol=1e-6)


def _network(ns, out):
  assert ns["sr"].n_events > 0
  assert ns["mm"].traces["V_m"].shape == (200, 5)  # 300 ms / 1.5 ms
  assert ns["rates"].shape[0] == ns["sr"].spikes.n


def _plasticity(ns, out):
  assert "events" in out.out
  assert ns["net"].plasticity_overflow == 0
  assert ns["hist"].counts[-1].sum() == 40 * 8  # every synapse counted
  assert ns["w"].max() != ns["w"].min()  # STDP changed the weights


# page -> {block: check(ns, captured)}: a block by its position (negative
# from the end) or by a line of its code, which survives sections added above.
CHECKS = {
    "README.md": {0: _readme},
    "docs/network.md": {0: _network},
    "docs/index.md": {1: _index_loop},
    "docs/simulation.md": {0: _simulation_demo},
    "docs/ensemble.md": {0: _ensemble_sweep, 1: _ensemble_sharded},
    "docs/checkpointing.md": {-1: _checkpointing},
    "docs/runner.md": {-1: _runner},
    "docs/models_delivery.md": {0: _models_delivery},
    "docs/multihost.md": {2: _multihost_gather},
    "docs/submesh.md": {0: _submesh},
    "docs/plasticity.md": {0: _plasticity},
    "docs/training.md": {
        "x, y = jnp.ones((64, 3))": _training_data_parallel},
}

# Optional dependencies a page's code imports: (module, minimum version).
NEEDS = {
    "docs/runner.md": [("zarr", "3"), ("matplotlib", None)],
    "docs/training.md": [("optax", None)],
    "docs/migrating-from-brainstate.md": [("optax", None)],
}

# Pages whose code takes over ~0.8 s (the quick tier's bound): they build a
# network, run a simulation or compile many programs.
SLOW = {
    "README.md", "docs/index.md", "docs/simulation.md", "docs/ensemble.md",
    "docs/checkpointing.md", "docs/runner.md", "docs/models.md",
    "docs/models_delivery.md", "docs/scaleout.md", "docs/submesh.md",
    "docs/training.md", "docs/migrating-from-brainstate.md",
    "docs/network.md",
}

_WITH_CODE = [p for p in pages() if blocks(p)]


def _param(page):
  return pytest.param(page, id=page,
                      marks=[pytest.mark.slow] if page in SLOW else [])


@pytest.mark.parametrize("page", [_param(p) for p in _WITH_CODE])
def test_page_code_runs(page, tmp_path, monkeypatch, capsys):
  for mod, version in NEEDS.get(page, []):
    pytest.importorskip(mod, minversion=version)
  # As a reader runs it: from the repository root (pages import
  # `examples.*`), but any file a page writes goes to a temporary folder.
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, "path", [str(ROOT)] + sys.path)
  checks = CHECKS.get(page, {})
  found = blocks(page)
  ns: dict = {"__name__": "__main__"}
  checked = set()
  for k, block in enumerate(found):
    if block.skip is not None:
      continue
    run_block(block, ns)
    jax.effects_barrier()  # a progress bar prints from a callback
    for key, check in checks.items():  # by position, or by a line it holds
      if key in (k, k - len(found)) or (isinstance(key, str)
                                        and key in block.code):
        check(ns, capsys.readouterr())
        checked.add(key)
  # A check keyed to a block that moved or opted out would pass unseen.
  assert checked == set(checks), f"checks of no block that ran: {set(checks) - checked}"
  if "matplotlib.pyplot" in sys.modules:
    sys.modules["matplotlib.pyplot"].close("all")


def test_every_page_with_code_is_found():
  # The pages this module is known to run: a page moved or renamed keeps
  # its code tested (it would simply fall out of the list otherwise).
  assert {"README.md", "docs/index.md", "docs/runner.md",
          "docs/models_delivery.md", "docs/scaleout.md"} <= set(_WITH_CODE)
  assert set(CHECKS) <= set(_WITH_CODE) and set(NEEDS) <= set(_WITH_CODE)
  assert SLOW <= set(_WITH_CODE)


def test_every_opt_out_says_why_and_precedes_a_block():
  bad = []
  for page in pages():
    lines = (ROOT / page).read_text().splitlines()
    opted = {b.line for b in blocks(page) if b.skip is not None}
    for i, line in enumerate(lines):
      if not _OPT_OUT_LIKE.search(line):
        continue
      m = _OPT_OUT.match(line)
      if not m or len(m["why"].split()) < 3:
        bad.append(f"{page}:{i + 1}: say why, as "
                   "<!-- snippet: not run (why, in a few words) -->")
        continue
      nxt = i + 1
      while nxt < len(lines) and not lines[nxt].strip():
        nxt += 1
      if nxt + 1 not in opted:
        bad.append(f"{page}:{i + 1}: not right before a ```python block")
  assert not bad, "\n".join(bad)


def test_snippets_use_public_names_only():
  """Pages show what users write: ``import brainshard as bs``, ``bs.models``
  and ``bs.random``, never a private module."""
  private = re.compile(r"\b(?:from|import)\s+brainshard\._|\bbs\._\w")
  bad = [f"{b.page}:{b.line}" for p in pages() for b in blocks(p)
         if private.search(b.code)]
  assert not bad, bad


def test_the_parser_reads_fences_opt_outs_and_doctests(tmp_path, monkeypatch):
  page = tmp_path / "p.md"
  page.write_text(
      "text\n```python\nx = 1\n```\n\n```bash\nls\n```\n"
      "<!-- snippet: not run (needs two hosts (a cluster)) -->\n\n"
      "```python\nraise SystemExit\n```\n"
      "=== \"tab\"\n\n    ```python\n    >>> x + 1\n    2\n    ```\n")
  monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
  got = blocks("p.md")
  assert [(b.line, b.skip, b.doctest) for b in got] == [
      (2, None, False), (11, "needs two hosts (a cluster)", False),
      (16, None, True)]
  assert got[2].code == ">>> x + 1\n2\n"
  ns: dict = {}
  run_block(got[0], ns)
  run_block(got[2], ns)
  with pytest.raises(AssertionError, match="Expected"):
    run_block(Block("p.md", 1, ">>> x\n3\n", None), ns)
