# Sourced by scripts/test.sh and scripts/main.sh: create .venv and install the project into it once.
# Torch: an existing install is kept; otherwise the CPU build 2.13.0 where pip can find it (a GPU host
# installs its CUDA build of torch and `pip install -e '.[cuda13]'` itself: see README.md).
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
# a change to pyproject.toml reinstalls
stamp=.venv/.installed-$(sha256sum < pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0" || python -m pip install -q torch
  python -m pip install -q -e '.[dev,kernels]'
  touch "$stamp"
fi
