#!/usr/bin/env bash
# Measure what the lent GPU's recordings lack (new configs, new points), then refit its tables.
# Sweeps on top of every recording the GPU's shipped tables are fitted from (RECORDINGS,
# autotuner/fit/samples.py), so that they measure only what those lack, then the GPU's tables fitted
# from all of it. The GPU is the lent one (GPU=h100|h200 overrides), so the same call serves an H100 or
# an H200. Steps:
#   0. TESTS_TIMEOUT > 0 only: pytest TESTS (default "-m gpu tests": the GPU suite, about 3 min with -n 4);
#   1. SHORT_ROWS=1 only: the short-row lattice sweeps of the short_rows job (M 16384, 262144 x N 32-1024:
#      cuda_short_rows, cuda_short_rows_keep and torch_softmax, then cuda_warp_row and triton_one_row with
#      the time left; SWEEP_MAIN, SWEEP_PEERS: their budgets, default 130s and 50s) into the same database;
#   1b. NEW_VARIANTS="a b" only: those variants swept at every shape the recordings hold (--grid measured,
#      time cap 0.1 s, within MEASURED_BUDGET, default 240s): a new variant timed where the others were;
#   1c. EXTRA_M="72,100" EXTRA_N="32000,50257" only: that product grid swept (--m/--n: every variant,
#      the default time cap) within EXTRA_BUDGET (default 240s): points where the lattice is thin;
#   2. the default domain sweep (`autotuner sweep`, --grid domain) within SWEEP_BUDGET (default 200s;
#      0 skips it);
#   3. FIT=1 (default): `autotuner fit --replace-worse` into the database (AUTOTUNER_DB=/tmp/<gpu>_domain.sqlite
#      makes later commands on the same warm machine use the tables) and to $OUT/tables;
#   4. PICK_PAIRS=1 only: the picks the refit changed against the shipped tables (bench.probes.changed_picks:
#      the held-out domain set and 100 of those among 9,000 random shapes), timed side by side
#      (bench.probes.pick_pairs, within PAIRS_BUDGET seconds, default 90); PAIRS_BOX=M0:M1:N0:N1 adds 100
#      of those among 9,000 random shapes of that region.
# DTYPES (default "fp32,fp16,bf16") narrows every step: the sweeps, the fit and the pick pairs.
# Outputs in $OUT: gpu.txt, gpu_tests.log (TESTS_TIMEOUT > 0 only), short_rows.log, measured_sweep.log,
# extra_sweep.log, domain_sweep.log, <gpu>_update_new.json.gz (an `autotuner export` of this
# call's runs only), tables/, fit.log, pick_pairs.json, pick_pairs_<gpu>.csv, pick_pairs.log.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=bench/device/lib.sh
source "$here/../lib.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
gpu=${GPU:-$(python -c "from autotuner.lookup.gpu import current_gpu_key; print(current_gpu_key())")}
echo "gpu key: $gpu" | tee -a "$OUT/gpu.txt"
if [ "${TESTS_TIMEOUT:-0}" -gt 0 ]; then
  started=$(date +%s)
  # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
  timeout "$TESTS_TIMEOUT" python -m pytest -q ${TESTS:--m gpu tests} -p no:cacheprovider -rfEs -n 4 --dist loadfile >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests: rc=$? in $(seconds_since "$started") s" | tee -a "$OUT/gpu_tests.log"
  grep -E "passed|failed" "$OUT/gpu_tests.log" | tail -n 3
fi
dtypes=${DTYPES:-fp32,fp16,bf16}
db=/tmp/${gpu}_domain.sqlite
rm -f "$db"
import_recordings "$db" "$gpu" || exit
first_new_run=$(next_run_id "$db")
if [ "${SHORT_ROWS:-0}" = 1 ]; then
  started=$(date +%s)
  DB="$db" GPU="$gpu" DTYPES="$dtypes" LATTICE_ONLY=1 bash "$here/short_rows.sh" >"$OUT/short_rows.log" 2>&1
  echo "short-row lattice in $(seconds_since "$started") s"; grep "sweep rc=" "$OUT/short_rows.log"
fi
# sweep_into LOG LABEL NOTE LINES ARGS...: `autotuner sweep` on this GPU, database and dtypes with ARGS into
# $OUT/LOG, then "LABEL: rc=.. in .. sNOTE" appended to it and printed, and its last LINES lines
sweep_into() {
  local log=$1 label=$2 note=$3 lines=$4 started rc
  shift 4
  started=$(date +%s)
  python -m autotuner sweep --gpu "$gpu" --db "$db" --dtype "$dtypes" "$@" >"$OUT/$log" 2>&1
  rc=$?
  echo "$label: rc=$rc in $(seconds_since "$started") s$note" | tee -a "$OUT/$log"
  tail -n "$lines" "$OUT/$log" | cut -c1-300
}
if [ -n "${NEW_VARIANTS:-}" ]; then
  # shellcheck disable=SC2046,SC2086  # one --variant per name
  sweep_into measured_sweep.log "measured-grid sweep of $NEW_VARIANTS" "" 3 --grid measured --time-cap 0.1 \
    $(printf -- '--variant %s ' $NEW_VARIANTS) --budget "${MEASURED_BUDGET:-240s}"
fi
if [ -n "${EXTRA_M:-}" ]; then
  sweep_into extra_sweep.log "extra sweep" " (budget ${EXTRA_BUDGET:-240s})" 3 --m "$EXTRA_M" --n "${EXTRA_N:?EXTRA_N is needed with EXTRA_M}" \
    --budget "${EXTRA_BUDGET:-240s}"
fi
if [ "${SWEEP_BUDGET:-200s}" != 0 ]; then
  sweep_into domain_sweep.log "domain sweep" " (budget ${SWEEP_BUDGET:-200s})" 4 --budget "${SWEEP_BUDGET:-200s}"
fi
export_runs_since "$db" "$gpu" "$first_new_run" "$OUT/${gpu}_update_new.json.gz" | tail -n 2
[ "${FIT:-1}" = 1 ] || exit 0
python -m autotuner fit --gpu "$gpu" --db "$db" --dtype "$dtypes" --replace-worse --export "$OUT/tables" >"$OUT/fit.log" 2>&1
echo "fit: rc=$?"; tail -n 8 "$OUT/fit.log"
[ "${PICK_PAIRS:-0}" = 1 ] || exit 0
python -m bench.probes.changed_picks --gpu "$gpu" --dtypes "$dtypes" --before autotuner/tables --after "$OUT/tables" \
  --out "$OUT/pick_pairs.json" ${PAIRS_BOX:+--box "$PAIRS_BOX"} 2>&1 | tee "$OUT/pick_pairs.log"
python -m bench.probes.pick_pairs "$OUT/pick_pairs.json" --out "$OUT/pick_pairs_${gpu}.csv" --budget-s "${PAIRS_BUDGET:-90}" \
  >>"$OUT/pick_pairs.log" 2>&1
tail -n 1 "$OUT/pick_pairs.log"
