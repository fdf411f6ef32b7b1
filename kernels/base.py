"""The contract every softmax variant honours.

A *variant* is one algorithm (warp-per-row, split-row, Triton tiled, ...). A *config* is one set of
launch parameters of that variant (block size, elements per thread, num_warps, ...). A *build* is a
variant compiled for one (config, dtype), a kernel instance: the thing that launches any shape the
config admits, plus the resources the compiler and the driver report for it.

Contracts, for every variant:
- input ``x`` is a 2-D CUDA tensor (M, N) of the declared dtype, contiguous in its last dimension; the
  caller (autotuner) makes it so. ``out`` has the same shape and dtype and is contiguous.
- softmax is taken over the last dimension, accumulated in fp32, written in the input dtype.
- M = 0 writes nothing; N = 1 gives 1.0 (or NaN where the input is NaN / +inf, as torch does).
- ``launch`` enqueues on torch's current CUDA stream and never synchronises, never allocates per call
  (workspaces are allocated once by ``build`` or grown and cached by the variant).
- ``supports`` is cheap and never compiles: it is how the sweep skips candidates before building.
- ``min_arch`` (compute capability x 10) is the oldest architecture the variant runs on, and
  ``requirements`` states it with the config's shared-memory and cluster needs as plain data, so
  that a dispatch table offers a kernel only to GPUs that can run it (``autotuner/lookup/gpu_models.py``);
  a config that spills registers on newer architectures also states the newest it is offered to
  (``max_arch``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, NamedTuple

from kernels import source_hash as _source_hashes
from kernels.dtypes import DTYPE_ALIASES, DTYPE_BYTES, DTYPES, normalize_dtype  # noqa: F401 - re-exported
from kernels.source_hash import hash_files, hash_text, pinned_hash  # noqa: F401 - hash_* re-exported


# The oldest compute capability (x 10) each backend's variants run on, unless a variant says
# otherwise (``Variant.min_arch``). CUDA: every variant's instances compile with nvcc for sm_80
# (tests/kernels/test_cuda_compile.py), and bf16 arithmetic and cp.async need sm_80. Triton: sm_80
# is the oldest its releases support. CuTe DSL and QuACK: measured on Hopper only, and QuACK uses
# clusters. torch.softmax: every architecture torch's CUDA wheels are built for (sm_50 up).
MIN_ARCH_BY_BACKEND: Mapping[str, int] = {"torch": 50, "cuda": 80, "triton": 80, "cute": 90, "external": 90}
DEFAULT_MIN_ARCH = 90  # a backend not listed above: the architecture everything was measured on


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration: an ordered, hashable set of named integer/string parameters.

    ``key`` (``"block=256,vec=4"``) is stable and is what the database stores; ``from_key`` parses it.
    """

    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, **params: Any) -> "KernelConfig":
        return cls(tuple(params.items()))

    @classmethod
    def from_dict(cls, params: Mapping[str, Any]) -> "KernelConfig":
        return cls(tuple(params.items()))

    @classmethod
    def from_key(cls, key: str) -> "KernelConfig":
        if not key:
            return cls()
        items = []
        for part in key.split(","):
            name, _, value = part.partition("=")
            items.append((name, int(value) if value.lstrip("-").isdigit() else value))
        return cls(tuple(items))

    def __getitem__(self, name: str) -> Any:
        # a dict of the params, made on first use: launch geometry reads a config on every call
        try:
            return self.__dict__["_by_name"][name]
        except KeyError:
            if "_by_name" in self.__dict__:
                raise
        object.__setattr__(self, "_by_name", dict(self.params))
        return self.__dict__["_by_name"][name]

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.params)

    def __str__(self) -> str:
        return self.key or "default"


