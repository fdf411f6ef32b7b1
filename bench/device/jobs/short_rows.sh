#!/usr/bin/env bash
# cuda_short_rows on the short-row lattice (M 16384, 262144 x N 32-1024), after its GPU tests.
# The float64 GPU suite for the variant, then the project's sweep of it (and of cuda_short_rows_keep, its
# 16-bit twin) against torch.softmax (and, with the time left, cuda_warp_row and triton_one_row) on the
# lattice, the export and the per-shape summary, all under $OUT.
# Knobs: SWEEP_MAIN, SWEEP_PEERS (the two sweeps' budgets, default 130s and 50s); DB (default
# /tmp/short.sqlite), GPU (default auto), DTYPES (default fp32,fp16,bf16); LATTICE_ONLY=1 runs the two
# sweeps alone into $DB, their logs on stdout (the domain_update job's SHORT_ROWS=1).
set -uo pipefail
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
DB=${DB:-/tmp/short.sqlite}
# shellcheck disable=SC2054  # commas inside values
lattice=(--gpu "${GPU:-auto}" --db "$DB" --dtype "${DTYPES:-fp32,fp16,bf16}" --m 16384,262144
         --n 32,50,64,100,128,200,256,333,512,768,1000,1024 --time-cap 0.1)
sweep_lattice() {
  python -m autotuner sweep "${lattice[@]}" --variant cuda_short_rows --variant cuda_short_rows_keep --variant torch_softmax \
    --budget "${SWEEP_MAIN:-130s}"
  echo "sweep rc=$?"
  python -m autotuner sweep "${lattice[@]}" --variant cuda_warp_row --variant triton_one_row --budget "${SWEEP_PEERS:-50s}"
  echo "peer sweep rc=$?"
}
if [ "${LATTICE_ONLY:-0}" = 1 ]; then
  sweep_lattice
  exit 0
fi
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
timeout 180 python -m pytest -q -p no:cacheprovider tests/kernels/test_short_rows_gpu.py \
  tests/kernels/test_variants_gpu.py -k "short_rows" > "$OUT/gpu_tests.txt" 2>&1
echo "pytest rc=$?" >> "$OUT/gpu_tests.txt"
sweep_lattice > "$OUT/sweep.txt" 2>&1
python -m autotuner export --db "$DB" "$OUT/short_rows.json.gz" >> "$OUT/sweep.txt" 2>&1
python bench/short_rows_summary.py "$OUT/short_rows.json.gz" > "$OUT/summary.txt" 2>&1
