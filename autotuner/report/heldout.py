"""Named held-out shape sets over the whole domain, fixed here and never used by the fit.

``autotuner evaluate --set NAME`` sweeps a set into a run marked held-out (``fit`` skips those runs) and
scores the tables on it; ``autotuner bench --set NAME`` times the dispatched softmax on it against
torch, QuACK and Liger. Every set holds the same (M, N) for fp32, fp16 and bf16. No shape of a set is a
point of the classic grid or of the domain sweep's coarse lattice, and the domain sweep never proposes one
(``DomainStrategy.avoid``), so their rows stay out of the fit. Tensors stay within the sweep's 2 GiB cap.

- ``attention``: short rows (N 32-1000) of attention scores, many rows.
- ``vocab``: LLM vocabulary rows (30,522 BERT to 262,144 Gemma 3), decode to prefill batch sizes.
- ``long``: very long rows, 2^19 to 2^24 elements.
- ``odd``: odd M and N, neither near a power of two.
- ``small_m``: 1 to 8 rows of every length class.
- ``huge_m``: 100,000 to 2^20 rows of short to medium length.
- ``domain``: all of the above (the set issue 18's acceptance figures are measured on).
"""
from __future__ import annotations

from kernels.base import DTYPE_BYTES, DTYPES

Pair = tuple[int, int]

HELD_OUT_SETS: dict[str, tuple[Pair, ...]] = {
    "attention": tuple((m, n) for m in (12288, 40000) for n in (32, 77, 197, 384, 577, 1000)),
    "vocab": tuple((m, n) for m in (3, 77, 1500) for n in (30522, 50257, 102400, 151936, 256000))
    + ((1, 30522), (1, 128256), (1, 256000), (6, 128256), (40, 262144)),
    "long": ((1, 1 << 19), (1, 700001), (1, 3 << 20), (1, 9999991), (2, 1 << 24), (3, 2000000), (6, 1 << 22),
             (12, 1 << 24), (50, 1 << 21), (200, 600000)),
    "odd": ((3, 1001), (7, 6007), (13, 333), (77, 5003), (129, 12345), (333, 77777), (999, 777), (3001, 2047),
            (7777, 111), (65537, 97)),
    "small_m": tuple((m, n) for m in (2, 7) for n in (33, 3000, 20000, 400000, 2500000)),
    "huge_m": ((100000, 64), (200000, 33), (400000, 200), (1 << 20, 128), (1 << 20, 16), (300000, 1500)),
}
HELD_OUT_SETS["domain"] = tuple(dict.fromkeys(pair for name in list(HELD_OUT_SETS) for pair in HELD_OUT_SETS[name]))


def held_out_shapes(name: str, dtypes: tuple[str, ...] | list[str] = DTYPES) -> list[tuple[int, int, str]]:
    """The (M, N, dtype) of a named set, dtype-major; a clear error for an unknown name."""
    key = name.strip().lower()
    if key not in HELD_OUT_SETS:
        raise ValueError(f"unknown held-out set {name!r}; known: {', '.join(HELD_OUT_SETS)}")
    return [(m, n, dtype) for dtype in dtypes for m, n in HELD_OUT_SETS[key]]


def all_held_out_shapes(dtypes: tuple[str, ...] | list[str] = DTYPES) -> frozenset[tuple[int, int, str]]:
    return frozenset(held_out_shapes("domain", dtypes))


def tensor_bytes(m: int, n: int, dtype: str) -> int:
    return m * n * DTYPE_BYTES[dtype]
