#!/usr/bin/env bash
# shellcheck shell=bash
# On the lent GPU machine, in the repo root: install the CuTe DSL (nvidia-cutlass-dsl 4.8.1, cu13) and
# QuACK from the slices built here by `scripts/build_wheelhouse.sh --cute`, and put them on PYTHONPATH.
#
# The wheels (~97 MB) travel as one archive cut into K slices, .whl_cute_1 ... .whl_cute_K (the build
# prints K), one per call on the same warm machine: each call carries one slice folder alone (with .whl
# and the tree it would pass the 64 MiB carry limit) and runs this script, which stages the slice in
# /tmp/cute_slices; the call that brings the last one joins them, checks the archive's sha256 and
# installs into /tmp/site_cute, which later calls on that machine reuse.
#   call i = 1 ... K (carry [".whl_cute_<i>"]):
#     bash bench/device/run.sh cute_setup
#   later calls on the same warm machine (carry [".whl"]): bench/device/run.sh sources it for the jobs
#   that bench QuACK (and for any with CUTE=1); it finds the install and only sets PYTHONPATH:
#     CUTE=1 bash bench/device/run.sh exec python3 -c "import cutlass, quack"
#   A fresh machine needs the K calls again.
# Slices are staged per build (the archive's sha256 and K): slices of different builds never join, and
# the newest build whose slices are all staged is the one installed.
#
# Sourced, it exports PYTHONPATH (appends /tmp/site_cute and /tmp/site_cute/nvidia_cutlass_dsl/dsl_packages:
# pip --target does not process the wheel's nvidia_cutlass_dsl_packages.pth) and returns 0 only when
# the install is ready. Run as a script it prints that export line; it also exits 0 when it has just
# staged a slice (the install then waits for the others, and it names the next one to carry).
# Non-zero: 2 slices missing or a slice folder without a readable MANIFEST, 3 a checksum, install or
# layout check failed. CUTE_FORCE=1 reinstalls from the staged slices. CUTE_STAGE and CUTE_TARGET move
# /tmp/cute_slices and /tmp/site_cute (tests/test_cute_slices.py).

