#!/usr/bin/env bash
# Build .whl/: the pure-Python packages the lent GPU machine lacks (its image has torch, triton, CuPy,
# typer, rich, numpy, pytest, httpx but not the database and service stack). Carry .whl with the
# device call and install there with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info; grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
fetch() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$@"
}
fetch "sqlalchemy==2.0.44" "greenlet==3.2.4" \
      "pydantic==2.12.4" "pydantic-core==2.41.5" "pydantic-settings==2.11.0" "annotated-types==0.7.0" \
      "typing-inspection==0.4.2" "python-dotenv==1.2.1" \
      "fastapi==0.121.1" "starlette==0.49.3" "uvicorn==0.38.0"
# optional peers, recorded like any candidate when importable
fetch "liger-kernel==0.6.3" || echo "liger-kernel not fetched (optional)"
ls -la .whl
