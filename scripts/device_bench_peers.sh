#!/usr/bin/env bash
# On the lent GPU, after the CuTe DSL and QuACK are installed there (scripts/device_cute_setup.sh, one
# call per slice on one warm machine): `autotuner bench` with every peer (torch, QuACK, Liger), once through
# streams and once with --graph-launch (every contender timed as a CUDA-graph replay: see
# autotuner/tune/timing.py), one dtype per process so that a stalled dtype loses only itself. Outputs in
# $OUT: bench_stream_<dtype>.csv, bench_graph_<dtype>.csv and bench_peers.log (about 7 min on an H100).
#
#   calls 1 ... K (carry [".whl_cute_<i>"] alone, the slices `build_wheelhouse.sh --cute` wrote):
#     bash scripts/device_cute_setup.sh   (the call with the last slice installs; .whl beside a slice would
#     pass the run tool's 64 MiB carry limit)
#   call K+1 (carry [".whl"]):
#     bash scripts/device_run.sh bash -c 'source scripts/device_cute_setup.sh && bash scripts/device_bench_peers.sh'
#
# MODES (default "stream graph") and DTYPES (default "fp32 fp16 bf16") narrow it; ROUNDS (default 3) and
# BENCH_ARGS (e.g. "--set domain": a held-out set instead of the grid) go to `autotuner bench`; BENCH_TIMEOUT bounds
# each process (seconds, default 200); TAG (default empty) names this shape set in the outputs
# (bench_<TAG>_<mode>_<dtype>.csv), so that one call can run several sets. A process stopped by the timeout
# keeps the shapes it finished (the bench rewrites its CSV after each shape).
# Exits non-zero if QuACK does not import: the point is the peers.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
tag=${TAG:+${TAG}_}
log="$out/bench_${tag}peers.log"
python -c "import quack" 2>/dev/null || { echo "QuACK does not import: source scripts/device_cute_setup.sh first" >&2; exit 3; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
for mode in ${MODES:-stream graph}; do
  flag=$([ "$mode" = graph ] && echo --graph-launch)
  for dtype in ${DTYPES:-fp32 fp16 bf16}; do
    started=$(date +%s)
    timeout "${BENCH_TIMEOUT:-200}" python -m autotuner bench --dtype "$dtype" --rounds "${ROUNDS:-3}" $flag ${BENCH_ARGS:-} \
      --output "/tmp/bench_${tag}${mode}_$dtype" >"/tmp/bench_${tag}${mode}_$dtype.log" 2>&1
    rc=$?
    { echo "== ${TAG:-} $mode $dtype: rc=$rc in $(( $(date +%s) - started )) s"; tail -n 3 "/tmp/bench_${tag}${mode}_$dtype.log"; } | tee -a "$log"
    cp "/tmp/bench_${tag}${mode}_$dtype/bench.csv" "$out/bench_${tag}${mode}_$dtype.csv" 2>/dev/null
  done
done
