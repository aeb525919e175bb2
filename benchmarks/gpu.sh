#!/usr/bin/env bash
# Every GPU figure of docs/benchmarks.md and docs/nest.md in one command, for
# a machine with one CUDA GPU and JAX installed (no network needed: the
# checkout is put on PYTHONPATH, nothing is installed):
#
#   bash benchmarks/gpu.sh [OUT_DIR]          # default benchmarks/results/gpu
#
# Sections, each under its own time limit so one slow section cannot take the
# others' time: the machine, which call path bs.jit takes (dispatch-probe),
# the dispatch ratios against pure JAX, delivery alone (ns per synaptic event,
# Brunel and the microcircuit), the microcircuit at scale 0.1 and 1.0
# and CUBA at 40 k / 400 k / 4 M neurons (brainshard beside its pure-JAX twin),
# the microcircuit's twin test on the GPU, and the quick test tier on this
# machine's JAX (its CPU). GPU_SMOKE=1 shrinks every section (a check of the
# script itself, on any machine); GPU_SECTIONS="dispatch cuba" runs only
# those; GPU_CUBA_SIZES, GPU_MC_SCALES, GPU_*_REPEATS and GPU_*_LIMIT (the
# sections' seconds) size them.
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
  mc=(--scales 0.01 --mc-duration 0.02 --warmup 10 --repeats 1)
  cuba=(--sizes 4000 --duration 0.05 --warmup 10 --repeats 1)
else
  mc=(--scales "${GPU_MC_SCALES:-0.1,1.0}" --repeats "${GPU_MC_REPEATS:-1}")
  cuba=(--sizes "${GPU_CUBA_SIZES:-40000,400000,4000000}"
        --repeats "${GPU_CUBA_REPEATS:-1}")
fi
want() { [[ " ${GPU_SECTIONS:-probe dispatch delivery microcircuit cuba tests} " == *" $1 "* ]]; }
want probe && section probe 30 $py -m benchmarks dispatch-probe
want dispatch && section dispatch 100 $py -m benchmarks suite --quick \
  --only dispatch --no-peers --no-docs --name gpu_dispatch
if [ "$smoke" = 1 ]; then
  delivery=(--shapes brunel --steps 20 --repeats 1)
else
  delivery=(--steps "${GPU_DELIVERY_STEPS:-200}" --repeats "${GPU_DELIVERY_REPEATS:-5}")
fi
want delivery && section delivery "${GPU_DELIVERY_LIMIT:-240}" $py -m benchmarks \
  delivery "${delivery[@]}" --json benchmarks/results/gpu_delivery.json
want microcircuit && section microcircuit "${GPU_MC_LIMIT:-220}" $py -m benchmarks \
  nest --only microcircuit --impls brainshard,twin "${mc[@]}" --out gpu_microcircuit
want cuba && section cuba "${GPU_CUBA_LIMIT:-300}" $py -m benchmarks nest \
  --only cuba --impls brainshard,twin "${cuba[@]}" --out gpu_cuba
if want tests; then
  # The example and its pure-JAX twin give the same spikes on the GPU (this
  # file needs none of tests/conftest.py's 8 faked CPU devices) ...
  section gpu_tests 90 $py -m pytest -q -p no:cacheprovider --noconftest \
    -o addopts= tests/test_microcircuit_twin.py
  # ... and the quick tier passes on this machine's JAX (on its CPU).
  if $py -c "import xdist" 2>/dev/null; then
    JAX_PLATFORMS=cpu section quick_tier "${GPU_TIER_LIMIT:-180}" $py -m pytest -q \
      -p no:cacheprovider -m "not slow" -n 8 --dist loadfile
  else
    echo "== quick_tier: skipped (no pytest-xdist here)"
  fi
fi
cp benchmarks/results/gpu_delivery.json "$out/" 2>/dev/null
for f in gpu_dispatch gpu_microcircuit gpu_cuba; do
  cp benchmarks/results/$f.md benchmarks/results/$f.json "$out/" 2>/dev/null
done
echo "== results in $out"
