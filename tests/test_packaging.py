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
from kernels.registry import registered_names

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
                  "head": [head.status_code, head.text], "kernels": [kernels.status_code, kernels.json()], "loaded": loaded}))
"""
    child = _light_child(code, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    answer = json.loads(child.stdout.strip().splitlines()[-1])
    assert answer["choice"]["source"] == "table" and answer["choice"]["variant"] != "torch_softmax"
    status, body = answer["dispatch"]
    assert status == 200 and body["variant"] == answer["choice"]["variant"] == answer["cli"]["variant"]
    assert answer["head"] == [200, ""] and answer["kernels"][0] == 200 and answer["loaded"] == []
    # the names /kernels lists are the names /dispatch answers, Triton installed or not
    listed = {entry["name"]: entry for entry in answer["kernels"][1]}
    assert body["variant"] in listed and listed["triton_one_row"]["backend"] == "triton"
    assert list(listed) == list(registered_names())


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
    assert [entry["name"] for entry in listed] == list(registered_names())  # never a class name
    backends = {entry["name"]: entry["backend"] for entry in listed}
    assert backends["triton_one_row"] == "triton" and backends["torch_softmax"] == "torch" and "unknown" not in backends.values()


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel built from a copy of the tree's files (tracked and new, not ignored) without build
    isolation, and what the build printed."""
    if shutil.which("git") is None:
        pytest.skip("needs git to list the source tree's files")
    setuptools = pytest.importorskip("setuptools", reason="the build runs without isolation: needs setuptools here")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} here; the build needs >= 77 (pyproject's build-system)")
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    return next((tmp_path / "wheel").glob("softmax_autotuner-*.whl")), build.stdout + build.stderr


@pytest.mark.slow
def test_the_wheel_builds_without_warnings_and_carries_license_and_markers(built_wheel):
    """The wheel holds LICENSE, every py.typed, the sources the native module is built from (an install
    builds it from them) and its classifiers, and the build prints no warning."""
    wheel, printed = built_wheel
    warnings = [line for line in printed.splitlines() if "warn" in line.lower()]
    assert warnings == []
    names = zipfile.ZipFile(wheel).namelist()
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
    from kernels import native

    for path in (native.SOURCE, *native.PARTS):
        assert path.relative_to(ROOT).as_posix() in names
    fields = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode().splitlines()
    assert {"Classifier: Typing :: Typed", "Classifier: Environment :: GPU :: NVIDIA CUDA"} <= set(fields)
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == set(PACKAGES)
    requires = [line for line in fields if line.startswith("Requires-Dist:")]
    unconditional = [line for line in requires if "extra ==" not in line]
    assert unconditional and not any(name in line for line in unconditional for name in GPU_ONLY)


# Hugging Face's kernel hub installs a top-level `kernels` package too (the `kernels` distribution, which
# transformers loads): a stand-in of its layout (its 0.19 wheel: kernels/__init__.py, kernels/_internals/).
HUB_FILES = {"kernels/__init__.py": "HUB = True\n", "kernels/_internals/__init__.py": ""}


def _hub_wheel(folder: Path) -> Path:
    wheel = folder / "kernels-0.19.1-py3-none-any.whl"
    info = "kernels-0.19.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in HUB_FILES.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: kernels\nVersion: 0.19.1\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*HUB_FILES, f"{info}/METADATA",
                                                                              f"{info}/WHEEL", f"{info}/RECORD"]))
    return wheel


def _environment(tmp_path: Path, *wheels: Path) -> Path:
    """A fresh virtual environment (no pip, no dependencies) with ``wheels`` installed in that order;
    its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    for wheel in wheels:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                        "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    return python


def _run(python: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTOTUNER_DB")}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**env, "XDG_DATA_HOME": str(tmp_path / "data")})


@pytest.mark.slow
def test_our_wheel_alone_answers_select_kernel(built_wheel, tmp_path):
    python = _environment(tmp_path, built_wheel[0])
    child = _run(python, "from autotuner import select_kernel; print(select_kernel(4096, 32000, 'bf16', gpu='h100').source)", tmp_path)
    assert child.returncode == 0 and child.stdout.strip() == "table", child.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["hub first", "ours first"])
def test_a_folder_shared_with_the_kernel_hub_is_refused_at_import(built_wheel, tmp_path, order):
    """pip installs a wheel without running its code, so installing both into one environment cannot be
    refused there: whichever `kernels/__init__.py` won, importing our packages names the clash and the
    fix. With ours first, the hub's own `import kernels` still works (its files are whole)."""
    hub = _hub_wheel(tmp_path)
    python = _environment(tmp_path, *((hub, built_wheel[0]) if order == "hub first" else (built_wheel[0], hub)))
    ours = _run(python, "from autotuner import select_kernel", tmp_path)
    assert ours.returncode != 0 and "ImportError" in ours.stderr
    assert "Hugging Face" in ours.stderr and "environment of its own" in ours.stderr, ours.stderr[-2000:]
    theirs = _run(python, "import kernels; print(kernels.HUB)", tmp_path)
    if order == "ours first":
        assert theirs.returncode == 0 and theirs.stdout.strip() == "True", theirs.stderr[-2000:]
    else:
        assert theirs.returncode != 0 and "Hugging Face" in theirs.stderr


def test_an_install_from_the_tree_is_refused_beside_the_kernel_hub(tmp_path):
    """scripts/build_backend.py (the tree's build backend: `pip install .`, `pip install -e .`) checks the
    environment it installs into, under that environment's own interpreter: refused, naming the hub,
    where the hub's `kernels` is installed; allowed where it is not."""
    setuptools = pytest.importorskip("setuptools")
    check = (f"import sys; sys.path[:0] = [{str(ROOT / 'scripts')!r}]; sys.path.append({str(Path(setuptools.__file__).parents[1])!r})\n"
             "import build_backend; build_backend.check_environment(); print('allowed')")
    clean = _environment(tmp_path / "clean")
    allowed = _run(clean, check, tmp_path)
    assert allowed.returncode == 0 and allowed.stdout.strip() == "allowed", allowed.stderr[-2000:]
    shared = _environment(tmp_path / "shared", _hub_wheel(tmp_path))
    refused = _run(shared, check, tmp_path)
    assert refused.returncode == 1 and "softmax-autotuner not installed" in refused.stderr, refused.stderr[-2000:]
    assert "`kernels` from kernels 0.19.1 (Hugging Face's kernel hub" in refused.stderr
    assert str(tmp_path / "shared" / "venv") in refused.stderr and "environment of its own" in refused.stderr
