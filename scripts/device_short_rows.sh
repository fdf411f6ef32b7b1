#!/usr/bin/env bash
# One device call for cuda_short_rows (issue 17): the float64 GPU suite for the variant, then the
# project's sweep of it against torch.softmax (and, with the time left, cuda_warp_row and
# triton_one_row) on short rows, the export and the per-shape summary, all under $OUT.
# Usage (device command): bash scripts/device_run.sh bash scripts/device_short_rows.sh
set -uo pipefail
DB=/tmp/short.sqlite
M=16384,262144
N=32,50,64,100,128,200,256,333,512,768,1000,1024
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
timeout 120 python -m pytest -q -p no:cacheprovider tests/kernels/test_short_rows_gpu.py \
  tests/kernels/test_variants_gpu.py -k "short_rows" > "$OUT/gpu_tests.txt" 2>&1
echo "pytest rc=$?" >> "$OUT/gpu_tests.txt"
python -m autotuner sweep --db "$DB" --dtype fp32,fp16,bf16 --variant cuda_short_rows --variant torch_softmax \
  --m "$M" --n "$N" --time-cap 0.1 --budget "${SWEEP_MAIN:-130s}" > "$OUT/sweep.txt" 2>&1
echo "sweep rc=$?" >> "$OUT/sweep.txt"
python -m autotuner sweep --db "$DB" --dtype fp32,fp16,bf16 --variant cuda_warp_row --variant triton_one_row \
  --m "$M" --n "$N" --time-cap 0.1 --budget "${SWEEP_PEERS:-50s}" >> "$OUT/sweep.txt" 2>&1
echo "peer sweep rc=$?" >> "$OUT/sweep.txt"
python -m autotuner export --db "$DB" "$OUT/short_rows.json.gz" >> "$OUT/sweep.txt" 2>&1
python bench/short_rows_summary.py "$OUT/short_rows.json.gz" > "$OUT/summary.txt" 2>&1
