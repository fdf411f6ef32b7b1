#!/usr/bin/env bash
# On the lent GPU (through scripts/device_run.sh): optionally the GPU suite, then the default domain sweep
# (`autotuner sweep`, --grid domain) on top of every H100 recording the shipped tables are fitted from
# (bench/data/sources.json's "recordings"), so that it measures only what they lack (new configs,
# new refinement points), within SWEEP_BUDGET; then the H100 tables fitted from all of it, stored in the
# database (AUTOTUNER_DB=/tmp/h100_domain.sqlite makes later commands on the same warm machine use them)
# and written to $OUT/tables. Outputs in $OUT: gpu_tests.log (TESTS_TIMEOUT > 0 only), domain_sweep.log,
# h100_domain_new.json.gz (an `autotuner export` of this sweep's runs only), tables/, fit.log.
# Usage: bash scripts/device_run.sh bash scripts/device_domain_update.sh   (env: TESTS_TIMEOUT (default 0:
# no tests; the suite takes about 3 min with -n 4), SWEEP_BUDGET (default 200s))
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
if [ "${TESTS_TIMEOUT:-0}" -gt 0 ]; then
  started=$(date +%s)
  timeout "$TESTS_TIMEOUT" python -m pytest -q -m gpu tests -p no:cacheprovider -rfEs -n 4 --dist loadfile >"$out/gpu_tests.log" 2>&1
  echo "gpu tests: rc=$? in $(( $(date +%s) - started )) s" | tee -a "$out/gpu_tests.log"
  grep -E "passed|failed" "$out/gpu_tests.log" | tail -n 3
fi
db=/tmp/h100_domain.sqlite
rm -f "$db"
for f in $(python -c "import json; print(' '.join(json.load(open('bench/data/sources.json'))['h100']['recordings']))"); do  # the shipped tables' recordings
  python -m autotuner import "$f" --db "$db" | tail -n 1
done
first_new_run=$(python -c "import sqlite3; print(sqlite3.connect('$db').execute('select coalesce(max(id),0)+1 from sweep_runs').fetchone()[0])")
started=$(date +%s)
python -m autotuner sweep --gpu h100 --db "$db" --budget "${SWEEP_BUDGET:-200s}" >"$out/domain_sweep.log" 2>&1
echo "domain sweep: rc=$? in $(( $(date +%s) - started )) s (budget ${SWEEP_BUDGET:-200s})" | tee -a "$out/domain_sweep.log"
tail -n 4 "$out/domain_sweep.log" | cut -c1-300
new_runs=$(python -c "import sqlite3; print(' '.join(f'--run {r}' for (r,) in sqlite3.connect('$db').execute('select id from sweep_runs where id >= $first_new_run')))")
python -m autotuner export "$out/h100_domain_new.json.gz" --db "$db" --gpu h100 $new_runs 2>&1 | tail -n 2
python -m autotuner fit --gpu h100 --db "$db" --export "$out/tables" >"$out/fit.log" 2>&1
echo "fit: rc=$?"; tail -n 8 "$out/fit.log"
