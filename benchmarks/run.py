"""Run brainshard's benchmarks: ``python -m benchmarks [--quick]`` or
``python benchmarks/run.py``.

Every figure is the ratio of brainshard's time to hand-threaded pure JAX
doing the same work, timed interleaved in this process (machines here are
shared and noisy); absolute times are printed beside, never asserted.
Results go to ``benchmarks/results/<name>.json`` and are rendered into
``docs/benchmarks.md`` (with ``docs/benchmarks_states.png``).

The peers (brainstate, Flax NNX) run the same workloads when installed
(``pip install -e .[bench]``); pass ``--no-peers`` to skip them.
"""

from __future__ import annotations

import os
import sys

# 8 faked CPU devices, before JAX starts (also for `python benchmarks/run.py`).
_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402


def _meta(args) -> dict:
  import jax
  import brainshard as bs
  from benchmarks import _peers
  meta = dict(
      date=datetime.datetime.now().isoformat(timespec="seconds"),
      quick=args.quick, repeats=args.repeats,
      python=platform.python_version(), jax=jax.__version__,
      brainshard=bs.__version__, platform=platform.platform(),
      cpu_count=os.cpu_count(), devices=f"{jax.device_count()} x "
      f"{jax.devices()[0].device_kind}",
      peers=_peers.versions() if args.peers else {})
  try:
    meta["load_avg"] = os.getloadavg()
  except OSError:
    pass
  return meta


def main(argv: list[str] | None = None) -> int:
  from benchmarks._workloads import WORKLOADS, Ctx
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help="fewer sizes and repeats (under 2 minutes on 2 cores)")
  parser.add_argument("--only", default="",
                      help=f"comma-separated subset of {','.join(WORKLOADS)}")
  parser.add_argument("--repeats", type=int, default=None,
                      help="interleaved repeats per comparison")
  parser.add_argument("--no-peers", dest="peers", action="store_false",
                      help="skip brainstate / Flax NNX even if installed")
  parser.add_argument("--profile", action="store_true",
                      help="also profile brainshard's per-call path")
  parser.add_argument("--name", default=None,
                      help="results file name (default: quick or full)")
  parser.add_argument("--no-docs", dest="docs", action="store_false",
                      help="do not render docs/benchmarks.md")
  args = parser.parse_args(argv)
  if args.repeats is None:
    args.repeats = 9 if args.quick else 25
  # The peers warn about deprecated calls on every call; silence that once,
  # process-wide, so no per-call warning machinery is timed.
  warnings.filterwarnings("ignore", category=DeprecationWarning)
  warnings.filterwarnings("ignore", module=r"(flax|brainstate|brainunit)")

  chosen = [w for w in (args.only.split(",") if args.only else WORKLOADS) if w]
  unknown = set(chosen) - set(WORKLOADS)
  if unknown:
    parser.error(f"unknown workloads {sorted(unknown)}; pick from {list(WORKLOADS)}")
  ctx = Ctx(quick=args.quick, peers=args.peers, repeats=args.repeats)
  t0 = time.perf_counter()
  results = []
  for name in chosen:
    print(f"[{name}]", flush=True)
    t = time.perf_counter()
    results += WORKLOADS[name](ctx)
    print(f"  ({time.perf_counter() - t:.1f} s)", flush=True)
  doc = dict(meta=_meta(args), results=results)
  if args.profile:
    from benchmarks._profile import profile_all
    doc["profile"] = profile_all()
  doc["meta"]["wall_s"] = time.perf_counter() - t0

  out_dir = os.path.join(_ROOT, "benchmarks", "results")
  os.makedirs(out_dir, exist_ok=True)
  name = args.name or ("quick" if args.quick else "full")
  path = os.path.join(out_dir, f"{name}.json")
  if args.only and os.path.exists(path):  # merge into the earlier run
    with open(path) as f:
      old = json.load(f)
    keep = [r for r in old.get("results", []) if r["workload"] not in
            {r2["workload"] for r2 in results}]
    doc["results"] = keep + results
    if "profile" not in doc and "profile" in old:
      doc["profile"] = old["profile"]
  with open(path, "w") as f:
    json.dump(doc, f, indent=1)
  print(f"wrote {os.path.relpath(path, _ROOT)} in {doc['meta']['wall_s']:.1f} s")
  if args.docs:
    from benchmarks._report import render
    md = render(doc, os.path.join(_ROOT, "docs"))
    print(f"wrote {os.path.relpath(md, _ROOT)}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
