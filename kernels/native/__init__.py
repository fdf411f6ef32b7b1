"""The native launch module (``softmax_native.cpp`` and the ``.inc`` parts it includes): allocate the
output and issue an (M, N) call's launches in one C call, so that ``softmax(x)`` costs about what
``torch.softmax`` does on the host.
Optional: without it every call takes the Python path, which gives the same result.

- ``build()`` compiles the module for this Python and this torch into a cache directory (about 10-30
  s, a C++ compiler and torch's headers needed); ``python -m kernels.native`` and
  ``autotuner warmup`` do it from a shell.
- ``load()`` returns the built module, or None where it is not built (yet) for this torch, failed to
  load, or ``AUTOTUNER_NATIVE=0`` is set. It never waits for a compiler: where the module is
  not built, its first call starts ``build()`` in a background thread (once per process) and the
  module is used from the first call after that build ends. ``AUTOTUNER_NATIVE=build``
  builds on first use in the calling thread instead.

The module's functions: ``run(x, stream, function, grid_x, block_x, shared_mem, slots, x_slot,
out_slot)`` (``*Build.native(...)`` after x and the stream: one launch of grid (grid_x, 1, 1), every
argument in an 8-byte slot as ``kernels.cuda.packing`` packs it, x and out as 0, patched per call at
the two slots named), ``empty_like(x)``, ``param_sizes(function)``; the plans, which pick and launch
a new shape in one call (``plan_new`` from a table's ``native_index``, ``plan_learn`` a launch
``Build.native`` described with the build's ``NativeRule``, ``plan_run``, ``plan_pick``,
``plan_geometry``, ``plan_stats``), and ``softmax()``'s first step, ``dispatch(x, dim)``, over the
plans routed per device and dtype (``dispatch_setup``, ``dispatch_route``); the source says each one's
contract.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

from kernels.settings import settings

MODULE_NAME = "_softmax_native"
SOURCE = Path(__file__).with_name("softmax_native.cpp")  # one translation unit: it includes the parts
PARTS = sorted(SOURCE.parent.glob("*.inc"))
ENV = "AUTOTUNER_NATIVE"  # "0": never use the module; "build": build it on first use, in the caller
CACHE_ENV = "AUTOTUNER_CACHE_DIR"  # where built modules go (kernels/settings.py)

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # "module" -> the module or None, once load() has decided


class NativeBuildError(RuntimeError):
    """The module could not be compiled; the message has the compiler's command and its output."""


def _torch_build_key() -> str:
    import torch

    sources = [path.read_text() for path in (SOURCE, *PARTS)]
    identity = "\n".join([*sources, torch.__version__, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or ""])
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    return settings.cache_dir / "native"


def module_path() -> Path:
    """Where the module for this source, torch and Python is (or would be) built."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cache_dir() / _torch_build_key() / f"{MODULE_NAME}{suffix}"


def _compiler() -> str:
    for name in (settings.cxx, "g++", "c++", "clang++"):
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
    """The built module, or None (not built for this torch yet, not loadable, or turned off by
    ``ENV``). Where it is not built, starts the background build (see the module's docstring)."""
    try:
        return _loaded["module"]
    except KeyError:
        pass
    with _lock:
        if "module" not in _loaded:
            _loaded["module"] = _load_uncached()
    return _loaded["module"]


_background: list[threading.Thread] = []  # the process's one background build, once started


def _load_uncached() -> Any:
    mode = settings.native
    if mode == "0":
        return None
    try:
        if mode == "build":
            return _import(build())
        path = module_path()
        if path.exists():
            return _import(path)
    except (NativeBuildError, ImportError, OSError) as exc:
        _warn_python_path(exc)
        return None
    if not _background:
        thread = threading.Thread(target=_build_in_background, name="softmax-native-build", daemon=True)
        _background.append(thread)
        thread.start()
    return None


def _warn_python_path(exc: Exception) -> None:
    import warnings

    warnings.warn(f"the native launch module is not used ({exc}); softmax() takes the Python path",
                  RuntimeWarning, stacklevel=4)


def _build_in_background() -> None:
    """``build()``, then forget the load decision so that the next ``load()`` imports the module."""
    try:
        build()
    except (NativeBuildError, ImportError, OSError) as exc:
        _warn_python_path(exc)
        return
    reset()


def wait_for_background_build(timeout: float | None = None) -> None:
    """Wait for a background build this process started, if any (tests, ``warmup``)."""
    for thread in list(_background):
        thread.join(timeout)


def reset() -> None:
    """Forget the load decision (tests, or after ``build()`` in a running process)."""
    with _lock:
        _loaded.clear()


_extra_nulls: dict[tuple[int, tuple[int, ...]], int | None] = {}  # (function, sizes) -> nulls to append


def confirmed_extra_nulls(module: Any, function: int, sizes: tuple[int, ...], trailing_nulls: int,
                          checked: bool) -> int | None:
    """How many null pointer slots to append to a launch of ``function`` whose arguments have the byte
    ``sizes`` (Triton appends up to ``trailing_nulls`` scratch pointers), as the driver's parameter
    sizes (``param_sizes``) confirm; None where they disagree, or where a launch that must be
    ``checked`` cannot be (a driver before CUDA 12.4). Kept per (function, sizes): bounded by the
    compiled kernels."""
    key = (function, sizes)
    try:
        return _extra_nulls[key]
    except KeyError:
        pass
    reported = module.param_sizes(function)
    if reported is None:
        answer = None if checked else 0
    else:
        extra = len(reported) - len(sizes)
        agree = tuple(reported[: len(sizes)]) == sizes and 0 <= extra <= trailing_nulls and all(
            size == 8 for size in reported[len(sizes):])
        answer = extra if agree else None
    _extra_nulls[key] = answer
    return answer
