#!/usr/bin/env bash
# cuda_cluster_keep against cuda_cluster_split side by side in one sweep (16-bit, M = 1, 2, 4,
# N = 131072 / 151936 / 262144), after the float64 GPU suite of cluster_keep; export to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
DB=/tmp/keep.sqlite
mkdir -p "$OUT"
timeout 90 python -m pytest -q -p no:cacheprovider tests/kernels/test_variants_gpu.py -k "cluster_keep" 2>&1 | tail -4 | tee "$OUT/keep_tests.txt"
timeout 120 python -m autotuner sweep --gpu h100 --db "$DB" --dtype fp16,bf16 \
  --variant cuda_cluster_keep --variant cuda_cluster_split --m 1,2,4 --n 131072,151936,262144 \
  --budget 110s 2>&1 | tail -3
python -m autotuner export --db "$DB" "$OUT/keep_h100.json.gz"
