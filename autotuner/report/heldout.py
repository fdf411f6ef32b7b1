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

Real workloads (``workload_shapes.json`` beside this module, each size with the model it comes from):

- ``llm_vocab``: LM-head rows, vocabularies of 32,000 (Llama 2) to 262,144 (Gemma 3), decode batches
  1-64 and prefills up to 16k tokens.
- ``attention_rows``: batch x heads x query length rows of 32 to 128k keys (Llama, Qwen, BERT, ViT).
- ``moe_router``: 1 to 64k tokens over 8 (Mixtral) to 256 (DeepSeek-V3) experts.
- ``workloads``: the three together.

Real sizes coincide with swept points now and then (M = 1 with N = 32000 is a point of the coarse
lattice): ``never_fitted`` drops, where a command reads a set, every pair some table measured.

Fresh random sets (``random_pairs``, ``autotuner bench --seed S`` / ``evaluate --seed S``): M log-uniform
over 1..2^20 and N over 1..2^24, fp32 tensors up to 256 MB unless told otherwise, the same for a seed.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Collection, Iterable, Sequence

from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX
from kernels.base import DTYPE_BYTES, DTYPES

Pair = tuple[int, int]
WORKLOADS_FILE = Path(__file__).with_name("workload_shapes.json")
WORKLOAD_SETS = ("llm_vocab", "attention_rows", "moe_router")
SET_MAX_TENSOR_BYTES = 2 * 1024**3  # the sweep's cap (autotuner.tune.grid.MAX_TENSOR_BYTES), for fp32
RANDOM_MAX_TENSOR_BYTES = 256 * 1024**2

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


def workload_pairs(path: Path = WORKLOADS_FILE) -> dict[str, tuple[Pair, ...]]:
    """Each workload set's (M, N): its ``m`` x ``n`` lists or its listed ``pairs``, in file order, fp32
    tensors over the sweep's cap left out."""
    document = json.loads(path.read_text())
    sets = {}
    for name in WORKLOAD_SETS:
        entry = document[name]
        pairs = [(m, n) for m, n, _what in entry["pairs"]] if "pairs" in entry else [
            (m, n) for m in entry["m"] for n in entry["n"]]
        sets[name] = tuple(dict.fromkeys(p for p in pairs if p[0] * p[1] * DTYPE_BYTES["fp32"] <= SET_MAX_TENSOR_BYTES))
    return sets


HELD_OUT_SETS.update(workload_pairs())
HELD_OUT_SETS["workloads"] = tuple(dict.fromkeys(pair for name in WORKLOAD_SETS for pair in HELD_OUT_SETS[name]))


def held_out_shapes(name: str, dtypes: tuple[str, ...] | list[str] = DTYPES) -> list[tuple[int, int, str]]:
    """The (M, N, dtype) of a named set, dtype-major; a clear error for an unknown name."""
    key = name.strip().lower()
    if key not in HELD_OUT_SETS:
        raise ValueError(f"unknown held-out set {name!r}; known: {', '.join(HELD_OUT_SETS)}")
    return [(m, n, dtype) for dtype in dtypes for m, n in HELD_OUT_SETS[key]]


def random_pairs(seed: int, count: int, max_tensor_bytes: int = RANDOM_MAX_TENSOR_BYTES,
                 exclude: Collection[Pair] = ()) -> list[Pair]:
    """``count`` distinct (M, N), log2 M uniform over [0, 20] and log2 N over [0, 24] (rounded down),
    drawn from ``random.Random(seed)``: a draw whose fp32 tensor is over ``max_tensor_bytes``, or that is
    in ``exclude`` or drawn before, is skipped and the stream goes on. The stream depends on the seed
    alone, so the same seed and exclusions give the same set, and an exclusion added later (a refit's
    new point) replaces only that pair. A clear error where the cap leaves too little to draw from."""
    if count < 1:
        raise ValueError(f"--count {count}: draw at least 1 shape")
    rng = random.Random(seed)
    chosen: dict[Pair, None] = {}
    for _ in range(1000 * count):
        pair = (min(DOMAIN_M_MAX, int(2 ** rng.uniform(0, 20))), min(DOMAIN_N_MAX, int(2 ** rng.uniform(0, 24))))
        if pair[0] * pair[1] * DTYPE_BYTES["fp32"] <= max_tensor_bytes and pair not in exclude:
            chosen.setdefault(pair)
            if len(chosen) == count:
                return list(chosen)
    raise ValueError(f"only {len(chosen)} of {count} shapes drawn under a {max_tensor_bytes:,}-byte cap "
                     f"({len(exclude)} excluded): raise the cap or ask fewer")


def measured_pairs(tables: Iterable) -> frozenset[Pair]:  # noqa: ANN001 - DispatchTable-like (.points)
    """Every (M, N) a table among ``tables`` was fitted on, whatever its GPU or dtype: a random or
    workload set read with these excluded holds no shape any of them has measured."""
    return frozenset((point["m"], point["n"]) for table in tables for point in table.points)


def never_fitted(shapes: Sequence[tuple[int, int, str]], exclude: Collection[Pair]) -> list[tuple[int, int, str]]:
    return [s for s in shapes if (s[0], s[1]) not in exclude]


def all_held_out_shapes(dtypes: tuple[str, ...] | list[str] = DTYPES) -> frozenset[tuple[int, int, str]]:
    return frozenset(held_out_shapes("domain", dtypes))


def tensor_bytes(m: int, n: int, dtype: str) -> int:
    return m * n * DTYPE_BYTES[dtype]
