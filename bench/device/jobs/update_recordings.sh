#!/usr/bin/env bash
# Bring the committed recordings of GPU (h100 unless GPU=h200) up to date in one call.
# Imports tests/data/<GPU>_sweep.json.gz and <GPU>_heldout.json.gz into fresh SQLite files, resumes the
# default-grid sweep (measures what the current code lacks: variants whose source changed, new configs),
# re-times disturbed rows (--retime-unstable 2), re-measures every copy reference (--recopy, unless
# RECOPY=0), sweeps the extra rows EXTRA_M (default 2,8,16,64,256: the rows between the peers-grid M values
# that the shipped tables are also fitted on, docs/SWEEP.md) and re-times what they show disturbed, sweeps
# what the held-out shapes lack (`autotuner evaluate`, whose runs the fit never reads: the first set, then
# the odd-M set within ODD_M_BUDGET seconds), and exports both recordings to $OUT. Keep the budgets and
# the exports inside the device call's limit: the databases live in /tmp of the lent machine only.
# Arguments: [GRID_BUDGET (300s)] [HELD_BUDGET (60s)] [EXTRA_BUDGET (240s)]; knobs: GPU, EXTRA_M, RECOPY,
# ODD_M_BUDGET (default 60 on the H100, else 0: the odd-M set is recorded for the H100 only).
set -euo pipefail
grid_budget=${1:-300s}
held_budget=${2:-60s}
extra_budget=${3:-240s}
extra_m=${EXTRA_M:-2,8,16,64,256}
gpu=${GPU:-h100}
# the odd-M held-out set is recorded for the H100 only: elsewhere it is skipped unless given a budget
odd_m_budget=${ODD_M_BUDGET:-$([ "$gpu" = h100 ] && echo 60 || echo 0)}
recopy=$([ "${RECOPY:-1}" = 0 ] || echo --recopy)
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
grid_db=/tmp/${gpu}_grid.sqlite
held_db=/tmp/${gpu}_heldout.sqlite
rm -f "$grid_db" "$held_db"
python -m autotuner import "tests/data/${gpu}_sweep.json.gz" --db "$grid_db"
python -m autotuner import "tests/data/${gpu}_heldout.json.gz" --db "$held_db"
# shellcheck disable=SC2086  # recopy: --recopy or nothing
python -m autotuner sweep --gpu "$gpu" --db "$grid_db" --time-cap 0.3 --retime-unstable 2 $recopy \
  --budget "$grid_budget" 2>&1 | tail -n 25
# the extra rows, and re-times what they show disturbed on the whole grid (a row over 3x the same
# kernel's time at a larger shape: an extra row can be that larger shape)
default_m=$(python -c 'from autotuner.tune.grid import DEFAULT_M; print(",".join(map(str, DEFAULT_M)))')
python -m autotuner sweep --gpu "$gpu" --db "$grid_db" --time-cap 0.3 --m "$default_m,$extra_m" --retime-unstable 2 \
  --budget "$extra_budget" 2>&1 | tail -n 12
# evaluate marks its runs held-out (fit never reads them); it resumes like a sweep. Its scoring step
# then fails ("no fitted cold table"): this database holds no table; the CPU scores the recording.
timeout "${held_budget%s}" python -m autotuner evaluate --gpu "$gpu" --db "$held_db" \
  --m 3,77,2000 --n 2500,12000,50257,128256 2>&1 | tail -n 8 || true
# the odd-M held-out set (84 shapes, about 7 min from scratch on an H100; a resume measures only what
# changed). A shape cut short here lacks some candidates: score the recording only once it is complete.
if [ "$odd_m_budget" != 0 ]; then
  odd_m=$(python -c 'from autotuner.report.evaluate import ODD_M_SET_M as v; print(",".join(map(str, v)))')
  odd_n=$(python -c 'from autotuner.report.evaluate import ODD_M_SET_N as v; print(",".join(map(str, v)))')
  timeout "$odd_m_budget" python -m autotuner evaluate --gpu "$gpu" --db "$held_db" \
    --m "$odd_m" --n "$odd_n" 2>&1 | tail -n 8 || true
fi
python -m autotuner export "$OUT/${gpu}_sweep.json.gz" --db "$grid_db" --gpu "$gpu"
python -m autotuner export "$OUT/${gpu}_heldout.json.gz" --db "$held_db" --gpu "$gpu"
