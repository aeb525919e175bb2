#!/usr/bin/env bash
# Every GPU figure of docs/benchmarks.md and docs/nest.md in one command, for
# a machine with one CUDA GPU and JAX installed (no network needed: the
# checkout is put on PYTHONPATH, nothing is installed):
#
#   bash benchmarks/gpu.sh [OUT_DIR]          # default benchmarks/results/gpu
#
# Sections, each under its own time limit so one slow section cannot take the
# others' time: the machine, which call path bs.jit takes (dispatch-probe),
# the dispatch ratios against pure JAX, the microcircuit at scale 0.1 and 1.0
# and CUBA at 40 k / 400 k / 4 M neurons (brainshard beside its pure-JAX twin),
# and the tests that compare GPU results with pure JAX. GPU_SMOKE=1 shrinks
# every section (a check of the script itself, on any machine).
set -u
out=${1:-${OUT:-benchmarks/results/gpu}}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Several processes share the GPU (the nest tables run one child per case).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
smoke=${GPU_SMOKE:-0}

section() {  # section NAME SECONDS COMMAND...: run, log to $out/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit} s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $py -c "import sys, jax; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices())"
} | tee "$out/machine.txt"

if [ "$smoke" = 1 ]; then
  mc=(--scales 0.01 --mc-duration 0.02 --warmup 10)
  cuba=(--sizes 4000 --duration 0.05 --warmup 10)
else
  mc=(--scales 0.1,1.0)
  cuba=(--sizes 40000,400000,4000000)
fi
section probe 30 $py -m benchmarks dispatch-probe
section dispatch 100 $py -m benchmarks suite --quick --only dispatch --no-peers \
  --no-docs --name gpu_dispatch
section microcircuit 220 $py -m benchmarks nest --only microcircuit \
  --impls brainshard,twin "${mc[@]}" --repeats 1 --out gpu_microcircuit
section cuba 120 $py -m benchmarks nest --only cuba --impls brainshard,twin \
  "${cuba[@]}" --repeats 1 --out gpu_cuba
section tests 60 $py -m pytest -q -p no:cacheprovider -n 0 -o addopts= \
  tests/test_microcircuit_twin.py tests/test_random.py
for f in gpu_dispatch gpu_microcircuit gpu_cuba; do
  cp benchmarks/results/$f.md "$out/" 2>/dev/null
done
echo "== results in $out"
