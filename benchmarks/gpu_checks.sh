#!/usr/bin/env bash
# The GPU checks of one lent-machine call, in order of importance, each under its own time
# limit, each log written to $OUT as it runs (what finished comes back even if a later stage
# is cut off). Pack the stack first, here: `bash benchmarks/gpu_environment.sh`; then, with
# the device tool, carrying .whl:
#
#   bash benchmarks/gpu_checks.sh [STAGE ...]     # stages: tests file speed profile train trainprofile (default: all)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
tar xJf .whl/gpusite.tar.xz -C /tmp && export PYTHONPATH=/tmp/gpusite:$PWD
[ -d ../shared ] || cp -r .whl/shared ../shared
export PYTHONUNBUFFERED=1
STAGES=${*:-tests file speed profile train trainprofile}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  grep -m1 'model name' /proc/cpuinfo; nproc; } 2>&1 | tee "$OUT/machine.txt"
for stage in $STAGES; do
  case $stage in
    tests) timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -40 ;;
    speed) timeout 90 python3 benchmarks/embed_speed.py --device cuda --batch-sizes 1 64 256 \
             --passes 3 --precisions bfloat16 2>&1 | grep -v Warning ;;
    profile) for batch in 64 1; do
               timeout 40 python3 benchmarks/profile_embed.py --device cuda --batch-size $batch --rows 8 2>&1 \
                 | grep -v Warning; done ;;
    file) timeout 190 python3 benchmarks/gpu_file_embedding.py --lines 50000 --budgets 8192 32768 --workers 2 4 2>&1 \
            | tr '\r' '\n' | grep -v 'Warning\|embedding:' ;;
    train) for architecture in original small; do for graphs in "" --without-cuda-graphs; do
             timeout 75 python3 benchmarks/train_bilm.py speed --device cuda --architecture $architecture \
               --streams 128 --steps 12 --warmup 4 $graphs 2>&1 | grep -v 'Warning\|loading instances'; done; done ;;
    trainprofile) timeout 100 python3 benchmarks/train_bilm.py speed --profile --device cuda --architecture original \
                    --streams 128 --steps 10 --warmup 4 --rows 30 2>&1 | grep -v 'Warning\|loading instances' ;;
  esac > "$OUT/$stage.txt"
  echo "== $stage: exit ${PIPESTATUS[0]}"; tail -25 "$OUT/$stage.txt"
done