@dataclass(frozen=True)
class Support:
    """Whether a variant (or one of its configs) can run a shape; ``reason`` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


SUPPORTED = Support(True)


def unsupported(reason: str) -> Support:
    return Support(False, reason)


def torch_cuda_support() -> Support:
    """Whether torch imports and sees a CUDA device: the availability rule most variants share."""
    try:
        import torch
    except ImportError as exc:
        return unsupported(f"torch not importable: {exc}")
    if not torch.cuda.is_available():
        return unsupported("torch sees no CUDA device")
    return SUPPORTED


@dataclass(frozen=True)
class Resources:
    """What the compiler and the driver report for one build. ``None`` where not applicable
    (torch.softmax has no registers we can read)."""

    registers: int | None = None
    spill_bytes: int | None = None  # local memory per thread (CuPy local_size_bytes, Triton n_spills*4)
    static_smem: int | None = None
    dynamic_smem: int | None = None
    threads_per_block: int | None = None
    blocks_per_sm: int | None = None  # cuOccupancyMaxActiveBlocksPerMultiprocessor
    occupancy: float | None = None  # active warps / max warps per SM, 0..1
    compile_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# ``Build.native(device, stream, m, n)``: the launch of an (m, n) call on ``device`` (current) and
# ``stream`` as the native launch module's ``run`` takes it after x and the stream (``kernels.native``:
# function, grid x, block x, shared memory, slots, x slot, out slot), or None where the call must go
# through ``launch``.
NativeGeometry = Callable[[int, int, int, int], "tuple | None"]


class LaunchGeometry(NamedTuple):
    """Grid x and dynamic shared memory of a kernel's one-dimensional launch over (M, N) rows, m, n >= 1,
    as data, so that the native module's plans (``kernels/native``) derive the same numbers in C:

    - grid x = ceil(M / ``rows``) * ``per_row``, at most ``cap`` (0: no cap) and, where
      ``resident_block`` is set, at most the blocks of that many threads the current device holds at
      once, as ``residency(resident_block)`` tells (the backend's; ``kernels.cuda.common.resident_blocks``);
    - shared memory = max(0, ceil((N // ``vec``) / ``parts``) - ``held``) 16-byte vectors (``vec`` 0: none).

    Called as ``geometry(m, n) -> (grid x, shared memory)``; a test holds the C reading to this one."""

    rows: int = 1
    per_row: int = 1
    cap: int = 0
    resident_block: int = 0
    vec: int = 0
    parts: int = 1
    held: int = 0
    residency: Callable[[int], int] | None = None

    def __call__(self, m: int, n: int) -> tuple[int, int]:
        grid = -(-m // self.rows) * self.per_row
        if self.cap and grid > self.cap:
            grid = self.cap
        if self.resident_block and grid > 1:  # the current device's; a build serves every device
            grid = min(grid, self.residency(self.resident_block))
        if not self.vec:
            return grid, 0
        past_registers = -(-(n // self.vec) // self.parts) - self.held
        return grid, past_registers * 16 if past_registers > 0 else 0


class RowSplit(NamedTuple):
    """S blocks per row of a kernel whose blocks of a row meet in a workspace within one launch
    (``kernels/cuda/long_split.cu``), as data, so that the native plans derive the same S in C:
    enough blocks that none takes more than ``chunk`` 16-byte vectors (``vec`` elements each); where
    the M rows would then leave resident block slots empty, more, down to ``min_share`` vectors a
    block, so that every slot works; at most ``resident`` (a row's blocks must all be resident
    together) and at least 1. Grid x = M * S. Called as ``split(m, n) -> S``.

    A launch names its workspace (slot array and ticket counter, per device, stream and S: the Python
    path's in ``kernels/cuda/slot_workspace.py``, a native plan's its own) in argument slots
    ``slots_slot`` and ``tickets_slot`` (the ticket counter 0 where M * S blocks are all resident at
    once), and S in ``s_slot``."""

    chunk: int
    min_share: int
    resident: int
    vec: int
    s_slot: int
    tickets_slot: int
    slots_slot: int

    def __call__(self, m: int, n: int) -> int:
        return split_for(m, n // self.vec, self.chunk, self.min_share, self.resident)


def split_for(m: int, vectors: int, chunk: int, min_share: int, resident: int) -> int:
    """Blocks per row (``RowSplit``) of ``m`` rows of ``vectors`` 16-byte vectors."""
    split = cdiv(max(vectors, 1), chunk)
    if m * split < resident:
        split = max(split, min(resident // max(m, 1), cdiv(max(vectors, 1), min_share)))
    return max(1, min(split, resident))


NO_SPLIT = (0, 0, 0, 0, -1, -1, -1)  # RowSplit's ints in a rule without one


class NativeRule(NamedTuple):
    """How a native plan derives a build's launch of any (M, N) from one launch ``Build.native``
    described (``kernels/native``): grid and shared memory by ``geometry`` (with ``vec`` 0, the
    described launch's shared memory), rows longer than ``n_max`` declined (0: none), M and N
    written into argument slots ``m_slot`` and ``n_slot`` (-1: not arguments). ``by_class``: one
    described launch per class of N (the next power of two, and Triton's specialisation of an int
    argument: 32-bit range, divisible by 16, and == 1, which is declined), not one for every N.
    ``split``: grid x is M * S blocks instead (``RowSplit``), and the plan puts its own workspace of
    the call's stream and S into the described launch. ``m_unspecialised``: M (in ``m_slot``) is
    one of the kernel's ``do_not_specialize`` arguments, so its value is not part of N's class and
    M = 1 is launched too. ``cap_per_class``: the grid's cap is each class's own (a persistent grid
    of as many programs as the class's compiled kernel fits on the GPU at once), which the build
    describes as its launch of the most rows a grid takes (``registry.plan_rule``)."""

    geometry: LaunchGeometry
    n_max: int = 0
    by_class: bool = False
    m_slot: int = -1
    n_slot: int = -1
    split: RowSplit | None = None
    m_unspecialised: bool = False
    cap_per_class: bool = False

    def for_plan(self, class_cap: int = 0) -> tuple[int, ...]:
        """The ints ``plan_learn`` takes, the resident cap read for the current device (``class_cap``:
        the cap of the class taught, where ``cap_per_class``)."""
        geometry = self.geometry
        cap = class_cap if self.cap_per_class else geometry.cap
        if geometry.resident_block:
            resident = geometry.residency(geometry.resident_block)
            cap = min(cap or resident, resident)
        return (geometry.rows, geometry.per_row, cap, geometry.vec, geometry.parts, geometry.held, self.n_max,
                int(self.by_class), self.m_slot, self.n_slot, *(self.split or NO_SPLIT), int(self.m_unspecialised))


@dataclass
class Build:
    """A compiled (variant, config, dtype) instance. ``launch(x, out)`` enqueues the softmax of x into
    out for any (M, N) the config admits: grid, block, shared memory and arguments are worked out per
    call from the shape, never compiled or recorded per shape (a Triton kernel is specialised per
    power-of-two BLOCK and N's alignment, so per bucket, never per N).

    ``native`` (optional) is the same launch arithmetic as data: ``native(device, stream, m, n)``
    gives the call's one launch as plain values the native module issues (``kernels.native``:
    function handle, grid x, block x, shared memory, packed arguments, the x and out slots), or None
    where that call must go through ``launch`` (a kernel not compiled yet for N's bucket, two
    launches, a workspace that may move). ``stream_bound``: such a launch holds a buffer of
    ``stream`` and is valid on it only (``kernels/cuda/slot_workspace.py``). ``native_guard``: a
    check that must hold whenever launches so described are issued (Triton: no launch hook registered, which they would skip).
    ``native_rule`` (optional): how the native module derives ``native``'s launch of any (M, N) from one
    it was given (``NativeRule``), so that a new shape costs no Python.
    ``apply`` (optional): ``apply(x)`` gives the softmax of x as a new tensor, the bits ``launch``
    gives, where the variant has a cheaper way to it than an allocation and ``launch``
    (torch_softmax: ``torch.softmax`` itself); the runtime then calls it instead.

    ``resources`` may depend on N for kernels whose dynamic shared memory or block size depend on
    N; the variant reports them for the ``n`` ``build`` was given, a hint for that report only.
    """

    variant: str
    config: KernelConfig
    dtype: str
    launch: Callable[[Any, Any], None]
    resources: Resources = field(default_factory=Resources)
    native: NativeGeometry | None = None
    stream_bound: bool = False
    native_guard: Callable[[], bool] | None = None
    apply: Callable[[Any], Any] | None = None
    native_rule: NativeRule | None = None


class Variant(ABC):
    """One softmax algorithm. Subclasses set the class attributes and implement the four methods."""

    name: ClassVar[str]
    seed: ClassVar[str] = ""  # which seed document (000..004) or "torch" / "beyond-seeds"
    backend: ClassVar[str]  # "cuda" | "triton" | "torch" | "cute" | "external"
    dtypes: ClassVar[tuple[str, ...]] = DTYPES
    description: ClassVar[str] = ""
    min_arch: ClassVar[int]  # compute capability x 10; set from MIN_ARCH_BY_BACKEND unless declared

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        backend = getattr(cls, "backend", None)
        if not hasattr(cls, "min_arch") and isinstance(backend, str):
            cls.min_arch = MIN_ARCH_BY_BACKEND.get(backend, DEFAULT_MIN_ARCH)

    def requirements(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        """What a GPU needs to run one config, as plain data for the dispatch table: ``min_arch``
        always; ``smem_per_block`` (bytes of shared memory one block may ask for, at the config's
        longest row) and ``cluster`` (blocks per thread-block cluster) where the config needs them;
        ``max_arch`` where the config is not offered past an architecture (it spills there)."""
        return {"min_arch": int(self.min_arch)}

    def available(self) -> Support:
        """Can this variant run on this machine at all (GPU present, package importable)? Unless a
        variant says otherwise: where torch sees a CUDA device (``torch_cuda_support``)."""
        return torch_cuda_support()

    @abstractmethod
    def all_configs(self) -> list[KernelConfig]:
        """Every launch configuration this variant declares (what ``autotuner kernels`` lists)."""

    def configs(self, m: int, n: int, dtype: str) -> list[KernelConfig]:
        """The configs worth sweeping for this shape: those of ``all_configs`` that support it."""
        return [c for c in self.all_configs() if self.supports(m, n, dtype, c)]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        """Shape limits of one config as plain data, so that a dispatch table can check them without
        importing this package: any of ``n_min``, ``n_max``, ``n_multiple_of``, ``m_min``, ``m_max``.
        The default is no limit beyond a valid shape."""
        return {}

    def supports(self, m: int, n: int, dtype: str, config: KernelConfig | None = None) -> Support:
        """Cheap, no compile: dtype declared, a valid shape, and the config's ``constraints``."""
        if dtype not in self.dtypes:
            return unsupported(f"{self.name} supports dtypes {', '.join(self.dtypes)}, not {dtype}")
        if m < 0 or n < 1:
            return unsupported(f"shape ({m}, {n}) is not a valid softmax shape (need M >= 0, N >= 1)")
        if config is not None:
            return check_constraints(self.constraints(config, dtype), m, n)
        return SUPPORTED

    @abstractmethod
    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        """Compile (cached) and return the build of (config, dtype), which launches every (M, N) the
        config admits. ``n`` is a hint: the row length ``resources`` are reported for (and the
        first Triton bucket compiled); the build is no less valid for other N."""

    def source_hash(self) -> str:
        """Hash of everything that defines the generated code; stored with every measurement. A
        variant pinned in ``kernels/source_pins.json`` whose code (comments and docstrings aside) is
        unchanged answers its pinned hash (``kernels.source_hash``)."""
        files = self.source_files()
        if not files:
            return hash_text(self.name)
        # kept while the files are unchanged (path, mtime, size): sweep plans, every_candidate and
        # status ask once per config or per table candidate, and a pinned hash parses the sources
        stamp = tuple((str(p), stat.st_mtime_ns, stat.st_size) for p in files for stat in [Path(p).stat()])
        kept = getattr(self, "_source_hash_kept", None)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        digest = pinned_hash(self.name, files) or hash_files(files)
        self._source_hash_kept = (stamp, digest)
        return digest

    def current_hashes(self) -> frozenset[str]:
        """Every hash a row of today's code can carry: :meth:`source_hash`; for a pinned variant the
        full text's hash as well, which a host whose pin check fails records, and, while the code
        matches the pin, the pin's ``also_recorded`` hashes (what such a host recorded before a
        re-pin: the H100 domain sweep of 2026-11-25/26, Python 3.12, before ``kernels.source_hash``
        read every Python alike)."""
        files = self.source_files()
        if not files or self.name not in _source_hashes.pins():
            return frozenset({self.source_hash()})  # unpinned: the full text's hash, one element
        return frozenset({self.source_hash(), hash_files(files), *_source_hashes.also_recorded(self.name, files)})

    def source_files(self) -> list[Path]:
        return []


def check_constraints(limits: dict[str, int], m: int, n: int) -> Support:
    """Apply a ``constraints`` dict to a shape; the reason names the limit that failed."""
    if n < limits.get("n_min", 1):
        return unsupported(f"N={n} is below this config's minimum {limits['n_min']}")
    if "n_max" in limits and n > limits["n_max"]:
        return unsupported(f"N={n} is above this config's maximum {limits['n_max']}")
    if n % limits.get("n_multiple_of", 1):
        return unsupported(f"N={n} is not a multiple of {limits['n_multiple_of']} (vector width)")
    if m < limits.get("m_min", 0):
        return unsupported(f"M={m} is below this config's minimum {limits['m_min']}")
    if "m_max" in limits and m > limits["m_max"]:
        return unsupported(f"M={m} is above this config's maximum {limits['m_max']}")
    return SUPPORTED


def next_power_of_two(value: int) -> int:
    return 1 << max(0, (int(value) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
