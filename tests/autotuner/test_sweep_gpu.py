"""The sweep on a real GPU: a faulting variant is recorded and the sweep finishes; a real sweep killed
with SIGKILL at a random point and rerun ends with the same rows as an uninterrupted one."""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
SHAPES = [(1, 1024, "bf16"), (32, 32000, "bf16"), (1024, 4096, "fp32")]
REAL_GRID = ["--m", "1,32,1024", "--n", "1024,4096,32000", "--dtype", "fp32,bf16",
             "--variant", "torch_softmax", "--variant", "triton_fused_row", "--variant", "cuda_block_online",
             "--time-cap", "0.05"]


def test_a_faulting_variant_is_recorded_and_the_sweep_finishes(tmp_path):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from autotuner.tune.env import collect_environment
    from autotuner.lookup.gpu import detect_gpu
    from autotuner.tune.sweep import Sweep, plan
    from autotuner.tune.worker import WorkerRunner
    from db import Measurement, SweepRun, make_engine
    from kernels import get_variant, unregister_variant
    from tests.autotuner import gpu_faults

    gpu_faults.register()
    try:
        engine = make_engine(str(tmp_path / "t.sqlite"))
        candidates, items = plan([get_variant("torch_softmax"), get_variant("test_faulting")], SHAPES)
        sweep = Sweep(engine, detect_gpu(0), collect_environment(), "cold", candidates)
        with WorkerRunner(0, "cold", item_timeout_s=120, setup=["tests.autotuner.gpu_faults:register"]) as runner:
            summary = sweep.run(runner, items)
        assert summary.by_status == {"ok": len(SHAPES) * 2, "fault": len(SHAPES)}, summary
        assert runner.restarts == len(SHAPES), "every fault replaces the worker"
        with Session(engine) as session:
            faults = session.scalars(select(Measurement).where(Measurement.status == "fault")).all()
            assert all("illegal" in (f.error or "").lower() for f in faults), [f.error for f in faults]
            assert session.scalars(select(SweepRun.status)).one() == "finished"
    finally:
        unregister_variant("test_faulting")


def identities(db: Path) -> list[tuple]:
    """What must match between a resumed and an uninterrupted real sweep: every (candidate, shape)
    with its status (times differ from run to run on a real GPU), and the shapes with a copy time."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT c.variant, c.config_key, c.source_hash, m.m, m.n, m.dtype, m.status FROM measurements m"
            " JOIN candidates c ON c.id = m.candidate_id").fetchall()
        copies = connection.execute("SELECT 'copy', '', '', m, n, dtype, 'ok' FROM copy_references").fetchall()
    return sorted(rows + copies)


def rows_so_far(db: Path) -> int:
    """Rows a running sweep has committed to ``db``: 0 before the file exists or holds its tables (the
    file appears before the schema does, and a poll in between met "no such table")."""
    if not db.exists():
        return 0
    try:
        return len(identities(db))
    except sqlite3.OperationalError:
        return 0


def sweep_process(db: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autotuner", "sweep", "--db", str(db), *REAL_GRID], cwd=REPO,
                            env={**os.environ, "COLUMNS": "300"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def test_a_real_sweep_killed_at_a_random_point_resumes_to_the_same_rows(tmp_path):
    reference, killed = tmp_path / "reference.sqlite", tmp_path / "killed.sqlite"
    done = sweep_process(reference)
    assert done.wait(600) == 0, done.stderr.read()[-3000:]
    expected = identities(reference)
    seed = int(os.environ.get("AUTOTUNER_TEST_KILL_SEED") or random.randrange(1 << 30))
    # the kill lands in the first three quarters: the last rows of this small grid come milliseconds
    # apart, and a sweep that finishes between the poll and the kill is no test of the resume
    kill_after = random.Random(seed).randint(1, max(1, len(expected) * 3 // 4))
    process = sweep_process(killed)
    try:
        deadline = time.monotonic() + 600
        while process.poll() is None and time.monotonic() < deadline:
            if rows_so_far(killed) >= kill_after:
                break
            time.sleep(0.05)
        assert process.poll() is None, f"seed {seed}: the sweep ended before the kill"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    before = len(identities(killed))
    rerun = sweep_process(killed)
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err[-3000:]
    assert f"{before} already in the database" in " ".join(err.split()), f"seed {seed}: {err[-2000:]}"
    assert identities(killed) == expected, f"seed {seed}: rows after the resume differ"
