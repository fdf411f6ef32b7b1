#!/usr/bin/env bash
# shellcheck shell=bash
# On the lent GPU machine, in the repo root: install the CuTe DSL (nvidia-cutlass-dsl 4.8.1, cu13) and
# QuACK from the two halves built here by `scripts/build_wheelhouse.sh --cute`, and put them on PYTHONPATH.
#
# The big wheel (-libs-cu13) does not fit one call, so it travels in two consecutive calls on the same
# warm machine; /tmp/cute_parts keeps part a between them, /tmp/site_cute keeps the install after.
#   call 1 (carry [".whl_cute_a"]):
#     bash scripts/device_cute_setup.sh
#   call 2 (carry [".whl_cute_b"] alone: with .whl and the tree it would pass the 64 MiB carry limit):
#     bash scripts/device_cute_setup.sh
#   later calls on the same warm machine (carry [".whl"]): sourced inside device_run.sh, it finds the
#   install and only sets PYTHONPATH:
#     bash scripts/device_run.sh bash -c 'source scripts/device_cute_setup.sh && python3 -c "import cutlass, quack"'
#   A fresh machine needs both calls again.
#
# Sourced, it exports PYTHONPATH (appends /tmp/site_cute and /tmp/site_cute/nvidia_cutlass_dsl/dsl_packages:
# pip --target does not process the wheel's nvidia_cutlass_dsl_packages.pth) and returns 0 only when
# the install is ready. Run as a script it prints that export line; it also exits 0 when it has just
# staged part a (the install then waits for part b). Non-zero: 2 parts missing or from different
# builds, 3 a checksum, install or layout check failed. CUTE_FORCE=1 reinstalls from the staged parts.

