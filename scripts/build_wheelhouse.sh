#!/usr/bin/env bash
# Build .whl/: the pure-Python packages the lent GPU machine lacks (its image has torch, triton, CuPy,
# typer, rich, numpy, pytest, httpx but not the database and service stack). Carry .whl with the
# device call and install there with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#
# --cute: instead build .whl_cute_a/ and .whl_cute_b/, the CuTe DSL (nvidia-cutlass-dsl, cu13 flavour)
# and QuACK for kernels/cute_online.py and kernels/external.py. Its big wheel (-libs-cu13, ~92 MB) is
# over a call's 64 MiB, so it is cut in two: .whl_cute_a holds the small wheels and the first piece,
# .whl_cute_b the second, sized so that both folders are about equal (~48.5 MiB each). Carry them in two
# consecutive calls on the still-warm machine; scripts/device_cute_setup.sh stages, joins, checks and
# installs them (its header gives the two commands).
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
fetch_into() {
  local dest=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dest" "$@"
}
exclude() { mkdir -p .git/info; grep -qx "$1" .git/info/exclude 2>/dev/null || echo "$1" >> .git/info/exclude; }

build_cute() {
  # Versions: the newest quack-kernels (0.6.5) needs nvidia-cutlass-dsl>=4.7, torch, apache-tvm-ffi>=0.1.6,<0.2,
  # torch-c-dlpack-ext, einops. cutlass-dsl's libs need typing-extensions, cuda-bindings>=12.8, protobuf:
  # the device image has those, and torch, einops, numpy, packaging, so they do not travel.
  local small=(
    "nvidia-cutlass-dsl==4.8.1"            # only a .pth + metadata (its default needs -libs-cu12: --no-deps)
    "nvidia-cutlass-dsl-libs-base==4.8.1"  # cutlass/_mlir python + iket .so (cp312)
    "nvidia-cutlass-dsl-libs-core==4.8.1"  # cutlass/{cute,base_dsl,...} python
    "quack-kernels==0.6.5"
    "apache-tvm-ffi==0.1.15.post2"         # quack.cache imports tvm_ffi at module level (cp312)
    "torch-c-dlpack-ext==0.1.5"            # quack's declared need; a no-op where torch has the DLPack C API
  )
  local big_spec="nvidia-cutlass-dsl-libs-cu13==4.8.1"  # _cutlass_ir.cu13 .so + cu13/lib/libcute_dsl_runtime.so
  local big_prefix="nvidia_cutlass_dsl_libs_cu13-4.8.1-"
  local part_a="libs-cu13.part-aa" part_b="libs-cu13.part-ab"
  dl=$(mktemp -d)  # global: the EXIT trap removes it
  trap 'rm -rf "$dl"' EXIT
  fetch_into "$dl" "${small[@]}" "$big_spec"
  local big; big=$(cd "$dl" && ls ${big_prefix}*.whl)
  exclude "/.whl_cute_a/"; exclude "/.whl_cute_b/"
  rm -rf .whl_cute_a .whl_cute_b
  mkdir -p .whl_cute_a .whl_cute_b
  mv "$dl"/*.whl .whl_cute_a/
  mv ".whl_cute_a/$big" "$dl/$big"
  # piece sizes: small wheels + piece a == piece b
  local small_bytes big_bytes b_bytes a_bytes
  small_bytes=$(cat .whl_cute_a/*.whl | wc -c)
  big_bytes=$(stat -c %s "$dl/$big")
  b_bytes=$(( (big_bytes + small_bytes) / 2 ))
  a_bytes=$(( big_bytes - b_bytes ))
  head -c "$a_bytes" "$dl/$big" > ".whl_cute_a/$part_a"
  tail -c "+$((a_bytes + 1))" "$dl/$big" > ".whl_cute_b/$part_b"
  cat ".whl_cute_a/$part_a" ".whl_cute_b/$part_b" | cmp -s - "$dl/$big" || { echo "split check failed" >&2; exit 1; }
  # one manifest (sha256sum format) in both folders: every wheel, the joined wheel's name, both pieces
  (cd "$dl" && sha256sum "$big") > .whl_cute_a/SHA256SUMS
  (cd .whl_cute_a && sha256sum $(ls *.whl) "$part_a") >> .whl_cute_a/SHA256SUMS
  (cd .whl_cute_b && sha256sum "$part_b") >> .whl_cute_a/SHA256SUMS
  cp .whl_cute_a/SHA256SUMS .whl_cute_b/SHA256SUMS
  ls -la .whl_cute_a .whl_cute_b
  local a_size b_size limit=$(( (64 - 7) * 1024 * 1024 ))
  a_size=$(du -sb .whl_cute_a | cut -f1); b_size=$(du -sb .whl_cute_b | cut -f1)
  echo ".whl_cute_a: $a_size bytes ($((a_size / 1048576)) MiB); .whl_cute_b: $b_size bytes ($((b_size / 1048576)) MiB); joined: $big"
  if (( a_size > limit || b_size > limit )); then
    echo "WARNING: a folder is over 57 MiB: with the working tree and .whl it may not fit one call's 64 MiB" >&2
  fi
}

if [[ "${1:-}" == "--cute" ]]; then
  build_cute
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--cute]   (no option: .whl/; --cute: .whl_cute_a/ and .whl_cute_b/)" >&2
  exit 2
fi

exclude "/.whl/"
mkdir -p .whl
fetch() { fetch_into .whl "$@"; }
fetch "sqlalchemy==2.0.44" "greenlet==3.2.4" \
      "pydantic==2.12.4" "pydantic-core==2.41.5" "pydantic-settings==2.11.0" "annotated-types==0.7.0" \
      "typing-inspection==0.4.2" "python-dotenv==1.2.1" \
      "fastapi==0.121.1" "starlette==0.49.3" "uvicorn==0.38.0" \
      "alembic==1.20.1" "mako==1.4.3" "fastapi-offline==1.7.7"
# optional peers, recorded like any candidate when importable
fetch "liger-kernel==0.6.3" || echo "liger-kernel not fetched (optional)"
ls -la .whl
