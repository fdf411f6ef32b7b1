"""GPU detection and model-name normalisation.

Keys are short, lower-case model names: ``NVIDIA H100 80GB HBM3`` → ``h100``, ``NVIDIA A100-SXM4-80GB``
→ ``a100``, ``NVIDIA H200`` → ``h200``, ``NVIDIA H100 PCIe`` → ``h100-pcie`` (a different memory system
from the SXM part, so a table of its own). A name is read as a model only when the model is its first
word after the vendor's and every other word is a known qualifier (memory size, HBM generation, form
factor, ``Ada Generation``...): ``NVIDIA H100-fake-x``, ``my h100`` or an H100 MIG slice (a fraction of
its bandwidth) keep the whole name as their key (``h100-fake-x``) and never answer as the H100.
Importing this module imports no GPU library; detection uses torch when the caller already has it,
else the CUDA driver through ctypes.
"""
from __future__ import annotations

import functools
import re
import sys
from collections import namedtuple

# Patterns as text, compiled by ``re`` on first use and kept in its cache: a lookup given a table key
# (``h100``) never compiles them (four compiles cost a fresh process's first lookup about 2 ms).
_VENDOR_WORDS = r"\b(nvidia|tesla|geforce|quadro)\b"
_MODEL = r"^((?:gh|gb|rtx|gtx)?\s?[a-z]{0,2}\d{2,4}[a-z]{0,2})\b"
# Words of real device names that do not change the model (what changes the memory system, PCIe and
# NVL, is added to the key below): "80GB", "HBM3", "HBM3e", "SXM5", "Ada Generation", "Tensor Core".
_QUALIFIER = r"^(\d{1,4}gb|hbm\d?e?|sxm\d?|pcie|nvl|ada|generation|tensor|core|gpu)$"
_KEY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_KEY_LENGTH = 32


def _is_key(text: str) -> bool:
    """Whether ``text`` is a table key as written: ``[a-z0-9][a-z0-9-]{0,31}``."""
    return 0 < len(text) <= _KEY_LENGTH and text[0] != "-" and _KEY_CHARACTERS.issuperset(text)


class GpuMismatchError(RuntimeError):
    """The GPU asked for is not the GPU found."""


class NoGpuError(RuntimeError):
    """No CUDA GPU could be found."""


class GpuInfo(namedtuple("GpuInfo", "key name sm_count l2_bytes memory_bytes compute_capability",
                         defaults=(None, None, None, None))):
    """The GPU a sweep runs on, as the driver reports it: its table key, device name, and where known
    its SM count, L2 and memory (bytes) and compute capability ("9.0"). A named tuple: the embedded
    lookup imports this module, and ``dataclasses`` costs a first lookup about 12 ms of imports."""

    __slots__ = ()


def normalize_gpu_name(name: str) -> str:
    """A table key from a device name as the driver reports it (examples in the module docstring)."""
    cleaned = re.sub(_VENDOR_WORDS, " ", name, flags=re.IGNORECASE).strip()
    match = re.search(_MODEL, cleaned, re.IGNORECASE)
    rest = re.split(r"[\s_/()-]+", cleaned[match.end():]) if match else []
    if not match or not all(re.match(_QUALIFIER, word, re.IGNORECASE) for word in rest if word):
        key = re.sub(r"[^a-z0-9]+", "-", cleaned.lower()).strip("-")
        return key[:_KEY_LENGTH] or "unknown"
    key = match.group(1).replace(" ", "").lower()
    lowered = cleaned.lower()
    if "pcie" in lowered:
        key += "-pcie"
    elif re.search(r"\bnvl\b", lowered):
        key += "-nvl"
    return key


def validate_gpu_key(key: str) -> str:
    """Accept a user-given key (``h100``) or device name (``NVIDIA H100 80GB HBM3``)."""
    candidate = key.strip()
    if not candidate:
        raise ValueError("GPU key is empty; give a model such as h100, h200, a100, or 'auto'")
    lowered = candidate.lower()
    if _is_key(lowered):
        return lowered
    return normalize_gpu_name(candidate)


def detect_gpu(device_index: int = 0) -> GpuInfo:
    """Details of a CUDA device through torch (used by the sweep, which has torch anyway)."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() <= device_index:
        raise NoGpuError(f"no CUDA device {device_index} visible to torch (devices: {torch.cuda.device_count()})")
    props = torch.cuda.get_device_properties(device_index)
    return GpuInfo(
        key=normalize_gpu_name(props.name),
        name=props.name,
        sm_count=props.multi_processor_count,
        l2_bytes=getattr(props, "L2_cache_size", None),
        memory_bytes=props.total_memory,
        compute_capability=f"{props.major}.{props.minor}",
    )


def resolve_gpu(requested: str | None, device_index: int = 0) -> GpuInfo:
    """The GPU to sweep: ``auto``/None detects; a named model must match the one found."""
    found = detect_gpu(device_index)
    if requested is None or requested.strip().lower() == "auto":
        return found
    wanted = validate_gpu_key(requested)
    if wanted != found.key:
        raise GpuMismatchError(
            f"--gpu {requested} asked for '{wanted}', but device {device_index} is "
            f"'{found.name}' (key '{found.key}'); use --gpu {found.key} or --gpu auto"
        )
    return found


@functools.lru_cache(maxsize=1)
def current_gpu_key() -> str | None:
    """Key of the current device without importing a GPU library when none is loaded; None if no GPU."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return normalize_gpu_name(torch.cuda.get_device_name(torch.cuda.current_device()))
        except Exception:  # a broken CUDA set-up reads as "no GPU" here; callers fall back
            return None
    name = _driver_device_name()
    return normalize_gpu_name(name) if name else None


def _driver_device_name() -> str | None:
    import ctypes  # here: only a lookup without a GPU name asks the driver

    for library in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cuda = ctypes.CDLL(library)
        except OSError:
            continue
        device = ctypes.c_int()
        buffer = ctypes.create_string_buffer(256)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        if cuda.cuDeviceGetName(buffer, 256, device) != 0:
            return None
        return buffer.value.decode(errors="replace")
    return None
