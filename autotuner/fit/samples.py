"""Recorded timings with the resources of the kernel that ran them: what the performance model
(``autotuner/fit/perfmodel.py``) is fitted on and what it transfers from one GPU to another.

Read from ``autotuner export`` documents (``.json`` or ``.json.gz``), the form every recording is
committed in. The rows kept are the fit's (``autotuner/fit/fit.py``): ok and timed, of a variant
registered here whose current sources carry the row's source hash, not a peer (``EXCLUDED_BACKENDS``),
not of a candidate that ever failed verification or faulted on that GPU and dtype, the newest per
(GPU, candidate, dtype, shape), and not disturbed (``fit.without_disturbed``).
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from autotuner.fit.fit import BAD_STATUSES, EXCLUDED_BACKENDS, Observation, without_disturbed

# The committed recordings, per GPU: those the shipped tables are fitted from (autotuner/tables/README.md).
RECORDINGS: Mapping[str, tuple[str, ...]] = {
    "h100": ("tests/data/h100_sweep.json.gz", "bench/data/short_rows_h100.json.gz", "bench/data/long_rows_h100.json.gz",
             "tests/data/h100_domain.json.gz", "tests/data/h100_new_configs.json.gz",
             "bench/data/domain_sweep_h100.json.gz", "bench/data/cluster_rows_h100.json.gz"),
    "h200": ("tests/data/h200_sweep.json.gz", "bench/data/domain_sweep_h200.json.gz",
             "bench/data/short_rows_update_h200.json.gz", "bench/data/keep_variants_h200.json.gz",
             "bench/data/vocab_batches_h200.json.gz"),
}


@dataclass(frozen=True)
class Resources:
    """What one compiled kernel holds on an SM (as recorded with its timing; torch's own kernels
    record none, and are modelled as 256-thread blocks without shared memory)."""
    threads: int = 256
    registers: int = 32
    smem: int = 0  # static + dynamic bytes per block

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "Resources":
        threads = row.get("threads_per_block")
        if not threads:
            return cls()
        return cls(int(threads), int(row.get("registers") or 32),
                   int(row.get("static_smem") or 0) + int(row.get("dynamic_smem") or 0))


@dataclass(frozen=True)
class Sample:
    gpu: str
    dtype: str
    variant: str
    config_key: str
    m: int
    n: int
    median_us: float
    resources: Resources
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def candidate(self) -> tuple[str, str]:
        return self.variant, self.config_key


class RecordingError(ValueError):
    """A recording that cannot be read, with its path and why."""


def read_export(path: Path) -> dict[str, Any]:
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as handle:
            document = json.load(handle)
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise RecordingError(f"cannot read recording {path}: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("runs"), list):
        raise RecordingError(f"{path} is not an `autotuner export` document (no list of runs)")
    return document


def load_samples(paths: Iterable[Path], gpus: Sequence[str] | None = None) -> list[Sample]:
    """The fit's rows (module docstring) of every run in ``paths`` (of ``gpus`` only, if given)."""
    from kernels import get_variant

    hashes: dict[str, frozenset[str] | None] = {}

    def current(variant: str) -> frozenset[str] | None:
        if variant not in hashes:
            try:
                registered = get_variant(variant)
                hashes[variant] = None if registered.backend in EXCLUDED_BACKENDS else registered.current_hashes()
            except KeyError:
                hashes[variant] = None
        return hashes[variant]

    newest: dict[tuple[str, str, str, str, int, int], Sample] = {}
    banned: set[tuple[str, str, str, str]] = set()
    for path in paths:
        for run in read_export(Path(path))["runs"]:
            gpu = (run.get("gpu") or {}).get("key")
            if gpus is not None and gpu not in gpus:
                continue
            candidates = run["candidates"]
            for row in run["measurements"]:
                candidate = candidates[row["candidate"]]
                hashes_now = current(candidate["variant"])
                if hashes_now is None or candidate.get("source_hash") not in hashes_now:
                    continue
                identity = (gpu, row["dtype"], candidate["variant"], candidate["config_key"])
                if row.get("status") in BAD_STATUSES:
                    banned.add(identity)
                if row.get("status") != "ok" or not row.get("median_us"):
                    continue
                newest[(*identity, row["m"], row["n"])] = Sample(  # runs are exported oldest first
                    gpu, row["dtype"], candidate["variant"], candidate["config_key"], row["m"], row["n"],
                    float(row["median_us"]), Resources.of(row), candidate.get("config") or {})
    return undisturbed([s for key, s in newest.items() if key[:4] not in banned])


def undisturbed(samples: Sequence[Sample]) -> list[Sample]:
    """``samples`` less the disturbed timings the fit leaves out (``fit.without_disturbed``), per GPU."""
    kept: list[Sample] = []
    groups: dict[tuple[str, str], list[Sample]] = {}
    for sample in samples:
        groups.setdefault((sample.gpu, sample.dtype), []).append(sample)
    for group in groups.values():
        observations = without_disturbed([Observation(s.variant, s.config_key, {}, s.m, s.n, s.median_us) for s in group])
        keep = {(o.variant, o.config_key, o.m, o.n) for o in observations}
        kept += [s for s in group if (s.variant, s.config_key, s.m, s.n) in keep]
    return kept


def recording_paths(root: Path, gpus: Iterable[str] | None = None) -> list[Path]:
    """The committed recordings of ``gpus`` (default: every GPU that has some), under ``root``."""
    wanted = RECORDINGS if gpus is None else {g: RECORDINGS[g] for g in gpus if g in RECORDINGS}
    return [root / path for paths in wanted.values() for path in paths]
