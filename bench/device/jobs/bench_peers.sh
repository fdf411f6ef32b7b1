#!/usr/bin/env bash
# `autotuner bench` with every peer (torch, QuACK, Liger), through streams and with --graph-launch.
# Needs the CuTe DSL and QuACK installed on this warm machine by the `cute_setup` calls (run.sh sources
# cute_setup.sh for this job). --graph-launch times every contender as a CUDA-graph replay (see
# autotuner/tune/timing.py); one dtype per process, so that a stalled dtype loses only itself.
# Outputs in $OUT: bench_<TAG>_<mode>_<dtype>.csv and bench_<TAG>_peers.log (about 7 min on an H100).
# Knobs: MODES (default "stream graph") and DTYPES (default "fp32 fp16 bf16") narrow it; ROUNDS (default 3)
# and BENCH_ARGS (e.g. "--set domain": a held-out set instead of the grid) go to `autotuner bench`;
# BENCH_TIMEOUT bounds each process (seconds, default 200); TAG (default empty) names this shape set in the
# outputs, so that one call can run several sets. A process stopped by the timeout keeps the shapes it
# finished (the bench rewrites its CSV after each shape). Exits non-zero if QuACK does not import.
set -uo pipefail
# shellcheck source=bench/device/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tag=${TAG:+${TAG}_}
log="$OUT/bench_${tag}peers.log"
python -c "import quack" 2>/dev/null || { echo "QuACK does not import: run the cute_setup calls first (bench/device/README.md)" >&2; exit 3; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
for mode in ${MODES:-stream graph}; do
  flag=$([ "$mode" = graph ] && echo --graph-launch)
  for dtype in ${DTYPES:-fp32 fp16 bf16}; do
    started=$(date +%s)
    # shellcheck disable=SC2086  # flag and BENCH_ARGS are lists of arguments
    timeout "${BENCH_TIMEOUT:-200}" python -m autotuner bench --dtype "$dtype" --rounds "${ROUNDS:-3}" $flag ${BENCH_ARGS:-} \
      --output "/tmp/bench_${tag}${mode}_$dtype" >"/tmp/bench_${tag}${mode}_$dtype.log" 2>&1
    rc=$?
    { echo "== ${TAG:-} $mode $dtype: rc=$rc in $(seconds_since "$started") s"; tail -n 3 "/tmp/bench_${tag}${mode}_$dtype.log"; } | tee -a "$log"
    cp "/tmp/bench_${tag}${mode}_$dtype/bench.csv" "$OUT/bench_${tag}${mode}_$dtype.csv" 2>/dev/null
  done
done
