"""The native launch module (``softmax_native.cpp``): allocate the output and issue a plan's recorded
launches in one C call, so that ``softmax(x)`` on a small shape costs about what ``torch.softmax``
does on the host. Optional: without it every plan takes the Python path, which gives the same result.

- ``build()`` compiles the module for this Python and this torch into a cache directory (about 10-30
  s, a C++ compiler and torch's headers needed); ``python -m kernels.native`` does it from a shell.
- ``load()`` returns the built module, or None where it was not built for this torch, failed to load,
  or ``SOFTMAX_AUTOTUNER_NATIVE=0`` is set. It never compiles: a first ``softmax()`` call must not
  wait for a compiler. ``SOFTMAX_AUTOTUNER_NATIVE=build`` lets it build on first use instead.

The module's functions: ``make_plan(launches)``, ``run(x, stream, plan)``, ``empty_like(x)``,
``param_sizes(function)``; ``kernels.native.launches`` turns recorded launches into ``make_plan``'s
arguments.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

MODULE_NAME = "_softmax_native"
SOURCE = Path(__file__).with_name("softmax_native.cpp")
ENV = "SOFTMAX_AUTOTUNER_NATIVE"  # "0": never use the module; "build": build it on first use
CACHE_ENV = "SOFTMAX_AUTOTUNER_CACHE"  # where built modules go (default ~/.cache/softmax-autotuner)

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # "module" -> the module or None, once load() has decided


class NativeBuildError(RuntimeError):
    """The module could not be compiled; the message has the compiler's command and its output."""


def _torch_build_key() -> str:
    import torch

    identity = "\n".join([SOURCE.read_text(), torch.__version__, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or ""])
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "softmax-autotuner")
    return Path(root) / "native"


def module_path() -> Path:
    """Where the module for this source, torch and Python is (or would be) built."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cache_dir() / _torch_build_key() / f"{MODULE_NAME}{suffix}"


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    raise NativeBuildError("no C++ compiler found (tried $CXX, g++, c++, clang++)")


def compile_command(output: Path) -> list[str]:
    """The compiler call that builds the module into ``output``."""
    import torch
    from torch.utils.cpp_extension import include_paths, library_paths

    libraries = library_paths()
    return [
        _compiler(), "-O2", "-shared", "-fPIC", "-std=c++20", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(f"-I{path}" for path in include_paths()), f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE), "-o", str(output),
        *(f"-L{path}" for path in libraries), *(f"-Wl,-rpath,{path}" for path in libraries),
        "-lc10", "-ltorch_cpu", "-ltorch_python", "-ldl",
    ]


def build(force: bool = False) -> Path:
    """Compile the module (unless built already for this source, torch and Python); its path.
    Raises NativeBuildError with the compiler's output where it fails."""
    target = module_path()
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        partial = Path(scratch) / target.name
        try:
            command = compile_command(partial)
        except ImportError as exc:
            raise NativeBuildError(f"torch's C++ extension support is not importable: {exc}") from exc
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise NativeBuildError(f"{' '.join(command)}\nfailed with exit code {result.returncode}:\n"
                                   f"{result.stderr[-4000:]}")
        os.replace(partial, target)  # atomic: a concurrent load never sees half a file
    return target


def _import(path: Path) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load() -> Any:
    """The built module, or None (not built for this torch, not loadable, or turned off by ``ENV``)."""
    try:
        return _loaded["module"]
    except KeyError:
        pass
    with _lock:
        if "module" not in _loaded:
            _loaded["module"] = _load_uncached()
    return _loaded["module"]


def _load_uncached() -> Any:
    import warnings

    mode = os.environ.get(ENV, "1")
    if mode == "0":
        return None
    try:
        path = build() if mode == "build" else module_path()
        return _import(path) if path.exists() else None
    except (NativeBuildError, ImportError, OSError) as exc:
        warnings.warn(f"the native launch module is not used ({exc}); softmax() takes the Python path",
                      RuntimeWarning, stacklevel=3)
        return None


def reset() -> None:
    """Forget the load decision (tests, or after ``build()`` in a running process)."""
    with _lock:
        _loaded.clear()


class NativeLaunch(tuple):
    """One launch as ``make_plan`` takes it: (function, grid, block, shared_mem, slots, x_slots,
    out_slots), where ``slots`` holds every argument in an 8-byte slot as ``kernels.cuda.packing``
    packs a parameter of its kind (x and out as 0, patched per call). ``sizes`` is each argument's
    size by its kind; ``trailing_nulls`` the most null pointers the kernel may take after them
    (Triton's scratch arguments), filled in by ``plan_launches``; ``checked`` says whether the layout
    must be confirmed by the driver (``param_sizes``) before a launch."""

    sizes: tuple[int, ...]
    trailing_nulls: int
    checked: bool

    def __new__(cls, function: int, grid: tuple, block: tuple, shared_mem: int, kinds: str, values: Sequence[Any],
                x_slots: Sequence[int], out_slots: Sequence[int], trailing_nulls: int = 0, checked: bool = False):
        from kernels.cuda.packing import KIND_SIZES, slot_format

        slots = struct.pack(slot_format(kinds), *values)
        self = super().__new__(cls, (function, tuple(grid), tuple(block), shared_mem, slots, tuple(x_slots),
                                     tuple(out_slots)))
        self.sizes, self.trailing_nulls, self.checked = tuple(KIND_SIZES[kind] for kind in kinds), trailing_nulls, checked
        return self


def plan_launches(module: Any, launches: list[NativeLaunch]) -> Any:
    """``module.make_plan`` over ``launches`` once each layout agrees with the driver's parameter
    sizes (missing trailing null pointers appended); None where one does not, or where a launch that
    must be confirmed cannot be (a driver before CUDA 12.4)."""
    ready = []
    for launch in launches:
        reported = module.param_sizes(launch[0])
        if reported is None:
            if launch.checked:
                return None
            ready.append(launch)
            continue
        extra = len(reported) - len(launch.sizes)
        if tuple(reported[: len(launch.sizes)]) != launch.sizes or not 0 <= extra <= launch.trailing_nulls \
                or any(size != 8 for size in reported[len(launch.sizes):]):
            return None
        ready.append((*launch[:4], launch[4] + bytes(8 * extra), *launch[5:]))
    return module.make_plan(ready)
