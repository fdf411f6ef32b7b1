"""Recorded sweeps for replay tests: loading one (an SQLite tuning database or an ``autotuner export``
JSON document, gzipped or not) and generating a synthetic one with the structure and noise of a real GPU sweep.

A recording is, per shape of one run, the "ok" timings in the order they were measured (that order
decides the quick-drop hint each candidate saw).
"""
from __future__ import annotations

import gzip
import json
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import insert
from sqlalchemy.orm import Session

from db import Measurement, make_engine, queries

Z80 = 0.8416  # the standard normal's 80th percentile: p20..p80 spans 2·Z80 sigma


@dataclass(frozen=True)
class Timed:
    candidate: str  # "variant[config_key]"
    median_us: float
    p20_us: float | None
    p80_us: float | None
    repetitions: int | None

    def log_sigma(self, default: float = 0.03) -> float:
        """Spread of one repetition in log space, from the stored quantiles."""
        if self.p20_us and self.p80_us and self.p80_us > self.p20_us > 0:
            return max(0.003, math.log(self.p80_us / self.p20_us) / (2 * Z80))
        return default


ShapeKey = tuple[int, int, int, str]  # (run id, m, n, dtype)


def load_recording(path: Path) -> dict[ShapeKey, list[Timed]]:
    """Per (run, m, n, dtype): ok timings in measurement order. The file is only read."""
    if path.name.endswith(".json.gz"):
        with gzip.open(path, "rt") as handle:
            return _from_export(json.load(handle))
    if path.suffix == ".json":
        return _from_export(json.loads(path.read_text()))
    uri = f"file:{path}?mode=ro"
    with sqlite3.connect(uri, uri=True) as connection:
        rows = connection.execute(
            "SELECT m.run_id, m.m, m.n, m.dtype, c.variant, c.config_key, m.median_us, m.p20_us, m.p80_us, m.repetitions"
            " FROM measurements m JOIN candidates c ON c.id = m.candidate_id"
            " WHERE m.status = 'ok' AND m.median_us > 0 ORDER BY m.run_id, m.id").fetchall()
    recording: dict[ShapeKey, list[Timed]] = {}
    for run, m, n, dtype, variant, config_key, median, p20, p80, reps in rows:
        recording.setdefault((run, m, n, dtype), []).append(Timed(f"{variant}[{config_key}]", median, p20, p80, reps))
    return recording


def _from_export(document: dict) -> dict[ShapeKey, list[Timed]]:
    recording: dict[ShapeKey, list[Timed]] = {}
    for index, run in enumerate(document["runs"]):
        names = [f"{c['variant']}[{c['config_key']}]" for c in run["candidates"]]
        for row in run["measurements"]:
            if row.get("status") == "ok" and row.get("median_us"):
                recording.setdefault((index, row["m"], row["n"], row["dtype"]), []).append(
                    Timed(names[row["candidate"]], row["median_us"], row.get("p20_us"), row.get("p80_us"),
                          row.get("repetitions")))
    return recording


# --- a synthetic recording shaped like an H100 sweep ----------------------------------------------

FAMILIES = {  # name: (configs, how its time relative to a copy grows with M and N)
    "torch": (1, lambda m, n: 1.25 + 0.2 * (n > 65536)),
    "warp_row": (4, lambda m, n: 1.02 if n <= 4096 else 1.5 + n / 32768),
    "block_fused": (6, lambda m, n: 1.05 if n <= 32768 else 1.4 + n / 262144),
    "block_online": (6, lambda m, n: 1.04 + 0.1 * (n > 65536)),
    "two_pass": (3, lambda m, n: 1.6 if n <= 65536 else 1.45),
    "split_row": (4, lambda m, n: 1.03 if m <= 32 and n >= 32000 else 2.2),
    "triton_fused": (4, lambda m, n: 1.06 if n <= 16384 else 1.9),
    "triton_tiled": (3, lambda m, n: 1.5),
    "triton_online": (3, lambda m, n: 1.2),
}
GRID_M = (1, 4, 32, 128, 1024, 4096, 16384)
GRID_N = (1024, 4096, 16384, 32000, 65536, 151936)


def synthetic_timings(m: int, n: int, dtype: str, rng: np.random.Generator) -> list[Timed]:
    """Every candidate's full timing on one shape, in registry order. Launch-bound shapes are noisy
    (5-8 % per repetition), large ones steady (1-2 %); 3 % of repetitions are outliers (1.2-2.5×);
    near ties (within a few percent) are common, as in real sweeps."""
    size = 4 if dtype == "fp32" else 2
    copy_us = 2.2 + 2 * m * n * size / 3.0e6
    launch_bound = copy_us < 8
    sigma = rng.uniform(0.05, 0.08) if launch_bound else rng.uniform(0.01, 0.02)
    timings = []
    for family, (count, curve) in FAMILIES.items():
        launch_penalty = 1.45 if launch_bound and family.startswith("triton") else 1.0  # Triton's launch cost
        family_factor = curve(m, n) * launch_penalty
        for config in range(count):
            spread = 1.0 if config == 0 else 1 + abs(rng.normal(0, 0.35))
            true_us = max(1.8, copy_us) * family_factor * spread * rng.uniform(0.99, 1.03)
            reps = int(rng.integers(40, 201))
            samples = true_us * np.exp(rng.normal(0, sigma, reps))
            outliers = rng.random(reps) < 0.03
            samples[outliers] *= rng.uniform(1.2, 2.5, outliers.sum())
            timings.append(Timed(f"{family}[c={config}]", float(np.median(samples)), float(np.quantile(samples, 0.2)),
                                 float(np.quantile(samples, 0.8)), reps))
    return timings


def write_synthetic_recording(path: Path, seed: int = 2024) -> Path:
    """An SQLite tuning database holding one synthetic run (it loads exactly like a real recording)."""
    rng = np.random.default_rng(seed)
    engine = make_engine(str(path))
    with Session(engine) as session, session.begin():
        gpu = queries.get_or_create_gpu(session, "h100", "synthetic H100")
        env = queries.get_or_create_environment(session, "synthetic")
        run = queries.create_run(session, gpu, env, "cold", command="synthetic recording")
        ids: dict[str, int] = {}
        rows: list[dict] = []
        for dtype in ("fp32", "bf16"):
            for m in GRID_M:
                for n in GRID_N:
                    if m * n * (4 if dtype == "fp32" else 2) > 2 * 1024**3:
                        continue
                    for timed in synthetic_timings(m, n, dtype, rng):
                        if timed.candidate not in ids:
                            variant, config_key = timed.candidate[:-1].split("[")
                            ids[timed.candidate] = queries.get_or_create_candidate(
                                session, variant, config_key, {"c": int(config_key[2:])}, "synthetic").id
                        rows.append({"run_id": run.id, "candidate_id": ids[timed.candidate], "m": m, "n": n,
                                     "dtype": dtype, "status": "ok", "median_us": timed.median_us,
                                     "p20_us": timed.p20_us, "p80_us": timed.p80_us, "repetitions": timed.repetitions})
        session.execute(insert(Measurement), rows)  # in measurement order: ids keep it
    engine.dispose()
    return path
