#!/usr/bin/env bash
# The main job on the embedded default (README): install what serving needs (no torch, Triton or test
# tools), then serve dispatch answers from the shipped tables and the default SQLite database on
# http://127.0.0.1:8000 (GET /dispatch?m=&n=&dtype=&gpu=). Arguments go to `autotuner serve`
# (--host 0.0.0.0 --port 9000, --db URL).
# On a GPU host, `autotuner sweep --gpu auto && autotuner fit --gpu <key>` first adds tables tuned there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh serve
exec autotuner serve "$@"
