#!/usr/bin/env bash
# Set-up for any command on the lent GPU machine: install the carried wheelhouse (.whl, built by
# scripts/build_wheelhouse.sh) into /tmp/site and put it and the repo on PYTHONPATH.
# Usage (as the device command):  bash scripts/device_run.sh CMD ARGS...
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 3; }
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}  # a path set before (the CuTe DSL's) stays, after ours
export PYTHONUNBUFFERED=1
# the lookup's compiled rule (autotuner/lookup/_fastrule*.c), built in place as `pip install -e .` builds
# it, with no setuptools needed; without it the lookup answers alike through its Python form
python3 -c "import glob, subprocess, sysconfig; subprocess.run(['cc', '-O2', '-shared', '-fPIC', '-I' + sysconfig.get_paths()['include'],
  *sorted(glob.glob('autotuner/lookup/_fastrule*.c')), '-o', 'autotuner/lookup/_fastrule' + sysconfig.get_config_var('EXT_SUFFIX')], check=True)" \
  >/tmp/fastrule.log 2>&1 || echo "device_run.sh: the lookup's compiled rule was not built: $(tail -n 3 /tmp/fastrule.log)"
exec "$@"
