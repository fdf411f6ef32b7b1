#!/usr/bin/env bash
# On the lent GPU (through scripts/device_run.sh): optionally GPU tests, then sweeps on top of every
# recording the GPU's shipped tables are fitted from (``RECORDINGS``, autotuner/fit/samples.py), so that
# they measure only what those lack (new configs, new points), then the GPU's tables fitted from all of it.
# The GPU is the lent one (GPU=h100|h200 overrides), so the same call serves an H100 or an H200.
#   0. TESTS_TIMEOUT > 0 only: pytest TESTS (default "-m gpu tests": the GPU suite, about 3 min with -n 4);
#   1. SHORT_ROWS=1 only: the short-row lattice sweeps of scripts/device_short_rows.sh (M 16384, 262144 x
#      N 32-1024: cuda_short_rows, cuda_short_rows_keep and torch_softmax, then cuda_warp_row and
#      triton_one_row with the time left; SWEEP_MAIN, SWEEP_PEERS: their budgets, default 130s and 50s)
#      into the same database;
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
# Usage: bash scripts/device_run.sh bash scripts/device_domain_update.sh
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
gpu=${GPU:-$(python -c "from autotuner.lookup.gpu import current_gpu_key; print(current_gpu_key())")}
echo "gpu key: $gpu" | tee -a "$out/gpu.txt"
if [ "${TESTS_TIMEOUT:-0}" -gt 0 ]; then
  started=$(date +%s)
  # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
  timeout "$TESTS_TIMEOUT" python -m pytest -q ${TESTS:--m gpu tests} -p no:cacheprovider -rfEs -n 4 --dist loadfile >"$out/gpu_tests.log" 2>&1
  echo "gpu tests: rc=$? in $(( $(date +%s) - started )) s" | tee -a "$out/gpu_tests.log"
  grep -E "passed|failed" "$out/gpu_tests.log" | tail -n 3
fi
dtypes=${DTYPES:-fp32,fp16,bf16}
db=/tmp/${gpu}_domain.sqlite
rm -f "$db"
recordings=$(python -c "import sys; from autotuner.fit.samples import RECORDINGS; print(' '.join(RECORDINGS[sys.argv[1]]))" "$gpu") \
  || { echo "no recordings listed for $gpu in RECORDINGS (autotuner/fit/samples.py)" >&2; exit 2; }
for f in $recordings; do  # the shipped tables' recordings
  python -m autotuner import "$f" --db "$db" | tail -n 1
done
first_new_run=$(python -c "import sqlite3; print(sqlite3.connect('$db').execute('select coalesce(max(id),0)+1 from sweep_runs').fetchone()[0])")
if [ "${SHORT_ROWS:-0}" = 1 ]; then
  started=$(date +%s)
  DB="$db" GPU="$gpu" DTYPES="$dtypes" LATTICE_ONLY=1 bash scripts/device_short_rows.sh >"$out/short_rows.log" 2>&1
  echo "short-row lattice in $(( $(date +%s) - started )) s"; grep "sweep rc=" "$out/short_rows.log"
fi
# sweep_into LOG LABEL NOTE LINES ARGS...: `autotuner sweep` on this GPU, database and dtypes with ARGS into
# $OUT/LOG, then "LABEL: rc=.. in .. sNOTE" appended to it and printed, and its last LINES lines
sweep_into() {
  local log=$1 label=$2 note=$3 lines=$4 started rc
  shift 4
  started=$(date +%s)
  python -m autotuner sweep --gpu "$gpu" --db "$db" --dtype "$dtypes" "$@" >"$out/$log" 2>&1
  rc=$?
  echo "$label: rc=$rc in $(( $(date +%s) - started )) s$note" | tee -a "$out/$log"
  tail -n "$lines" "$out/$log" | cut -c1-300
}
if [ -n "${NEW_VARIANTS:-}" ]; then
  # shellcheck disable=SC2046  # one --variant per name
  sweep_into measured_sweep.log "measured-grid sweep of $NEW_VARIANTS" "" 3 --grid measured --time-cap 0.1 \
    $(printf -- '--variant %s ' $NEW_VARIANTS) --budget "${MEASURED_BUDGET:-240s}"
fi
if [ -n "${EXTRA_M:-}" ]; then
  sweep_into extra_sweep.log "extra sweep" " (budget ${EXTRA_BUDGET:-240s})" 3 --m "$EXTRA_M" --n "$EXTRA_N" \
    --budget "${EXTRA_BUDGET:-240s}"
fi
if [ "${SWEEP_BUDGET:-200s}" != 0 ]; then
  sweep_into domain_sweep.log "domain sweep" " (budget ${SWEEP_BUDGET:-200s})" 4 --budget "${SWEEP_BUDGET:-200s}"
fi
new_runs=$(python -c "import sqlite3; print(' '.join(f'--run {r}' for (r,) in sqlite3.connect('$db').execute('select id from sweep_runs where id >= $first_new_run')))")
python -m autotuner export "$out/${gpu}_update_new.json.gz" --db "$db" --gpu "$gpu" $new_runs 2>&1 | tail -n 2
[ "${FIT:-1}" = 1 ] || exit 0
python -m autotuner fit --gpu "$gpu" --db "$db" --dtype "$dtypes" --replace-worse --export "$out/tables" >"$out/fit.log" 2>&1
echo "fit: rc=$?"; tail -n 8 "$out/fit.log"
[ "${PICK_PAIRS:-0}" = 1 ] || exit 0
python -m bench.probes.changed_picks --gpu "$gpu" --dtypes "$dtypes" --before autotuner/tables --after "$out/tables" \
  --out "$out/pick_pairs.json" ${PAIRS_BOX:+--box "$PAIRS_BOX"} 2>&1 | tee "$out/pick_pairs.log"
python -m bench.probes.pick_pairs "$out/pick_pairs.json" --out "$out/pick_pairs_${gpu}.csv" --budget-s "${PAIRS_BUDGET:-90}" \
  >>"$out/pick_pairs.log" 2>&1
tail -n 1 "$out/pick_pairs.log"
