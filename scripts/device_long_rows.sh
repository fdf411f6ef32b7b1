#!/usr/bin/env bash
# One device call for cuda_long_split (run through scripts/device_run.sh): GPU correctness tests,
# then a sweep of long rows (N 2^19-2^24, M 1-128, every dtype, tensors up to the grid's 2 GiB cap)
# against torch.softmax and the copy reference, and cuda_cluster_keep against cuda_cluster_split
# (M = 1-4, N 128K-256K, 16-bit), exported to $OUT. PRIOR (an exchange document of
# earlier runs) is imported first, so the sweep measures only what it lacks.
set -uo pipefail
OUT=${OUT:-/tmp/out}
DB=/tmp/long.sqlite
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
if [ -n "${PRIOR:-}" ]; then python -m autotuner import --db "$DB" "$PRIOR" | tail -2; fi
timeout 150 python -m pytest -q -p no:cacheprovider tests/kernels/test_long_split_gpu.py \
  tests/kernels/test_variants_gpu.py -k "long_split or cluster_keep" 2>&1 | tail -25 | tee "$OUT/gpu_tests.txt"
timeout 100 python -m autotuner sweep --gpu h100 --db "$DB" --dtype fp16,bf16 \
  --variant cuda_cluster_keep --variant cuda_cluster_split --m 1,2,4 --n 131072,151936,262144 \
  --budget 90s 2>&1 | tail -3
timeout "${SWEEP_S:-300}" python -m autotuner sweep --gpu h100 --db "$DB" --dtype fp16,bf16,fp32 \
  --variant cuda_long_split --variant torch_softmax --m 1,4,32,128 \
  --n 524288,1048576,4194304,16777216 --time-cap 0.1 --budget "$((${SWEEP_S:-300} - 30))s" 2>&1 | tail -4
python -m autotuner export --db "$DB" "$OUT/long_rows_h100.json.gz"
python -m autotuner report --gpu h100 --db "$DB" 2>&1 | tee "$OUT/report.txt" | tail -50
