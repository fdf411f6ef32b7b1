# Sourced by scripts/main.sh and scripts/test.sh: create .venv and install one set of packages into it,
# once (a change to pyproject.toml installs again), saying what it does while it does it.
#
#   source scripts/setup_env.sh serve   # the project and what serving needs: no torch, Triton or test tools
#   source scripts/setup_env.sh test    # also the test stack: torch (the CPU build 2.13.0 where pip finds
#                                       # it; an existing install is kept), Triton, pytest and the rest of
#                                       # the dev and kernels extras
#
# Each set has its own stamp in .venv, so switching works both ways: `test` after `serve` adds the test
# stack; `serve` after `test` has nothing to do (the test set holds the serving one). A GPU host installs
# its CUDA build of torch and `pip install -e '.[cuda13]'` itself: see README.md.
setup_set=${1:-test}
# serve: no bytecode compiled at install (most of a fresh install's time on a 2-core machine, for modules a
# server never imports); the test stack keeps it: the suite's hundreds of processes import them all
case "$setup_set" in
  serve) setup_extras=""; setup_options="--no-compile" ;;
  test) setup_extras="[dev,kernels]"; setup_options="" ;;
  *) echo "setup_env.sh: unknown set '$setup_set' (serve or test)" >&2; return 2 ;;
esac

setup_say() { echo "setup_env: $*" >&2; }
# pip's own lines that show progress, one per package, without its notes on every other package
setup_pip() {
  (set -o pipefail; python -m pip install --disable-pip-version-check "$@" 2>&1 |
    awk '/^(Collecting|Installing collected|Successfully installed|ERROR|error:)/ { print "  " $0 > "/dev/stderr"; fflush() }')
}

if [ ! -x .venv/bin/python ]; then
  setup_say "creating .venv"
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
setup_hash=$(sha256sum < pyproject.toml | cut -c1-16)
if [ ! -f ".venv/.installed-$setup_set-$setup_hash" ] && ! { [ "$setup_set" = serve ] && [ -f ".venv/.installed-test-$setup_hash" ]; }; then
  setup_started=$SECONDS
  # an editable install of a pyproject project needs pip >= 21.3 (Python 3.10.0 ships 21.2)
  python -c 'import pip, sys; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (21, 3))' ||
    setup_pip --upgrade pip || { setup_say "could not upgrade pip"; return 1; }
  if [ "$setup_set" = test ] && ! python -c "import torch" 2>/dev/null; then
    setup_say "installing torch (CPU build) for the tests"
    setup_pip "torch==2.13.0" || setup_pip torch || { setup_say "could not install torch"; return 1; }
  fi
  setup_say "installing softmax-autotuner$setup_extras into .venv"
  setup_pip $setup_options -e ".$setup_extras" || { setup_say "could not install softmax-autotuner$setup_extras (pip's errors above)"; return 1; }
  touch ".venv/.installed-$setup_set-$setup_hash"
  setup_say "installed the $setup_set set in $((SECONDS - setup_started)) s"
fi
unset setup_set setup_extras setup_options setup_hash setup_started
