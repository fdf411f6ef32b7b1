"""The CuTe DSL wheelhouse travels to the lent GPU in slices: `scripts/build_wheelhouse.sh --cute` cuts one
archive into .whl_cute_1 ... .whl_cute_K, and `bash bench/device/run.sh cute_setup`, run in one call per slice,
stages them, names the next one to carry, and installs once all are there. Simulated here with small
wheels of the real layout, a scratch repository and one fresh device copy per call."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "git", "tar", "split", "sha256sum", "python3")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")

CUTLASS = "nvidia_cutlass_dsl/dsl_packages/cutlass"
WHEELS = {  # the files bench/device/cute_setup.sh's layout check looks for, spread over three wheels
    "nvidia_cutlass_dsl_libs_cu13-4.8.1-py3-none-any.whl": [
        f"{CUTLASS}/__init__.py", f"{CUTLASS}/cute/__init__.py", f"{CUTLASS}/_mlir/_mlir_libs/__init__.py",
        f"{CUTLASS}/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so",
        "nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so"],
    "quack_kernels-0.6.5-py3-none-any.whl": ["quack/__init__.py", "quack/softmax.py"],
    "apache_tvm_ffi-0.1.15-py3-none-any.whl": ["tvm_ffi/__init__.py", "torch_c_dlpack_ext/__init__.py"],
}


def write_wheel(path: Path, files: list[str]) -> None:
    name, version = path.name.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for file in files:  # incompressible payload, so that the archive needs several slices
            wheel.writestr(file, os.urandom(40_000))
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


@pytest.fixture
def repo(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, files in WHEELS.items():
        write_wheel(wheels / name, files)
    repo = tmp_path / "repo"
    for script in ("scripts/build_wheelhouse.sh", "bench/device/run.sh", "bench/device/cute_setup.sh"):
        (repo / script).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / script, repo / script)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "scripts", "bench"], cwd=repo, check=True)
    return repo


def build(repo: Path, slice_max: int) -> list[Path]:
    env = {**os.environ, "CUTE_WHEELS_DIR": str(repo.parent / "wheels"), "CUTE_SLICE_MAX_BYTES": str(slice_max)}
    done = subprocess.run(["bash", "scripts/build_wheelhouse.sh", "--cute"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return sorted(repo.glob(".whl_cute_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))


def manifest(folder: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (folder / "MANIFEST").read_text().splitlines())


def device_call(repo: Path, carried: list[Path], command: str = "bash bench/device/run.sh cute_setup"):
    """One call on the warm machine: a fresh copy of the tree with only the carried folders; /tmp is kept."""
    device = repo.parent / "device"
    shutil.rmtree(device, ignore_errors=True)
    shutil.copytree(repo / "scripts", device / "scripts")
    shutil.copytree(repo / "bench", device / "bench")
    for folder in carried:
        shutil.copytree(folder, device / folder.name)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(CUTE_STAGE=str(repo.parent / "stage"), CUTE_TARGET=str(repo.parent / "site"))
    return subprocess.run(["bash", "-c", command], cwd=device, env=env, capture_output=True, text=True, timeout=120)


def test_slices_join_into_the_archive_their_manifests_name(repo):
    slices = build(repo, 50_000)
    assert [s.name for s in slices] == [f".whl_cute_{i}" for i in range(1, len(slices) + 1)] and len(slices) >= 5
    fields = [manifest(s) for s in slices]
    joined = b"".join((s / f"cute.tar.{i}").read_bytes() for i, s in enumerate(slices, 1))
    assert all(len((s / f"cute.tar.{i}").read_bytes()) <= 50_000 for i, s in enumerate(slices, 1))
    assert {f["archive_sha256"] for f in fields} == {hashlib.sha256(joined).hexdigest()}
    assert {f["archive_bytes"] for f in fields} == {str(len(joined))}
    assert [(f["slice_index"], f["slice_count"]) for f in fields] == [(str(i), str(len(slices))) for i in range(1, len(slices) + 1)]
    assert sorted(fields[0]["wheels"].split()) == sorted(WHEELS)
    exclude = subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert "/.whl_cute_*/" in (repo / exclude).read_text().splitlines()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout.count(".whl_cute") == 0


def test_one_call_per_slice_in_any_order_installs_with_the_last(repo):
    slices = build(repo, 120_000)
    count = len(slices)
    assert count >= 3
    first = device_call(repo, [slices[0]])
    assert first.returncode == 0 and "carry .whl_cute_2 next" in first.stdout, first.stdout + first.stderr
    third = device_call(repo, [slices[2]])
    assert "carry .whl_cute_2 next" in third.stdout and "installing" not in third.stdout
    nothing = device_call(repo, [])
    assert nothing.returncode == 2 and "carry .whl_cute_2 next" in nothing.stdout
    for folder in slices[1:2] + slices[3:]:
        last = device_call(repo, [folder])
    assert last.returncode == 0 and "installing 3 wheels" in last.stdout, last.stdout + last.stderr
    site = repo.parent / "site"
    assert (site / "quack" / "softmax.py").is_file() and (site / "nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so").is_file()
    assert (site / ".cute_installed").read_text().strip() == f"{manifest(slices[0])['archive_sha256']}_{count}"
    sourced = device_call(repo, [], 'source bench/device/cute_setup.sh && echo "PATH=$PYTHONPATH"')
    assert sourced.returncode == 0 and "already installed" in sourced.stdout and "installing" not in sourced.stdout
    assert f"\nPATH={site}:{site}/nvidia_cutlass_dsl/dsl_packages\n" in sourced.stdout


def test_a_damaged_slice_is_refused_and_named(repo):
    slices = build(repo, 120_000)
    piece = slices[1] / "cute.tar.2"
    data = bytearray(piece.read_bytes())
    data[100] ^= 0xFF
    piece.write_bytes(bytes(data))
    damaged = device_call(repo, [slices[1]])
    assert damaged.returncode == 3 and "carry .whl_cute_2 again" in damaged.stderr
    assert not (repo.parent / "stage").exists() or not list((repo.parent / "stage").glob("*/cute.tar.2"))


def test_slices_of_different_builds_never_join(repo):
    old = build(repo, 120_000)
    old_second = shutil.copytree(old[1], repo.parent / ".whl_cute_2")  # left on the device by an earlier call
    device_call(repo, [old[0]])
    new = build(repo, 90_000)  # another slice size: another build
    assert len(new) != len(old)
    mixed = device_call(repo, [new[0], old_second])
    assert mixed.returncode == 0 and "slices of different builds are here" in mixed.stdout, mixed.stdout + mixed.stderr
    assert "installing" not in mixed.stdout  # old slices 1 and 2, new slice 1: neither build is complete
    for folder in new[1:]:
        last = device_call(repo, [folder])
    assert "installing 3 wheels" in last.stdout, last.stdout + last.stderr
    assert (repo.parent / "site" / ".cute_installed").read_text().strip().endswith(f"_{len(new)}")
