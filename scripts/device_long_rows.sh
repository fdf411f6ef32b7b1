#!/usr/bin/env bash
# One device call for cuda_long_split (run through scripts/device_run.sh): GPU correctness tests,
# then a sweep of long rows (N 2^19-2^24, M 1-128, every dtype, tensors up to the grid's 2 GiB cap)
# against torch.softmax and the copy reference, exported to $OUT. PRIOR (an exchange document of
# earlier runs) is imported first, so the sweep measures only what it lacks.
set -uo pipefail
OUT=${OUT:-/tmp/out}
DB=/tmp/long.sqlite
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
if [ -n "${PRIOR:-}" ]; then python -m autotuner import --db "$DB" "$PRIOR" | tail -2; fi
timeout 150 python -m pytest -q -p no:cacheprovider tests/kernels/test_long_split_gpu.py \
  tests/kernels/test_variants_gpu.py -k "long_split" 2>&1 | tail -25 | tee "$OUT/gpu_tests.txt"
timeout "${SWEEP_S:-300}" python -m autotuner sweep --gpu h100 --db "$DB" --dtype fp16,bf16,fp32 \
  --variant cuda_long_split --variant torch_softmax --m 1,4,32,128 \
  --n 524288,1048576,4194304,16777216 --time-cap 0.1 --budget "$((${SWEEP_S:-300} - 30))s" 2>&1 | tail -4
python -m autotuner export --db "$DB" "$OUT/long_rows_h100.json.gz"
python -m autotuner report --gpu h100 --db "$DB" 2>&1 | tee "$OUT/report.txt" | tail -50
