#!/usr/bin/env bash
# Everything that needs a GPU, on the device machine, in two stages that each fit one call;
# logs and JSON land in $OUT.
#   bash benchmarks/gpu_suite.sh tests   # kernel and repro tests on the GPU
#   bash benchmarks/gpu_suite.sh bench   # repro --all (+ sanitizer), wall times, throughput, check
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attn-doctor-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
case "${1:-}" in
tests)
  timeout 560 python3 -m pytest tests/kernels tests/test_repro_runner.py tests/test_repro_cli.py tests/test_forkserver.py \
    tests/test_progress.py -v -p no:cacheprovider \
    --durations=10 2>&1 | tee "$OUT/pytest.log" | grep -v PASSED | tail -30
  ;;
bench)
  # most important first: a call that runs out of time still brings back what it finished
  python3 -m attn_doctor repro --all --format json -v > "$OUT/repro.json" 2> "$OUT/repro-v.txt"
  python3 -c "import json; [print(r['repro'], '/', r['case'], r['status'], '|', r['detail'][:120]) for r in json.load(open('$OUT/repro.json'))['results']]"
  cat "$OUT/repro-v.txt"
  python3 benchmarks/repro_wall_time.py --warm-runs 3 | tee "$OUT/repro_wall.txt"
  python3 benchmarks/probe_wall_time.py --runs 3 | tee "$OUT/probe_wall.txt"
  python3 -m attn_doctor repro --all --device cpu --format json > "$OUT/repro-cpu.json"
  python3 -c "import json; [print('cpu:', r['repro'], '/', r['case'], r['status'], '|', r['detail'][:100]) for r in json.load(open('$OUT/repro-cpu.json'))['results']]"
  python3 -m attn_doctor repro --all --sanitizer --format json > "$OUT/sanitizer.json"
  python3 -c "import json; [print(r['repro'], r['case'], r['status'], '|', r['sanitizer']) for r in json.load(open('$OUT/sanitizer.json'))['results']]"
  python3 benchmarks/varlen_throughput.py | tee "$OUT/varlen.txt"
  ;;
*)
  echo "usage: gpu_suite.sh tests|bench" >&2
  exit 2
  ;;
esac
