#!/usr/bin/env bash
# On the lent GPU (through scripts/device_run.sh): the GPU suite on the current code, then the domain
# sweep (`autotuner sweep`, default --grid domain) on top of the committed H100 recordings (the classic
# grid, the short-row and the long-row sweeps), within SWEEP_BUDGET. Outputs in $OUT: gpu_tests.log,
# domain_sweep.log, h100_domain.json.gz (an `autotuner export` of the domain sweep's runs only).
# Usage: bash scripts/device_run.sh bash scripts/device_domain_update.sh   (env: TESTS_TIMEOUT, SWEEP_BUDGET)
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
started=$(date +%s)
timeout "${TESTS_TIMEOUT:-270}" python -m pytest -q -m gpu tests -p no:cacheprovider -rfEs >"$out/gpu_tests.log" 2>&1
echo "gpu tests: rc=$? in $(( $(date +%s) - started )) s" | tee -a "$out/gpu_tests.log"
grep -E "passed|failed" "$out/gpu_tests.log" | tail -n 3
db=/tmp/h100_domain.sqlite
rm -f "$db"
for f in tests/data/h100_sweep.json.gz bench/data/short_rows_h100.json.gz bench/data/long_rows_h100.json.gz; do
  python -m autotuner import "$f" --db "$db" | tail -n 1
done
first_new_run=$(python -c "import sqlite3; print(sqlite3.connect('$db').execute('select coalesce(max(id),0)+1 from sweep_runs').fetchone()[0])")
started=$(date +%s)
python -m autotuner sweep --gpu h100 --db "$db" --time-cap 0.3 --budget "${SWEEP_BUDGET:-200s}" >"$out/domain_sweep.log" 2>&1
echo "domain sweep: rc=$? in $(( $(date +%s) - started )) s (budget ${SWEEP_BUDGET:-200s})" | tee -a "$out/domain_sweep.log"
tail -n 15 "$out/domain_sweep.log"
new_runs=$(python -c "import sqlite3; print(' '.join(f'--run {r}' for (r,) in sqlite3.connect('$db').execute('select id from sweep_runs where id >= $first_new_run')))")
python -m autotuner export "$out/h100_domain.json.gz" --db "$db" --gpu h100 $new_runs 2>&1 | tail -n 2
