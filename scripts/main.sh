#!/usr/bin/env bash
# The main job on the embedded default (README): install, then serve dispatch answers from the shipped
# tables and the default SQLite database on http://127.0.0.1:8000 (GET /dispatch?m=&n=&dtype=&gpu=).
# On a GPU host, `autotuner sweep --gpu auto && autotuner fit --gpu <key>` first adds tables tuned there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
exec autotuner serve --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" "$@"
