#!/usr/bin/env bash
# On the lent GPU (through scripts/device_run.sh), after scripts/device_update_recordings.sh on the same
# warm machine (or on a fresh one: the committed recording is imported instead): fit the H100 tables
# into autotuner/tables with fit's default rule, run the runtime's GPU tests against them, then measure
# the product: `autotuner bench` (dispatched softmax against copy, torch and the peers present) and
# scripts/bench_runtime.py (lookup, host overhead). Outputs in $OUT:
# tables.tgz, bench.csv, bench.png, runtime_h100.json, per_shape.md, refit.log. (Held-out regret is
# scored on the CPU from the recordings: tests/autotuner/test_replay_recorded.py.)
# Usage: bash scripts/device_run.sh bash scripts/device_refit_and_bench.sh
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
grid_db=/tmp/h100_grid.sqlite
log="$out/refit.log"
{
  [ -f "$grid_db" ] || python -m autotuner import tests/data/h100_sweep.json.gz --db "$grid_db"
  python -m autotuner fit --gpu h100 --db "$grid_db" --export autotuner/tables
  python -m autotuner report --gpu h100 --db "$grid_db" --markdown "$out/per_shape.md" | tail -n 4
  tar czf "$out/tables.tgz" autotuner/tables/h100_*_cold.json
  timeout 180 python -m pytest -q -m gpu tests/autotuner/test_runtime_gpu.py -p no:cacheprovider 2>&1 | tail -n 4
} >"$log" 2>&1
tail -n 30 "$log"
timeout 400 python -m autotuner bench --output /tmp/bench 2>&1 | tail -n 8
cp /tmp/bench/bench.csv /tmp/bench/bench.png "$out"/ 2>/dev/null
timeout 150 python scripts/bench_runtime.py h100 --out "$out/runtime_h100.json" --no-compile 2>&1 | tail -n 14
