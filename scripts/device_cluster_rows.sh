#!/usr/bin/env bash
# One device call for the long cluster configs (run through scripts/device_run.sh): GPU correctness of
# cuda_cluster_split's configs, then a sweep of rows of 1.5-3.5 MB (fp32 N 393216-917504, 16-bit N
# 786432-1835008; N a multiple of 8 only: a first long odd-N line became the far neighbour of odd N
# down to 200K, where the kernels that hold them had no time) at M 1-256 (tensors up to 0.9 GB)
# of cuda_cluster_split, cuda_long_split and torch.softmax against the copy, exported to $OUT. The M
# are rows the recordings already have: a new M line moves the fit's neighbours at every N near it.
# PRIOR (an export of an earlier call) is imported first, so a second call measures only what the
# first lacked. SWEEP_S bounds the sweeps (seconds, default 420).
set -uo pipefail
OUT=${OUT:-/tmp/out}
DB=/tmp/cluster_rows.sqlite
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
if [ -n "${PRIOR:-}" ]; then python -m autotuner import --db "$DB" "$PRIOR" | tail -2; fi
timeout 200 python -m pytest -q -p no:cacheprovider tests/kernels/test_variants_gpu.py tests/kernels/test_cluster_split_gpu.py \
  -k "cluster_split" 2>&1 \
  | tail -5 | tee "$OUT/gpu_tests.txt"
half=$(( ${SWEEP_S:-420} / 2 ))
for spec in "fp32 393216,524288,655360,786432,917504" "fp16,bf16 786432,1048576,1310720,1572864,1835008"; do
  set -- $spec
  timeout "$half" python -m autotuner sweep --gpu h100 --db "$DB" --dtype "$1" --m 1,4,32,128,256 --n "$2" \
    --variant cuda_cluster_split --variant cuda_long_split --variant torch_softmax --time-cap 0.2 \
    --budget "$(( half - 20 ))s" 2>&1 | tail -4
done
python -m autotuner export --db "$DB" "$OUT/cluster_rows_h100.json.gz"
python -m autotuner report --gpu h100 --db "$DB" 2>&1 | tee "$OUT/report.txt" | tail -40
