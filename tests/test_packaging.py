"""What a packager and a light install expect: a LICENSE, ``py.typed``, ``__version__`` from the
metadata, a wheel that builds without warnings, and a base install (no torch, Triton or NumPy) that
answers ``select_kernel`` and serves ``/dispatch``."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import zipfile
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

import autotuner
from autotuner._version import UNKNOWN

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "autotuner", "db", "service")
GPU_ONLY = ("torch", "triton", "cupy", "matplotlib")
# NumPy is a base dependency: the service's upload check sorts its rows' keys with it.

# Put on PYTHONPATH, this makes ``import torch`` (and the other GPU-side packages) fail in the child
# as on a host where they were never installed.
BLOCKER = f"""
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {GPU_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: a light install)")
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_is_the_full_apache_text_and_declared():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS AND CONDITIONS" in text
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]


def test_every_package_is_marked_typed():
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file(), package
        assert "py.typed" in package_data[package], package


def test_version_comes_from_the_metadata():
    try:
        expected = metadata.version("softmax-autotuner")
    except metadata.PackageNotFoundError:
        expected = UNKNOWN
    assert autotuner.__version__ == expected
    with pytest.raises(AttributeError):
        autotuner.no_such_attribute  # noqa: B018 - the module's __getattr__ still raises for others


def test_gpu_packages_are_extras_and_matplotlib_is_in_bench():
    project = _pyproject()["project"]
    base = " ".join(project["dependencies"])
    assert not any(name in base for name in GPU_ONLY), base
    extras = project["optional-dependencies"]
    assert {"torch>=2.4", "triton>=3.0"} <= set(extras["kernels"])
    assert any(d.startswith("numpy") for d in project["dependencies"])  # the upload check needs it
    assert any(d.startswith("matplotlib") for d in extras["bench"])
    for stack in ("cuda12", "cuda13", "bench"):  # a GPU host's install brings the kernels along
        assert "softmax-autotuner[kernels]" in extras[stack]


def _light_child(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}", "AUTOTUNER_DB": f"sqlite:///{tmp_path / 'light.sqlite'}"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)


def test_a_light_install_answers_select_kernel_and_serves_dispatch(tmp_path):
    """select_kernel, autotuner select, /dispatch (GET and HEAD) and /kernels with torch and Triton not
    importable, and neither imported."""
    code = """
import json, sys
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("the blocker did not block torch")
from autotuner import select_kernel
choice = select_kernel(4096, 4096, "bf16", gpu="h100")
from fastapi.testclient import TestClient
from service.app import create_app
from service.config import Settings
with TestClient(create_app(Settings())) as client:
    dispatch = client.get("/dispatch", params={"m": 4096, "n": 4096, "dtype": "bf16", "gpu": "h100"})
    head = client.head("/dispatch", params={"m": 4096, "n": 4096, "dtype": "bf16", "gpu": "h100"})
    kernels = client.get("/kernels")
from typer.testing import CliRunner
from autotuner.cli import app
selected = json.loads(CliRunner().invoke(app, ["select", "4096", "4096", "bf16", "--gpu", "h100"]).stdout)
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "triton"))
print(json.dumps({"choice": choice.as_dict(), "dispatch": [dispatch.status_code, dispatch.json()], "cli": selected,
                  "head": [head.status_code, head.text], "kernels": kernels.status_code, "loaded": loaded}))
"""
    child = _light_child(code, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    answer = json.loads(child.stdout.strip().splitlines()[-1])
    assert answer["choice"]["source"] == "table" and answer["choice"]["variant"] != "torch_softmax"
    status, body = answer["dispatch"]
    assert status == 200 and body["variant"] == answer["choice"]["variant"] == answer["cli"]["variant"]
    assert answer["head"] == [200, ""] and answer["kernels"] == 200 and answer["loaded"] == []


def test_a_light_install_accepts_an_upload(tmp_path):
    """POST /runs on a light install: the upload process checks and writes a recorded H100 run (its
    first 300 rows) with torch and Triton not importable."""
    code = f"""
import gzip, json
document = json.load(gzip.open({str(ROOT / "tests" / "data" / "h100_sweep.json.gz")!r}))
run = document["runs"][0]
run["measurements"] = run["measurements"][:300]
document["runs"] = [run]
from fastapi.testclient import TestClient
from service.app import create_app
from service.config import Settings
token = "light-install-upload-token-42"
with TestClient(create_app(Settings(upload_token=token, reload_interval_s=0))) as client:
    response = client.post("/runs", json=document, headers={{"Authorization": f"Bearer {{token}}"}})
print(json.dumps([response.status_code, response.json()]))
"""
    child = _light_child(code, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    status, body = json.loads(child.stdout.strip().splitlines()[-1])
    assert status == 201, body
    assert body["measurements"] == 300 and body["runs_created"] == 1


def test_a_light_install_lists_the_kernels_as_unavailable_with_the_reason(tmp_path):
    code = """
from typer.testing import CliRunner
from autotuner.cli import app
result = CliRunner().invoke(app, ["kernels", "--json"])
print(result.exit_code)
print(result.stdout)
"""
    child = _light_child(code, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    code_line, _, document = child.stdout.partition("\n")
    listed = json.loads(document)
    assert code_line == "0" and len(listed) >= 19
    assert not any(entry["available"] for entry in listed)
    reasons = " ".join(entry["reason"] for entry in listed)
    assert "torch" in reasons and "triton" in reasons


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the source tree's files")
def test_the_wheel_builds_without_warnings_and_carries_license_and_markers(tmp_path):
    """Built from a copy of the tree's files (tracked and new, not ignored) without build isolation:
    the wheel holds LICENSE, every py.typed and the sources the native module is built from (an
    install builds it from them), and the build prints no warning."""
    setuptools = pytest.importorskip("setuptools", reason="the build runs without isolation: needs setuptools here")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} here; the build needs >= 77 (pyproject's build-system)")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    source = tmp_path / "src"
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    warnings = [line for line in (build.stdout + build.stderr).splitlines() if "warn" in line.lower()]
    assert warnings == []
    wheel = next((tmp_path / "wheel").glob("softmax_autotuner-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
    from kernels import native

    for path in (native.SOURCE, *native.PARTS):
        assert path.relative_to(ROOT).as_posix() in names
    requires = [line for line in zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
                .decode().splitlines() if line.startswith("Requires-Dist:")]
    unconditional = [line for line in requires if "extra ==" not in line]
    assert unconditional and not any(name in line for line in unconditional for name in GPU_ONLY)