_cute_setup() {
  local root stage=/tmp/cute_parts target=/tmp/site_cute
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local a="$root/.whl_cute_a" b="$root/.whl_cute_b"
  local part_a="libs-cu13.part-aa" part_b="libs-cu13.part-ab"
  local marker="$target/.cute_installed"
  _cute_staged_a=0

  _cute_say() { echo "[cute-setup] $*"; }
  _cute_fail() { local rc=$1; shift; echo "[cute-setup] ERROR: $*" >&2; return "$rc"; }

  mkdir -p "$stage"
  # 1. part a: small wheels + first piece + manifest, kept in /tmp while the machine stays warm
  if [[ -d "$a" ]]; then
    [[ -f "$a/SHA256SUMS" && -f "$a/$part_a" ]] || { _cute_fail 2 "$a lacks SHA256SUMS or $part_a (rebuild with build_wheelhouse.sh --cute)"; return; }
    if [[ -f "$stage/SHA256SUMS" ]] && ! cmp -s "$a/SHA256SUMS" "$stage/SHA256SUMS"; then
      _cute_say "part a is from a new build: clearing the old staged parts"
      rm -f "$stage"/*
    fi
    cp -f "$a"/* "$stage"/
    (cd "$stage" && grep -E "  (.*\.whl|$part_a)\$" SHA256SUMS | grep -v "  nvidia_cutlass_dsl_libs_cu13-" \
      | sha256sum -c --quiet -) || { _cute_fail 3 "part a checksum mismatch in $stage"; return; }
    _cute_staged_a=1
    _cute_say "part a staged in $stage ($(du -sh "$stage" | cut -f1))"
  fi

  # 2. part b: needs the matching part a staged (same manifest)
  if [[ -d "$b" ]]; then
    [[ -f "$b/SHA256SUMS" && -f "$b/$part_b" ]] || { _cute_fail 2 "$b lacks SHA256SUMS or $part_b"; return; }
    [[ -f "$stage/SHA256SUMS" && -f "$stage/$part_a" ]] || {
      _cute_fail 2 "part b is here but part a is not staged in $stage: carry .whl_cute_a first (same warm machine)"; return; }
    cmp -s "$b/SHA256SUMS" "$stage/SHA256SUMS" || {
      _cute_fail 2 "part b and the staged part a come from different builds: carry both from one build_wheelhouse.sh --cute"; return; }
    cp -f "$b/$part_b" "$stage/"
  fi

  # 3. install once both pieces are there (skip if this build is already installed)
  local big want
  if [[ -f "$stage/SHA256SUMS" ]]; then
    big=$(awk '$2 ~ /^nvidia_cutlass_dsl_libs_cu13-.*\.whl$/ {print $2}' "$stage/SHA256SUMS")
    want=$(awk -v n="$big" '$2 == n {print $1}' "$stage/SHA256SUMS")
  fi
  if [[ -f "$marker" && -z "${CUTE_FORCE:-}" ]] && { [[ -z "${want:-}" ]] || [[ "$(cat "$marker")" == "$want" ]]; }; then
    _cute_say "already installed in $target ($(cat "$marker" | cut -c1-12))"
  elif [[ -f "$stage/SHA256SUMS" && -f "$stage/$part_a" && -f "$stage/$part_b" ]]; then
    (cd "$stage" && grep -E "  $part_b\$" SHA256SUMS | sha256sum -c --quiet -) || { _cute_fail 3 "part b checksum mismatch"; return; }
    _cute_say "joining $part_a + $part_b -> $big"
    cat "$stage/$part_a" "$stage/$part_b" > "$stage/$big"
    (cd "$stage" && grep -E "  $big\$" SHA256SUMS | sha256sum -c --quiet -) || {
      rm -f "$stage/$big"; _cute_fail 3 "joined $big does not match its sha256"; return; }
    _cute_say "installing $(ls "$stage"/*.whl | wc -l) wheels into $target"
    rm -rf "$target.tmp"
    # one pip run for all of them: the cutlass wheels share nvidia_cutlass_dsl/, which pip merges
    # only within one run (a second --target run would skip or replace the existing folder)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
      --target "$target.tmp" "$stage"/*.whl > "$stage/pip.log" 2>&1 || {
      cat "$stage/pip.log" >&2; _cute_fail 3 "pip install failed"; return; }
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
    echo "$want" > "$marker"
    rm -f "$stage/$big"
    _cute_say "installed: $(cd "$target" && ls -d *.dist-info | sed 's/\.dist-info//' | tr '\n' ' ')"
    python3 - <<'EOF' || true
import importlib.metadata as m
for name in ("cuda-bindings", "typing_extensions", "protobuf", "einops", "torch"):
    try:
        print(f"[cute-setup] image has {name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"[cute-setup] WARNING: image lacks {name}: carry its wheel")
EOF
  elif (( _cute_staged_a )); then
    _cute_say "NOT READY: part a staged; run the next call on this warm machine with .whl_cute_b carried"
    return 2
  else
    local have=""
    [[ -f "$stage/$part_a" ]] && have+=" part-a"
    [[ -f "$stage/$part_b" ]] && have+=" part-b"
    _cute_fail 2 "CuTe DSL not installed in $target and parts missing (staged:${have:- none}). Build here with" \
      "'bash scripts/build_wheelhouse.sh --cute', then carry .whl_cute_a in one call and .whl_cute_b in the next"
    return
  fi
  return 0
}

_cute_add_path() {
  local p
  for p in /tmp/site_cute /tmp/site_cute/nvidia_cutlass_dsl/dsl_packages; do
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
  unset -f _cute_setup _cute_add_path _cute_say _cute_fail
  return "$_cute_rc"
fi
if (( _cute_rc == 0 )); then
  echo "[cute-setup] ready; in your command: export PYTHONPATH=\${PYTHONPATH:+\$PYTHONPATH:}/tmp/site_cute:/tmp/site_cute/nvidia_cutlass_dsl/dsl_packages"
  exit 0
fi
# run as a script right after staging part a: that is call 1's success
(( _cute_rc == 2 && _cute_staged_a )) && exit 0
exit "$_cute_rc"
