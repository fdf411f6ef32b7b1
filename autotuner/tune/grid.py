"""The shapes a sweep measures.

Default grid (the grid of the peers' anchor figures): every M in ``DEFAULT_M`` × every N in
``DEFAULT_N`` whose tensor is at most ``MAX_TENSOR_BYTES`` (2 GiB), for fp32, fp16 and bf16. N covers
powers of two and real vocabulary sizes (32000 Llama, 50257 GPT-2, 151936 Qwen). ``--m``/``--n``/
``--dtype`` replace the corresponding axis. Shapes are ordered coarse to fine (see ``coarse_to_fine``)
so a sweep cut short by a budget has covered the grid sparsely rather than one corner densely.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from autotuner.domain import MAX_DIM
from kernels.base import DTYPE_BYTES, DTYPES, normalize_dtype

DEFAULT_M: tuple[int, ...] = (1, 4, 32, 128, 1024, 4096, 16384)
DEFAULT_N: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32000, 32768, 50257, 65536, 131072, 151936, 262144)
MAX_TENSOR_BYTES = 2 * 1024**3


def parse_int_list(text: str, what: str) -> list[int]:
    """``"1,4,32"`` → [1, 4, 32]; a clear error naming the bad item otherwise (also 2^k and 4k/1M)."""
    values = []
    for part in str(text).split(","):
        item = part.strip().lower()
        if not item:
            continue
        try:
            if "^" in item:
                base, _, exponent = item.partition("^")
                value = int(base) ** int(exponent)
            elif item[-1] in "km":
                value = int(float(item[:-1]) * (1024 if item[-1] == "k" else 1024**2))
            else:
                value = int(item)
        except ValueError:
            raise ValueError(f"{what}: {part.strip()!r} is not an integer (expected a comma list such as 1,4,32)") from None
        if not 1 <= value <= MAX_DIM:
            raise ValueError(f"{what}: {value} out of range (1 .. 2^31-1)")
        values.append(value)
    if not values:
        raise ValueError(f"{what}: empty list")
    return sorted(set(values))


def parse_dtypes(text: str) -> list[str]:
    if str(text).strip().lower() == "all":
        return list(DTYPES)
    return list(dict.fromkeys(normalize_dtype(part) for part in str(text).split(",") if part.strip()))


def shapes(ms: Sequence[int] = DEFAULT_M, ns: Sequence[int] = DEFAULT_N, dtypes: Sequence[str] = DTYPES,
           max_tensor_bytes: int = MAX_TENSOR_BYTES) -> list[tuple[int, int, str]]:
    """(m, n, dtype) of the grid, tensors over ``max_tensor_bytes`` left out, coarse to fine."""
    grid = [(m, n, d) for d in dtypes for m in ms for n in ns if m * n * DTYPE_BYTES[d] <= max_tensor_bytes]
    return coarse_to_fine(grid)


def coarse_to_fine(grid: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Order shapes so each prefix spreads over the grid: level k holds the M and N values whose index
    on their axis is a multiple of 2^(L-k), largest stride first (a van der Corput-like order)."""
    grid = list(grid)
    ms = sorted({s[0] for s in grid})
    ns = sorted({s[1] for s in grid})

    def level(index: int) -> int:
        if index == 0:
            return 0
        return 64 - (index & -index).bit_length() + 1  # fewer trailing zeros → finer level

    def rank(shape: tuple[int, int, str]) -> tuple[int, int, int, str]:
        mi, ni = ms.index(shape[0]), ns.index(shape[1])
        return (max(level(mi), level(ni)), mi, ni, shape[2])

    return sorted(grid, key=rank)
