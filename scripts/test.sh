#!/usr/bin/env bash
# The test command (README, .ci/run): set up .venv on a fresh machine, start a throwaway PostgreSQL
# server if this machine can run one, and run the CPU suite (GPU tests skip themselves without a GPU).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m gpu` on a GPU host.
set -euo pipefail
cd "$(dirname "$0")/.."

# Headless Chromium for the page's screenshot test (tests/service/test_page.py): installed from the
# distribution's packages where this runs as root with apt-get (without it that test skips itself), in
# the background while .venv is set up: both mostly wait on downloads.
chromium_job=""
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test.sh: installing chromium for the page's screenshot test, in the background (log: /tmp/autotuner-chromium.log)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
    >/tmp/autotuner-chromium.log 2>&1 &
  chromium_job=$!
fi
source scripts/setup_env.sh test

pg_dir=""
# On exit: stop the throwaway server and remove its folder (data, logs, socket; about 40 MB).
cleanup() {
  [ -n "$pg_dir" ] || return 0
  runuser -u postgres -- pg_ctl -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf -- "$pg_dir"
}
trap cleanup EXIT
if [ -z "${AUTOTUNER_TEST_POSTGRES_URL:-}" ] && command -v initdb >/dev/null && id postgres >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  pg_dir=$(mktemp -d /tmp/autotuner-pg.XXXXXX); chown postgres "$pg_dir"
  port=55432
  if runuser -u postgres -- initdb -D "$pg_dir/data" -A trust -U postgres >"$pg_dir/initdb.log" 2>&1 &&
     runuser -u postgres -- pg_ctl -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
       -o "-p $port -k $pg_dir -c listen_addresses=127.0.0.1" start >/dev/null 2>&1; then
    export AUTOTUNER_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
    echo "test.sh: PostgreSQL started for the database tests ($AUTOTUNER_TEST_POSTGRES_URL)"
  else
    echo "test.sh: could not start PostgreSQL; its tests will be skipped. Its logs:" >&2
    tail -n 20 "$pg_dir"/*.log >&2 2>/dev/null || true
  fi
fi
# Bytecode for the project's modules, written once: where PYTHONDONTWRITEBYTECODE is set (CI's machines
# set it) every process the tests start (CLI runs, sweep workers, upload processes) would otherwise
# compile the modules it imports again, about 0.25 s a start (py_compile writes whatever that says).
python -m compileall -q -j 0 kernels autotuner db service tests bench scripts >/dev/null
if [ -n "$chromium_job" ]; then
  if wait "$chromium_job"; then
    echo "test.sh: chromium installed"
  else
    echo "test.sh: could not install chromium (log: /tmp/autotuner-chromium.log); the screenshot test will be skipped" >&2
  fi
fi
# The CPU suite runs on every core (pytest-xdist, a test file per worker so that a module's fixtures, such
# as an imported recording, are built once); a GPU host runs one process so that GPU timings are not
# disturbed. AUTOTUNER_TEST_WORKERS=N (0: no workers) chooses.
workers=${AUTOTUNER_TEST_WORKERS:-}
if [ -z "$workers" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then workers=0; else workers=auto; fi
fi
python -m pytest -n "$workers" --dist loadfile "$@"
