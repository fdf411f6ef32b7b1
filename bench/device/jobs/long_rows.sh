#!/usr/bin/env bash
# cuda_long_split: GPU correctness, then long rows (N 2^19-2^24) against torch.softmax and the copy.
# Its GPU tests, then a sweep of long rows (N 2^19-2^24, M 1-128, every dtype, tensors up to the grid's
# 2 GiB cap) against torch.softmax and the copy reference, and cuda_cluster_keep against
# cuda_cluster_split (M = 1-4, N 128K-256K, 16-bit), exported to $OUT/long_rows_<GPU>.json.gz.
# Knobs: PRIOR (an exchange document of earlier runs) is imported first, so the sweep measures only what
# it lacks; SWEEP_S bounds the long-row sweep (seconds, default 300); GPU (default h100).
set -uo pipefail
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
gpu=${GPU:-h100}
DB=/tmp/long.sqlite
device_info device.txt name,memory.total
if [ -n "${PRIOR:-}" ]; then python -m autotuner import --db "$DB" "$PRIOR" | tail -2; fi
gpu_tests 150 25 gpu_tests.txt tests/kernels/test_long_split_gpu.py tests/kernels/test_variants_gpu.py -k "long_split or cluster_keep"
sweep_keep_against_split "$DB" "$gpu" 100 90s
timeout "${SWEEP_S:-300}" python -m autotuner sweep --gpu "$gpu" --db "$DB" --dtype fp16,bf16,fp32 \
  --variant cuda_long_split --variant torch_softmax --m 1,4,32,128 \
  --n 524288,1048576,4194304,16777216 --time-cap 0.1 --budget "$((${SWEEP_S:-300} - 30))s" 2>&1 | tail -4
python -m autotuner export --db "$DB" "$OUT/long_rows_$gpu.json.gz"
python -m autotuner report --gpu "$gpu" --db "$DB" 2>&1 | tee "$OUT/report.txt" | tail -50
