#!/usr/bin/env bash
# The long cluster configs: GPU correctness of cuda_cluster_split, then a sweep of rows of 1.5-3.5 MB.
# Rows of fp32 N 393216-917504 and 16-bit N 786432-1835008 (N a multiple of 8 only: a first long odd-N
# line became the far neighbour of odd N down to 200K, where the kernels that hold them had no time) at
# M 1-256 (tensors up to 0.9 GB) of cuda_cluster_split, cuda_long_split and torch.softmax against the
# copy, exported to $OUT/cluster_rows_<GPU>.json.gz. The M are rows the recordings already have: a new M
# line moves the fit's neighbours at every N near it.
# Knobs: PRIOR (an export of an earlier call) is imported first, so a second call measures only what the
# first lacked; SWEEP_S bounds the sweeps (seconds, default 420); GPU (default h100).
set -uo pipefail
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
gpu=${GPU:-h100}
DB=/tmp/cluster_rows.sqlite
device_info device.txt name,memory.total,driver_version
if [ -n "${PRIOR:-}" ]; then python -m autotuner import --db "$DB" "$PRIOR" | tail -2; fi
gpu_tests 200 5 gpu_tests.txt tests/kernels/test_variants_gpu.py tests/kernels/test_cluster_split_gpu.py -k "cluster_split"
half=$(( ${SWEEP_S:-420} / 2 ))
for spec in "fp32 393216,524288,655360,786432,917504" "fp16,bf16 786432,1048576,1310720,1572864,1835008"; do
  # shellcheck disable=SC2086  # the spec's two words: dtypes and N
  set -- $spec
  timeout "$half" python -m autotuner sweep --gpu "$gpu" --db "$DB" --dtype "$1" --m 1,4,32,128,256 --n "$2" \
    --variant cuda_cluster_split --variant cuda_long_split --variant torch_softmax --time-cap 0.2 \
    --budget "$(( half - 20 ))s" 2>&1 | tail -4
done
python -m autotuner export --db "$DB" "$OUT/cluster_rows_$gpu.json.gz"
python -m autotuner report --gpu "$gpu" --db "$DB" 2>&1 | tee "$OUT/report.txt" | tail -40