_cute_setup() {
  local root stages=${CUTE_STAGE:-/tmp/cute_slices} target=${CUTE_TARGET:-/tmp/site_cute}
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)  # the repository root, where the carried folders land
  local marker="$target/.cute_installed"
  _cute_staged=0  # global: a slice was staged by this run

  _cute_say() { echo "[cute-setup] $*"; }
  _cute_fail() { local rc=$1; shift; echo "[cute-setup] ERROR: $*" >&2; return "$rc"; }
  _cute_field() { sed -n "s/^$1=//p" "$2" | head -1; }
  # the build a staged folder holds: "<archive sha256>_<K>"
  _cute_complete() {
    local dir=$1 count i
    count=${dir##*_}
    for (( i = 1; i <= count; i++ )); do [[ -f "$dir/cute.tar.$i" ]] || return 1; done
  }

  mkdir -p "$stages"
  # 1. stage every slice folder present (a warm machine keeps the folders of earlier calls: skip those
  #    already staged)
  local folder name manifest sha index count slice_sha built dir
  local -A here=()
  local nullglob_was; nullglob_was=$(shopt -p nullglob); shopt -s nullglob
  local folders=("$root"/.whl_cute_*/)
  $nullglob_was
  for folder in "${folders[@]}"; do
    folder=${folder%/}; name=${folder##*/}; manifest="$folder/MANIFEST"
    [[ -f "$manifest" ]] || { _cute_fail 2 "$name has no MANIFEST: rebuild with 'bash scripts/build_wheelhouse.sh --cute'"; return; }
    sha=$(_cute_field archive_sha256 "$manifest"); index=$(_cute_field slice_index "$manifest")
    count=$(_cute_field slice_count "$manifest"); slice_sha=$(_cute_field slice_sha256 "$manifest")
    built=$(_cute_field built "$manifest")
    if ! [[ "$sha" =~ ^[0-9a-f]{64}$ && "$slice_sha" =~ ^[0-9a-f]{64}$ && "$index" =~ ^[1-9][0-9]*$ \
            && "$count" =~ ^[1-9][0-9]*$ ]] || (( index > count )) || [[ "$name" != ".whl_cute_$index" ]]; then
      _cute_fail 2 "$name: its MANIFEST is damaged or names another slice (index '$index' of '$count'): rebuild"; return
    fi
    dir="$stages/${sha}_$count"
    here[${sha}_$count]+=" $name"
    if [[ -f "$dir/cute.tar.$index" ]] && cmp -s "$manifest" "$dir/MANIFEST.$index"; then
      continue
    fi
    [[ -f "$folder/cute.tar.$index" ]] || { _cute_fail 2 "$name lacks cute.tar.$index: carry it again"; return; }
    echo "$slice_sha  $folder/cute.tar.$index" | sha256sum -c --quiet - >/dev/null 2>&1 || {
      _cute_fail 3 "$name: cute.tar.$index does not match its sha256 (damaged in transit?): carry $name again"; return; }
    mkdir -p "$dir"
    cp "$folder/cute.tar.$index" "$dir/cute.tar.$index.tmp" && mv "$dir/cute.tar.$index.tmp" "$dir/cute.tar.$index"
    cp "$manifest" "$dir/MANIFEST.$index"
    touch "$dir"  # device time: the newest build is the one installed
    _cute_staged=1
    _cute_say "staged slice $index of $count of build ${sha:0:12} (built $built) in $dir"
  done
  if (( ${#here[@]} > 1 )); then
    local key
    _cute_say "NOTE: slices of different builds are here:"
    for key in "${!here[@]}"; do _cute_say "  build ${key:0:12} (K=${key##*_}):${here[$key]}"; done
    _cute_say "  they are staged apart and never joined; carry the slices of one build"
  fi

  # 2. the slices still missing, per build (newest first), and the newest complete build
  local newest_complete="" i have missing
  # shellcheck disable=SC2045  # newest first: ls -t orders by time (the staged folders are named by hashes)
  for dir in $(ls -dt "$stages"/*_*/ 2>/dev/null); do
    dir=${dir%/}
    if _cute_complete "$dir"; then
      [[ -n "$newest_complete" ]] || newest_complete=$dir
      continue
    fi
    count=${dir##*_}; have=""; missing=""
    for (( i = 1; i <= count; i++ )); do
      if [[ -f "$dir/cute.tar.$i" ]]; then have+=" $i"; else missing+="${missing:+ }.whl_cute_$i"; fi
    done
    local key=${dir##*/}; _cute_say "build ${key:0:12} (K=$count): slices${have} of $count staged; carry ${missing%% *} next (missing: $missing)"
  done

  # 3. install the newest complete build (skip if it is installed already)
  if [[ -n "$newest_complete" && -f "$marker" && -z "${CUTE_FORCE:-}" \
        && "$(cat "$marker")" == "${newest_complete##*/}" ]]; then
    _cute_say "already installed in $target (build $(cut -c1-12 "$marker"))"
  elif [[ -n "$newest_complete" ]]; then
    _cute_install "$newest_complete" || return
  elif [[ -f "$marker" && -z "${CUTE_FORCE:-}" ]]; then
    _cute_say "already installed in $target (build $(cut -c1-12 "$marker"); its slices are no longer staged)"
  elif (( _cute_staged )); then
    _cute_say "NOT READY: run the next call on this warm machine with the slice named above carried"
    return 2
  else
    _cute_fail 2 "CuTe DSL not installed in $target and no complete set of slices staged. Build here with" \
      "'bash scripts/build_wheelhouse.sh --cute', then carry .whl_cute_1 ... .whl_cute_K one per call"
    return
  fi
  return 0
}

# Join the slices of one staged build, check the archive, unpack and install its wheels into /tmp/site_cute.
_cute_install() {
  local dir=$1 target=${CUTE_TARGET:-/tmp/site_cute} key=${1##*/}
  local count=${key##*_} manifest="$1/MANIFEST.1" want_bytes want_sha i
  want_bytes=$(_cute_field archive_bytes "$manifest"); want_sha=$(_cute_field archive_sha256 "$manifest")
  _cute_say "joining $count slices of build ${key:0:12}"
  for (( i = 1; i <= count; i++ )); do cat "$dir/cute.tar.$i"; done > "$dir/cute.tar"
  if [[ "$(stat -c %s "$dir/cute.tar")" != "$want_bytes" ]] \
     || ! echo "$want_sha  $dir/cute.tar" | sha256sum -c --quiet - >/dev/null 2>&1; then
    rm -rf "$dir"
    _cute_fail 3 "the joined archive of build ${key:0:12} does not match its size or sha256: its staged slices" \
      "are removed; carry .whl_cute_1 ... .whl_cute_$count of one build again"
    return
  fi
  rm -rf "$dir/wheels"; mkdir -p "$dir/wheels"
  tar -xf "$dir/cute.tar" -C "$dir/wheels" || { _cute_fail 3 "cannot unpack $dir/cute.tar"; return; }
  rm -f "$dir/cute.tar"
  local wheel
  for wheel in $(_cute_field wheels "$manifest"); do
    [[ -f "$dir/wheels/$wheel" ]] || { _cute_fail 3 "the archive lacks $wheel"; return; }
  done
  _cute_say "installing $(ls "$dir"/wheels/*.whl | wc -l) wheels into $target"
  rm -rf "$target.tmp"
  # one pip run for all of them: the cutlass wheels share nvidia_cutlass_dsl/, which pip merges
  # only within one run (a second --target run would skip or replace the existing folder)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$target.tmp" "$dir"/wheels/*.whl > "$dir/pip.log" 2>&1 || {
    cat "$dir/pip.log" >&2; _cute_fail 3 "pip install failed"; return; }
  rm -rf "$dir/wheels"
  local f missing=()
  for f in nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py \
           nvidia_cutlass_dsl/dsl_packages/cutlass/cute/__init__.py \
           nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/__init__.py \
           "nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so" \
           nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so \
           quack/__init__.py quack/softmax.py tvm_ffi/__init__.py torch_c_dlpack_ext/__init__.py; do
    [[ -e "$target.tmp/$f" ]] || missing+=("$f")
  done
  (( ${#missing[@]} == 0 )) || { _cute_fail 3 "install lacks: ${missing[*]}"; return; }
  rm -rf "$target"; mv "$target.tmp" "$target"
  echo "$key" > "$target/.cute_installed"
  # other complete builds are superseded (incomplete ones may be newer: they stay)
  local other
  for other in "${dir%/*}"/*_*/; do
    other=${other%/}
    [[ "$other" != "$dir" ]] && _cute_complete "$other" && rm -rf "$other"
  done
  _cute_say "installed: $(cd "$target" && ls -d *.dist-info | sed 's/\.dist-info//' | tr '\n' ' ')"
  python3 - <<'PY' || true
import importlib.metadata as m
for name in ("cuda-bindings", "typing_extensions", "protobuf", "einops", "torch"):
    try:
        print(f"[cute-setup] image has {name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"[cute-setup] WARNING: image lacks {name}: carry its wheel")
PY
}

_cute_add_path() {
  local p
  local target=${CUTE_TARGET:-/tmp/site_cute}
  for p in "$target" "$target/nvidia_cutlass_dsl/dsl_packages"; do
    case ":${PYTHONPATH:-}:" in *":$p:"*) ;; *) PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$p" ;; esac
  done
  export PYTHONPATH
}

_cute_setup; _cute_rc=$?
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then  # sourced
  if (( _cute_rc == 0 )); then
    _cute_add_path
    echo "[cute-setup] PYTHONPATH=$PYTHONPATH"
  fi
  unset -f _cute_setup _cute_install _cute_complete _cute_field _cute_add_path _cute_say _cute_fail
  return "$_cute_rc"
fi
if (( _cute_rc == 0 )); then
  _cute_target=${CUTE_TARGET:-/tmp/site_cute}
  echo "[cute-setup] ready; in your command: export PYTHONPATH=\${PYTHONPATH:+\$PYTHONPATH:}$_cute_target:$_cute_target/nvidia_cutlass_dsl/dsl_packages"
  exit 0
fi
# run as a script right after staging a slice that leaves others missing: that is the call's success
(( _cute_rc == 2 && _cute_staged )) && exit 0
exit "$_cute_rc"
