#!/usr/bin/env bash
# On the lent GPU, once scripts/device_cute_setup.sh has installed QuACK (one call per slice), so that
# it is a peer: the H100 recordings the shipped tables are fitted from (``RECORDINGS``,
# autotuner/fit/samples.py) imported into one database, COVER_ARGS (if set) swept on top with
# `autotuner sweep` (e.g. new configs at shapes the recordings lack), the H100 tables fitted into that
# database (AUTOTUNER_DB points the lookup at them) and written to $OUT/tables, then `autotuner bench`
# through scripts/device_bench_peers.sh for each "TAG:DTYPES:ARGS" entry of BENCHES (';'-separated).
# A rerun on the same warm machine with REUSE_DB=1 skips the import, sweep and fit.
#   bash scripts/device_run.sh bash -c 'source scripts/device_cute_setup.sh && bash scripts/device_refit_and_bench.sh'
# Outputs in $OUT: refit.log, h100_cover.json.gz (the COVER_ARGS run), tables/, bench_<TAG>_stream_<dtype>.csv.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
db=/tmp/h100_refit.sqlite
if [ "${REUSE_DB:-0}" != 1 ]; then
  {
    rm -f "$db"
    for f in $(python -c "from autotuner.fit.samples import RECORDINGS; print(' '.join(RECORDINGS['h100']))"); do  # the shipped tables' recordings
      python -m autotuner import "$f" --db "$db" | tail -n 1
    done
    if [ -n "${COVER_ARGS:-}" ]; then
      first=$(python -c "import sqlite3; print(sqlite3.connect('$db').execute('select coalesce(max(id),0)+1 from sweep_runs').fetchone()[0])")
      started=$(date +%s)
      python -m autotuner sweep --gpu h100 --db "$db" $COVER_ARGS 2>&1 | grep -v "━" | tail -n 3
      echo "cover sweep: rc=$? in $(( $(date +%s) - started )) s"
      runs=$(python -c "import sqlite3; print(' '.join(f'--run {r}' for (r,) in sqlite3.connect('$db').execute('select id from sweep_runs where id >= $first')))")
      python -m autotuner export "$out/h100_cover.json.gz" --db "$db" --gpu h100 $runs 2>&1 | tail -n 1
    fi
    python -m autotuner fit --gpu h100 --db "$db" --export "$out/tables" 2>&1 | tail -n 8
  } >"$out/refit.log" 2>&1
  tail -n 16 "$out/refit.log"
fi
export AUTOTUNER_DB=$db
IFS=';' read -ra entries <<<"${BENCHES:-}"
for entry in "${entries[@]}"; do
  IFS=':' read -r tag dtypes args <<<"$entry"
  TAG=$tag DTYPES=$dtypes BENCH_ARGS=$args MODES=stream ROUNDS=${ROUNDS:-2} BENCH_TIMEOUT=${BENCH_TIMEOUT:-200} \
    bash scripts/device_bench_peers.sh
done
