"""The 10,000-shape sample of the shipped tables' picks, and the snapshot of them the tests compare
against (``tests/data/shipped_picks.json.gz``). Regenerate the snapshot only on purpose, when a table or
the lookup rule is meant to change: ``python -m tests.autotuner.shipped_picks``."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from autotuner.lookup.select import TableStore, load_shipped_tables

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "shipped_picks.json.gz"
SEED = 19
SHAPES = 10_000
GPUS = ("h100", "h200")
DTYPES = ("fp32", "fp16", "bf16")
M_MAX = 1 << 20
N_MAX = 1 << 24


def sample_shapes(count: int = SHAPES, seed: int = SEED) -> list[tuple[int, int]]:
    """Log-uniform M in [0, 2**20] (one in 50 is M = 0) and N in [1, 2**24]; the same list for a seed."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        m = 0 if rng.random() < 0.02 else min(M_MAX, int(2 ** rng.uniform(0, 20)))
        n = min(N_MAX, max(1, int(2 ** rng.uniform(0, 24))))
        shapes.append((m, n))
    return shapes


def current_picks() -> dict[str, list[str]]:
    """Per ``gpu/dtype``: the shipped tables' pick ("variant[config_key]") for every sampled shape."""
    store = TableStore(load_shipped_tables())  # the shipped tables alone, never a local database's
    shapes = sample_shapes()
    picks: dict[str, list[str]] = {}
    for gpu in GPUS:
        for dtype in DTYPES:
            picks[f"{gpu}/{dtype}"] = [
                f"{c.variant}[{c.config_key}]" for c in (store.select(m, n, dtype, gpu) for m, n in shapes)]
    return picks


def encode(picks: dict[str, list[str]]) -> dict[str, object]:
    names = sorted({name for column in picks.values() for name in column})
    index = {name: i for i, name in enumerate(names)}
    return {"seed": SEED, "shapes": SHAPES, "names": names,
            "picks": {key: [index[name] for name in column] for key, column in picks.items()}}


def decode(document: dict[str, object]) -> dict[str, list[str]]:
    names = document["names"]
    return {key: [names[i] for i in column] for key, column in document["picks"].items()}  # type: ignore[union-attr,index]


def load_snapshot() -> dict[str, list[str]]:
    return decode(json.loads(gzip.decompress(SNAPSHOT.read_bytes())))


if __name__ == "__main__":
    SNAPSHOT.write_bytes(gzip.compress(json.dumps(encode(current_picks()), separators=(",", ":")).encode(), mtime=0))
    print(f"wrote {SNAPSHOT} ({SNAPSHOT.stat().st_size} bytes)")


# One predicted model per architecture: the 15 predicted tables come from one procedure, and a
# test that replays every shipped table's rule would spend most of its time on near copies of them.
PREDICTED_SAMPLE = ("a100", "l4", "b200")


def tables_to_replay() -> list:
    """The shipped tables a rule-replaying test checks: every measured one, and the predicted ones of
    ``PREDICTED_SAMPLE`` (``tests/autotuner/test_predicted_tables.py`` checks every predicted one's
    points)."""
    return [t for t in load_shipped_tables()
            if t.document.get("source") != "predicted" or t.gpu in PREDICTED_SAMPLE]
