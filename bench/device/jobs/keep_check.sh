#!/usr/bin/env bash
# cuda_cluster_keep against cuda_cluster_split side by side in one sweep, after its GPU tests.
# 16-bit, M = 1, 2, 4, N = 131072 / 151936 / 262144, after the float64 GPU suite of cluster_keep; exported
# to $OUT/keep_<GPU>.json.gz. Knobs: GPU (default h100).
set -uo pipefail
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
gpu=${GPU:-h100}
DB=/tmp/keep.sqlite
gpu_tests 90 4 keep_tests.txt tests/kernels/test_variants_gpu.py -k "cluster_keep"
sweep_keep_against_split "$DB" "$gpu" 120 110s
python -m autotuner export --db "$DB" "$OUT/keep_$gpu.json.gz"
