#!/usr/bin/env bash
# The GPU's tables refitted from its recordings and an optional sweep, then benched with the peers.
# Needs QuACK installed by the `cute_setup` calls (run.sh sources cute_setup.sh for this job), so that it
# is a peer. The recordings the shipped tables are fitted from (RECORDINGS, autotuner/fit/samples.py)
# imported into one database, COVER_ARGS (if set) swept on top with `autotuner sweep` (e.g. new configs at
# shapes the recordings lack), the tables fitted into that database (AUTOTUNER_DB points the lookup at
# them) and written to $OUT/tables, then the bench_peers job for each "TAG:DTYPES:ARGS" entry of BENCHES
# (';'-separated). Knobs: GPU (default h100); REUSE_DB=1 (a rerun on the same warm machine) skips the
# import, sweep and fit; ROUNDS (default 2) and BENCH_TIMEOUT (default 200) go to bench_peers.
# Outputs in $OUT: refit.log, <GPU>_cover.json.gz (the COVER_ARGS run), tables/, bench_<TAG>_stream_<dtype>.csv.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=bench/device/lib.sh
source "$here/../lib.sh"
gpu=${GPU:-h100}
db=/tmp/${gpu}_refit.sqlite
if [ "${REUSE_DB:-0}" != 1 ]; then
  {
    rm -f "$db"
    import_recordings "$db" "$gpu"
    if [ -n "${COVER_ARGS:-}" ]; then
      first=$(next_run_id "$db")
      started=$(date +%s)
      # shellcheck disable=SC2086  # COVER_ARGS is a list of sweep arguments
      python -m autotuner sweep --gpu "$gpu" --db "$db" $COVER_ARGS 2>&1 | grep -v "━" | tail -n 3
      echo "cover sweep: rc=$? in $(seconds_since "$started") s"
      export_runs_since "$db" "$gpu" "$first" "$OUT/${gpu}_cover.json.gz" | tail -n 1
    fi
    python -m autotuner fit --gpu "$gpu" --db "$db" --export "$OUT/tables" 2>&1 | tail -n 8
  } >"$OUT/refit.log" 2>&1
  tail -n 16 "$OUT/refit.log"
fi
export AUTOTUNER_DB=$db
IFS=';' read -ra entries <<<"${BENCHES:-}"
for entry in "${entries[@]}"; do
  IFS=':' read -r tag dtypes args <<<"$entry"
  TAG=$tag DTYPES=$dtypes BENCH_ARGS=$args MODES=stream ROUNDS=${ROUNDS:-2} BENCH_TIMEOUT=${BENCH_TIMEOUT:-200} \
    bash "$here/bench_peers.sh"
done
