"""Recorded timings with the resources of the kernel that ran them: what the performance model
(``autotuner/fit/perfmodel.py``) is fitted on and what it transfers from one GPU to another.

Read from ``autotuner export`` documents (``.json`` or ``.json.gz``), the form every recording is
committed in. The rows kept are the fit's (``autotuner/fit/fit.py``): current rows
(``evidence.CurrentCode``, peers left out), reconciled as the fit reconciles them
(``evidence.reconcile``: every run, each host a source; a failure bans a candidate on a GPU and dtype
only where two sources reproduced it), and not disturbed (``fit.without_disturbed``).
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from autotuner.fit.evidence import CurrentCode, Reading, reconcile, source_of
from autotuner.fit.fit import without_disturbed

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
    current = CurrentCode()
    readings: dict[tuple[str, str], list[Reading]] = {}
    resources: dict[tuple, Resources] = {}
    order = 0
    for path in paths:
        for run in read_export(Path(path))["runs"]:
            gpu = (run.get("gpu") or {}).get("key")
            if gpus is not None and gpu not in gpus:
                continue
            order += 1  # runs are exported oldest first
            source = source_of(None, run.get("host"), order, run.get("grid"))
            candidates = run["candidates"]
            for index, row in enumerate(run["measurements"]):
                candidate = candidates[row["candidate"]]
                if not current(candidate["variant"], candidate.get("source_hash")):
                    continue
                reading = Reading(candidate["variant"], candidate["config_key"], row["m"], row["n"], row.get("status"),
                                  row.get("median_us"), row.get("p20_us"), row.get("p80_us"), row.get("repetitions"),
                                  order, (order, index), source, candidate.get("config") or {})
                readings.setdefault((gpu, row["dtype"]), []).append(reading)
                if reading.status == "ok":
                    resources[(gpu, row["dtype"], *reading.key)] = Resources.of(row)
    samples = []
    for (gpu, dtype), group in readings.items():
        for o in without_disturbed(reconcile(group).observations):
            samples.append(Sample(gpu, dtype, o.variant, o.config_key, o.m, o.n, o.median_us,
                                  resources[(gpu, dtype, o.variant, o.config_key, o.m, o.n)], o.config))
    return samples


def recording_paths(root: Path, gpus: Iterable[str] | None = None) -> list[Path]:
    """The committed recordings of ``gpus`` (default: every GPU that has some), under ``root``."""
    wanted = RECORDINGS if gpus is None else {g: RECORDINGS[g] for g in gpus if g in RECORDINGS}
    return [root / path for paths in wanted.values() for path in paths]
