#!/usr/bin/env bash
# The one entry point on the lent GPU machine (bench/device/README.md lists the jobs, their knobs and
# the exact device calls). As the device command, from the repository root:
#   bash bench/device/run.sh JOB [ARGS...]        a job of bench/device/jobs/ (JOB.sh, or JOB.py)
#   bash bench/device/run.sh exec CMD [ARGS...]   any command, set up the same way
#   bash bench/device/run.sh cute_setup           stage a carried CuTe DSL slice; the last one installs
#   bash bench/device/run.sh list                 the jobs, a line each
# Set-up: the carried wheelhouse .whl (built here by scripts/build_wheelhouse.sh) installed into /tmp/site,
# which goes on PYTHONPATH with the repository, and PYTHONUNBUFFERED=1. Jobs that bench QuACK
# (bench_peers, refit_and_bench), and any with CUTE=1, first source bench/device/cute_setup.sh, which finds
# the CuTe DSL installed on this warm machine by the cute_setup calls (it fails, naming what to carry, where not).
set -uo pipefail
device_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$device_dir/../.." || exit 2
CUTE_JOBS=" bench_peers refit_and_bench "

jobs_list() {
  local file
  for file in "$device_dir"/jobs/*; do
    [[ "$file" == *.sh || "$file" == *.py ]] || continue  # not __pycache__/
    # the first comment line after the shebang (a Python job: its docstring's first line)
    printf '%-18s %s\n' "$(basename "${file%.*}")" \
      "$(sed -n '1,4{s/^# //p;s/^"""//p}' "$file" | head -n 1 | cut -c1-100)"
  done
}

job=${1:-}
if [[ "$job" == list ]]; then
  jobs_list
  exit 0
elif [[ "$job" == cute_setup ]]; then  # carried alone (a slice leaves no room for .whl): no wheelhouse
  exec bash "$device_dir/cute_setup.sh"
elif [[ "$job" != exec && ! -f "$device_dir/jobs/$job.sh" && ! -f "$device_dir/jobs/$job.py" ]]; then
  echo "usage: bash bench/device/run.sh JOB [ARGS...] | exec CMD [ARGS...] | cute_setup | list" >&2
  [[ -n "$job" ]] && echo "no job '$job'; the jobs (bench/device/README.md):" >&2
  jobs_list >&2
  exit 2
fi
shift

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 3; }
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}  # a path set before (the CuTe DSL's) stays, after ours
export PYTHONUNBUFFERED=1
if [[ "$CUTE_JOBS" == *" $job "* || "${CUTE:-0}" == 1 ]]; then
  # shellcheck source=bench/device/cute_setup.sh
  source "$device_dir/cute_setup.sh" || exit
fi
case $job in
  exec) exec "$@" ;;
  *) if [[ -f "$device_dir/jobs/$job.py" ]]; then exec python3 "$device_dir/jobs/$job.py" "$@"; fi
     exec bash "$device_dir/jobs/$job.sh" "$@" ;;
esac
