# shellcheck shell=bash
# What the jobs of bench/device/jobs/ share, sourced by each (bench/device/README.md). Sets OUT (the
# device call's output folder, /tmp/out when unset) and creates it; the jobs run from the repository root.

OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

# device_info FILE FIELDS: the GPU's nvidia-smi fields (e.g. name,driver_version), printed and kept in $OUT/FILE
device_info() {
  nvidia-smi --query-gpu="$2" --format=csv,noheader | tee "$OUT/$1"
}

# seconds_since START: whole seconds since START (a `date +%s`)
seconds_since() {
  echo $(( $(date +%s) - $1 ))
}

# gpu_tests TIMEOUT LINES FILE PYTEST_ARGS...: a part of the GPU suite, its last LINES lines printed and
# kept in $OUT/FILE
gpu_tests() {
  local limit=$1 lines=$2 file=$3
  shift 3
  timeout "$limit" python -m pytest -q -p no:cacheprovider "$@" 2>&1 | tail -n "$lines" | tee "$OUT/$file"
}

# import_recordings DB GPU: every recording GPU's shipped tables are fitted from (RECORDINGS,
# autotuner/fit/samples.py) imported into DB
import_recordings() {
  local db=$1 gpu=$2 recordings f
  recordings=$(python -c "import sys; from autotuner.fit.samples import RECORDINGS; print(' '.join(RECORDINGS[sys.argv[1]]))" "$gpu") \
    || { echo "no recordings listed for $gpu in RECORDINGS (autotuner/fit/samples.py)" >&2; return 2; }
  for f in $recordings; do
    python -m autotuner import "$f" --db "$db" | tail -n 1
  done
}

# next_run_id DB: the id the next sweep run in DB gets
next_run_id() {
  python -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('select coalesce(max(id),0)+1 from sweep_runs').fetchone()[0])" "$1"
}

# export_runs_since DB GPU FIRST FILE: `autotuner export` of DB's runs from id FIRST on, into FILE
export_runs_since() {
  local runs
  runs=$(python -c "import sqlite3, sys; print(' '.join(f'--run {r}' for (r,) in sqlite3.connect(sys.argv[1]).execute('select id from sweep_runs where id >= ?', (int(sys.argv[2]),))))" "$1" "$3")
  # shellcheck disable=SC2086  # one --run per id
  python -m autotuner export "$4" --db "$1" --gpu "$2" $runs 2>&1
}

# sweep_keep_against_split DB GPU LIMIT BUDGET: cuda_cluster_keep beside cuda_cluster_split in one sweep
# (16-bit, M 1, 2, 4 x N 131072, 151936, 262144), its last lines printed
sweep_keep_against_split() {
  timeout "$3" python -m autotuner sweep --gpu "$2" --db "$1" --dtype fp16,bf16 \
    --variant cuda_cluster_keep --variant cuda_cluster_split --m 1,2,4 --n 131072,151936,262144 \
    --budget "$4" 2>&1 | tail -3
}
