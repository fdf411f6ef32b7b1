#!/usr/bin/env bash
# Build .whl/: the pure-Python packages the lent GPU machine lacks (its image has torch, triton, CuPy,
# typer, rich, numpy, pytest, httpx but not the database and service stack). Carry .whl with the
# device call; bench/device/run.sh installs it there into /tmp/site (bench/device/README.md).
#
# --cute: instead build .whl_cute_1/ ... .whl_cute_K/, the CuTe DSL (nvidia-cutlass-dsl, cu13 flavour)
# and QuACK for kernels/cute_online.py and kernels/external.py (~97 MB of wheels, ~92 MB of them -libs-cu13).
# A device call sends the working tree (tracked files and untracked ones git does not ignore) plus what it
# carries, 64 MiB in all, so the wheels go as one tar archive cut into K equal slices, each sized so that
# it, the tree as measured now and a margin (CUTE_MARGIN_MIB, default 4) fit one call. Each folder holds
# its slice (cute.tar.<i>) and a MANIFEST (archive size and sha256, slice index, count and sha256). Carry
# them one per call on one warm machine; `bash bench/device/run.sh cute_setup` stages each slice and, once
# all K are there, joins, checks and installs (bench/device/README.md gives the calls). Rebuild when the tree has grown.
# CUTE_SLICE_MAX_BYTES caps the slices lower (e.g. to carry .whl beside one); CUTE_WHEELS_DIR takes the
# wheels from that folder instead of PyPI (offline rebuilds, tests/test_cute_slices.py).
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
fetch_into() {
  local dest=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dest" "$@"
}
exclude() {  # info/exclude of the repository (a worktree's .git is a file: ask git where it is)
  local file; file=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$file")"; grep -qxF "$1" "$file" 2>/dev/null || echo "$1" >> "$file"
}

build_cute() {
  # Versions: the newest quack-kernels (0.6.5) needs nvidia-cutlass-dsl>=4.7, torch, apache-tvm-ffi>=0.1.6,<0.2,
  # torch-c-dlpack-ext, einops. cutlass-dsl's libs need typing-extensions, cuda-bindings>=12.8, protobuf:
  # the device image has those, and torch, einops, numpy, packaging, so they do not travel.
  local wheels=(
    "nvidia-cutlass-dsl==4.8.1"            # only a .pth + metadata (its default needs -libs-cu12: --no-deps)
    "nvidia-cutlass-dsl-libs-base==4.8.1"  # cutlass/_mlir python + iket .so (cp312)
    "nvidia-cutlass-dsl-libs-core==4.8.1"  # cutlass/{cute,base_dsl,...} python
    "nvidia-cutlass-dsl-libs-cu13==4.8.1"  # _cutlass_ir.cu13 .so + cu13/lib/libcute_dsl_runtime.so (~92 MB)
    "quack-kernels==0.6.5"
    "apache-tvm-ffi==0.1.15.post2"         # quack.cache imports tvm_ffi at module level (cp312)
    "torch-c-dlpack-ext==0.1.5"            # quack's declared need; a no-op where torch has the DLPack C API
  )
  local call_limit=$(( 64 * 1024 * 1024 )) margin=$(( ${CUTE_MARGIN_MIB:-4} * 1024 * 1024 ))
  dl=$(mktemp -d)  # global: the EXIT trap removes it
  trap 'rm -rf "$dl"' EXIT
  exclude "/.whl_cute_*/"
  rm -rf .whl_cute_*
  # what every call sends besides the carried folder: tracked files and untracked ones git does not ignore
  local tree_bytes
  tree_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1 || true)
  local slice_max=$(( call_limit - tree_bytes - margin ))
  if (( slice_max < 1024 * 1024 )); then
    echo "the working tree ($tree_bytes bytes) leaves no room in a call's 64 MiB for a slice (margin $margin bytes)" >&2
    exit 1
  fi
  if [[ -n "${CUTE_SLICE_MAX_BYTES:-}" ]] && (( CUTE_SLICE_MAX_BYTES < slice_max )); then
    slice_max=$CUTE_SLICE_MAX_BYTES
  fi
  if [[ -n "${CUTE_WHEELS_DIR:-}" ]]; then
    mkdir -p "$dl/wheels"; cp "$CUTE_WHEELS_DIR"/*.whl "$dl/wheels/"
  else
    fetch_into "$dl/wheels" "${wheels[@]}"
  fi
  local archive="$dl/cute.tar"
  (cd "$dl/wheels" && tar -cf "$archive" -- *.whl)
  local archive_bytes archive_sha built count slice_bytes
  archive_bytes=$(stat -c %s "$archive")
  archive_sha=$(sha256sum "$archive" | cut -d' ' -f1)
  built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  count=$(( (archive_bytes + slice_max - 1) / slice_max ))
  slice_bytes=$(( (archive_bytes + count - 1) / count ))  # equal slices, the last one shorter
  (cd "$dl" && split -a 3 -d -b "$slice_bytes" cute.tar slice.)
  local i folder piece
  for (( i = 1; i <= count; i++ )); do
    folder=".whl_cute_$i"; piece=$(printf "%s/slice.%03d" "$dl" $(( i - 1 )))
    mkdir -p "$folder"
    mv "$piece" "$folder/cute.tar.$i"
    # the manifest bench/device/cute_setup.sh reads (key=value; the archive's sha256 names the build)
    {
      echo "archive_bytes=$archive_bytes"
      echo "archive_sha256=$archive_sha"
      echo "slice_index=$i"
      echo "slice_count=$count"
      echo "slice_sha256=$(sha256sum "$folder/cute.tar.$i" | cut -d' ' -f1)"
      echo "built=$built"
      echo "wheels=$(cd "$dl/wheels" && echo *.whl)"
    } > "$folder/MANIFEST"
  done
  # shellcheck disable=SC2046  # the slice paths hold no spaces
  cat $(for (( i = 1; i <= count; i++ )); do echo ".whl_cute_$i/cute.tar.$i"; done) | cmp -s - "$archive" \
    || { echo "slice check failed: the slices do not join into the archive" >&2; exit 1; }
  ls -la .whl_cute_*
  echo "archive $archive_bytes bytes (sha256 ${archive_sha:0:12}, $(ls "$dl/wheels" | wc -l) wheels) in $count slices of" \
       "$slice_bytes bytes: .whl_cute_1 ... .whl_cute_$count; working tree $tree_bytes bytes + a slice <=" \
       "$(( (tree_bytes + slice_bytes) / 1048576 )) MiB of 64 (margin $(( margin / 1048576 )) MiB: CUTE_MARGIN_MIB)"
  echo "carry each alone, one per call on one warm machine: bash bench/device/run.sh cute_setup"
}

if [[ "${1:-}" == "--cute" ]]; then
  build_cute
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--cute]   (no option: .whl/; --cute: .whl_cute_1/ ... .whl_cute_K/)" >&2
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
