#!/usr/bin/env bash
# The default domain sweep from an empty database, timed, in calls of at most CALL_S seconds.
# `autotuner sweep --gpu $GPU` (every other option default), in calls of at most CALL_S seconds (default
# 540: a call is capped at 10 min). The database stays in /tmp between calls on the same warm machine,
# so the next call resumes it (a resumed run measures only what is missing); the sweep's wall time is the
# sum of the calls' "sweep part" lines. Each call exports every run so far to $OUT/<GPU>_domain.json.gz.
# Call 1 with FRESH=1, then plain calls until it prints "finished".
# Knobs: GPU (default h100); FRESH=1 starts over; on a fresh machine (the last one went back, and /tmp
# with it) RESUME_FROM=<an earlier call's export, e.g. bench/data/domain_sweep_h100.json.gz> imports it
# first, so the rerun skips what it holds: rows count as done for the same GPU model, environment
# fingerprint (driver, CUDA, torch, triton, cupy, Python) and source hashes.
set -uo pipefail
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
gpu=${GPU:-h100}
db=/tmp/${gpu}_domain_sweep.sqlite
[ "${FRESH:-0}" = 1 ] && rm -f "$db"
if [ ! -f "$db" ] && [ -n "${RESUME_FROM:-}" ]; then
  python -m autotuner import "$RESUME_FROM" --db "$db" 2>&1 | tail -n 1
fi
started=$(date +%s)
timeout -s INT "${CALL_S:-540}" python -m autotuner sweep --gpu "$gpu" --db "$db" >"$OUT/domain_sweep.log" 2>&1
rc=$?
echo "sweep part: rc=$rc in $(seconds_since "$started") s" | tee -a "$OUT/domain_sweep.log"
grep -v "━" "$OUT/domain_sweep.log" | grep -E "round|lattice|run [0-9]+:" | cut -c1-160
python -m autotuner export "$OUT/${gpu}_domain.json.gz" --db "$db" --gpu "$gpu" 2>&1 | tail -n 1
python -c "import sqlite3, sys; print('runs:', sqlite3.connect(sys.argv[1]).execute('select id, status from sweep_runs').fetchall())" "$db"
