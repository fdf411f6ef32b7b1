#!/usr/bin/env bash
# Set-up for any command on the lent GPU machine: install the carried wheelhouse (.whl, built by
# scripts/build_wheelhouse.sh) into /tmp/site and put it and the repo on PYTHONPATH.
# Usage (as the device command):  bash scripts/device_run.sh CMD ARGS...
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 3; }
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}  # a path set before (the CuTe DSL's) stays, after ours
export PYTHONUNBUFFERED=1
exec "$@"
