"""The real ``autotuner sweep`` command on a CPU (fake measurer and variants through its test hooks):
killed with SIGKILL and rerun, run twice at once on one SQLite file, run over two (fake) devices; and
its flags' errors."""
from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.cli.app import UserError
from autotuner.cli.sweep import resolve_method
from tests.autotuner.fakes import ITEM_PAUSE_ENV

REPO = Path(__file__).resolve().parents[2]
FAKE = ["--measurer", "tests.autotuner.fakes:DeterministicMeasurer",
        "--setup", "tests.autotuner.fakes:register_fake_variants", "--variant", "fake_rows", "--variant", "fake_split"]
GRID = ["--m", "1,4,32,128", "--n", "1024,2048,4096,8192", "--dtype", "fp32,bf16"]
SUMMARY = re.compile(r"measured (\d+) .*?; (\d+) already in the database")


def start_sweep(db: Path, *extra: str, pause_s: float = 0.01) -> subprocess.Popen:
    env = {**os.environ, "AUTOTUNER_FAKE_GPU": "h100:2", ITEM_PAUSE_ENV: str(pause_s), "COLUMNS": "300",
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "autotuner", "sweep", "--gpu", "h100", "--db", str(db), *GRID, *FAKE,
                             *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    """In the child: SIGINT back to its default action. A test run started as a background job of a
    non-interactive shell inherits SIGINT ignored, and the sweep would then ignore the Ctrl-C test's
    signal and finish."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(process: subprocess.Popen, timeout_s: float = 300) -> str:
    """Wait for a sweep; its stderr (where the console writes). Fails the test on a non-zero exit."""
    try:
        _, err = process.communicate(timeout=timeout_s)
    finally:
        cleanup(process)
    assert process.returncode == 0, err[-3000:]
    return err


def cleanup(process: subprocess.Popen) -> None:
    """Kill whatever is left of a sweep this test started (its process group: the sweep and workers)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stored(db: Path) -> tuple[list[tuple], list[tuple]]:
    """Every measurement and copy reference, without run ids or times: what must match between sweeps."""
    with sqlite3.connect(db) as connection:
        measurements = connection.execute(
            "SELECT c.variant, c.config_key, c.source_hash, m.m, m.n, m.dtype, m.status, m.median_us, m.p20_us,"
            " m.p80_us, m.repetitions, m.registers, m.error FROM measurements m JOIN candidates c ON c.id = m.candidate_id"
        ).fetchall()
        copies = connection.execute("SELECT m, n, dtype, median_us, p20_us, p80_us, repetitions FROM copy_references").fetchall()
    return sorted(measurements), sorted(copies)


def row_count(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            return sum(connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                       for t in ("measurements", "copy_references"))
    except sqlite3.OperationalError:  # not created yet
        return 0


def total_items(output: str) -> int:
    return int(re.search(r"(\d+) items", output).group(1))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, str]:
    """One uninterrupted sweep of the test grid."""
    db = tmp_path_factory.mktemp("reference") / "reference.sqlite"
    return db, finish(start_sweep(db, pause_s=0.0))


def test_the_reference_sweep_stores_every_item(reference):
    db, output = reference
    measurements, copies = stored(db)
    assert len(measurements) + len(copies) == total_items(output) > 100
    assert {m[6] for m in measurements} == {"ok", "wrong"}


def kill_when(db: Path, rows: int, process: subprocess.Popen) -> int:
    """SIGKILL the sweep process (only it, as ``kill -9 PID`` does) once ``rows`` rows are stored;
    returns how many rows it left."""
    try:
        deadline = time.monotonic() + 240
        while row_count(db) < rows and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert process.poll() is None, "the sweep ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        cleanup(process)
    return row_count(db)


@pytest.mark.slow
def test_sigkill_at_random_points_then_rerun_equals_an_uninterrupted_sweep(tmp_path, reference):
    reference_db, reference_output = reference
    total = total_items(reference_output)
    seed = int(os.environ.get("AUTOTUNER_TEST_KILL_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    db = tmp_path / "killed.sqlite"
    first = kill_when(db, rng.randint(1, total // 2), start_sweep(db, pause_s=0.02))
    assert 0 < first < total, f"seed {seed}: killed after {first} of {total} rows"
    second = kill_when(db, rng.randint(first + 1, total - 10), start_sweep(db, pause_s=0.02))  # killed again
    assert first < second < total, f"seed {seed}: second kill after {second} rows"
    output = finish(start_sweep(db, pause_s=0.0))
    measured, already = map(int, SUMMARY.search(output).groups())
    assert already == second, f"seed {seed}: the progress counts every item already in the database"
    assert measured + already == total == total_items(output)
    assert stored(db) == stored(reference_db), f"seed {seed}: rows after the resume differ from an uninterrupted sweep"
    with sqlite3.connect(db) as connection:
        statuses = [row[0] for row in connection.execute("SELECT status FROM sweep_runs ORDER BY id")]
    assert statuses == ["interrupted", "interrupted", "finished"], "killed runs are marked once found dead"


@pytest.mark.slow
def test_two_sweeps_at_once_on_one_sqlite_file_share_the_work(tmp_path, reference):
    reference_db, reference_output = reference
    db = tmp_path / "shared.sqlite"
    processes = [start_sweep(db, pause_s=0.03) for _ in range(2)]
    outputs = [finish(process) for process in processes]
    counts = [tuple(map(int, SUMMARY.search(output).groups())) for output in outputs]
    assert sum(measured for measured, _ in counts) == total_items(reference_output)
    assert all(measured > 0 for measured, _ in counts), f"both sweeps should take part: {counts}"
    assert stored(db) == stored(reference_db)


@pytest.mark.slow
def test_ctrl_c_on_two_devices_stops_cleanly_without_false_fault_rows(tmp_path, reference):
    """Ctrl-C reaches the sweep and its workers (one process group); no item may be recorded as a
    fault because its worker was interrupted, and the rerun completes the grid."""
    reference_db, _ = reference
    db = tmp_path / "interrupted.sqlite"
    process = start_sweep(db, "--devices", "all", pause_s=0.03)
    try:
        deadline = time.monotonic() + 240
        while row_count(db) < 20 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        cleanup(process)
    assert process.returncode != 0
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM measurements WHERE status = 'fault'").fetchone()[0] == 0
        assert [r[0] for r in connection.execute("SELECT status FROM sweep_runs")] == ["interrupted"]
        assert connection.execute("SELECT count(*) FROM work_list WHERE status = 'claimed'").fetchone()[0] == 0
    finish(start_sweep(db, "--devices", "all"))
    assert stored(db) == stored(reference_db)


@pytest.mark.slow
def test_two_fake_devices_sweep_the_grid_once(tmp_path, reference):
    reference_db, _ = reference
    db = tmp_path / "devices.sqlite"
    output = finish(start_sweep(db, "--devices", "all"))
    assert "devices 0,1" in output
    assert stored(db) == stored(reference_db)


def test_l2_and_timing_map_onto_the_stored_method():
    assert resolve_method(None, None, None) == "cold"
    assert resolve_method(None, "warm", None) == "warm"
    assert resolve_method(None, None, "events") == "cold"
    assert resolve_method(None, None, "graph") == "graph"
    assert resolve_method(None, "warm", "graph") == "graph"
    assert resolve_method("warm", "warm", "events") == "warm"
    assert resolve_method("graph", None, None) == "graph"


@pytest.mark.parametrize("args, message", [
    (["--timing", "graph", "--l2", "cold"], "--l2 cold needs --timing events"),
    (["--method", "cold", "--l2", "warm"], "--method cold contradicts"),
    (["--measurer", "no_colon"], "not of the form module:attribute"),
    (["--lease", "60", "--item-timeout", "120"], "--lease 60 must exceed --item-timeout 120"),
])
def test_bad_sweep_flags_exit_2_with_one_line_naming_what_is_accepted(args, message):
    result = CliRunner().invoke(app, ["sweep", *args])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())  # the console wraps long lines at the terminal width
    assert text.startswith("error: ") and text.count("error:") == 1 and "Traceback" not in text, result.output
    assert message in text, result.output


@pytest.mark.parametrize("args, message", [
    (["--l2", "hot"], "Invalid value for '--l2': Value error, 'hot' is not one of 'cold', 'warm'."),
    (["--timing", "cupti"], "Invalid value for '--timing': Value error, 'cupti' is not one of 'events', 'graph'."),
    (["--method", "hot"], "Invalid value for '--method': Value error, 'hot' is not one of 'cold', 'warm', 'graph'."),
    (["--devices", "0,x"], "Invalid value for '--devices': '0,x' is not a comma list"),
    (["--devices", "1,1"], "distinct"),
])
def test_bad_sweep_choices_are_typer_usage_errors_naming_what_is_accepted(args, message):
    """Choices are checked by Typer before the command runs: its usage error (usage, hint, one Error
    line), exit 2, no traceback."""
    result = CliRunner().invoke(app, ["sweep", *args])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.output, result.output


def test_a_fake_device_that_does_not_exist_is_refused(monkeypatch):
    monkeypatch.setenv("AUTOTUNER_FAKE_GPU", "h100:2")
    result = CliRunner().invoke(app, ["sweep", "--devices", "0,5", "--measurer", "tests.autotuner.fakes:DeterministicMeasurer"])
    assert result.exit_code == 1 and "no device 5" in result.output


def test_the_fake_gpu_is_ignored_without_a_test_measurer(monkeypatch):
    from autotuner.cli.sweep import REAL_MEASURER, fake_gpu

    monkeypatch.setenv("AUTOTUNER_FAKE_GPU", "h100:2")
    assert fake_gpu(REAL_MEASURER) is None
    assert fake_gpu("tests.autotuner.fakes:DeterministicMeasurer") == ("h100", 2)
    with pytest.raises(UserError):
        monkeypatch.setenv("AUTOTUNER_FAKE_GPU", "h100:two")
        fake_gpu("tests.autotuner.fakes:DeterministicMeasurer")


@pytest.mark.parametrize("rounds", ["0", "21", "x"])
def test_bench_rounds_outside_1_to_20_exit_2_naming_the_flag(rounds):
    result = CliRunner().invoke(app, ["bench", "--rounds", rounds])
    assert result.exit_code == 2, result.output
    assert "--rounds" in result.output and "Traceback" not in result.output, result.output


def test_bench_graph_launch_with_the_graph_method_exits_2_naming_both():
    result = CliRunner().invoke(app, ["bench", "--graph-launch", "--method", "graph"])
    assert result.exit_code == 2
    assert "--graph-launch" in result.output and "--method" in result.output


@pytest.mark.parametrize("flags, named", [(["--m", "x"], "--m"), (["--n", "32k,abc"], "--n"), (["--dtype", "fp64"], "fp64")])
def test_bench_names_a_bad_shape_flag_before_looking_for_a_gpu(flags, named):
    """A bad --m / --n / --dtype is the error reported, also on a machine without a GPU."""
    result = CliRunner().invoke(app, ["bench", *flags])
    assert result.exit_code == 2, result.output
    assert named in result.output and "CUDA" not in result.output, result.output


@pytest.mark.parametrize("flags", [["--max-gib", "0"], ["--max-gib", "0.001", "--m", "4096", "--n", "1024"]])
def test_bench_max_gib_refuses_a_cap_that_leaves_no_shape(flags):
    """--max-gib bounds the input tensors (default 2 GiB, the sweep's cap; larger to bench 128 x 2^24)."""
    result = CliRunner().invoke(app, ["bench", *flags])
    assert result.exit_code == 2, result.output
    assert "--max-gib" in result.output and "CUDA" not in result.output, result.output


def test_measured_grid_times_a_new_variant_where_the_others_were_and_nowhere_else(tmp_path):
    """``--grid measured``: after a classic sweep of fake_rows, a sweep of fake_split measures it at
    exactly the shapes (and dtypes asked) the database holds, adding none; with --m it is refused, and
    on an empty database it says what to do instead of sweeping nothing."""
    db = tmp_path / "measured.sqlite"
    env = {**os.environ, "AUTOTUNER_FAKE_GPU": "h100", "COLUMNS": "300", "PYTHONPATH": str(REPO)}
    hooks = FAKE[:4]

    def sweep(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autotuner", "sweep", "--gpu", "h100", "--db", str(db), *hooks, *args],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    empty = sweep("--grid", "measured", "--variant", "fake_split")
    assert empty.returncode != 0 and "no measured shape" in empty.stderr + empty.stdout
    assert "Traceback" not in empty.stderr
    first = sweep("--m", "1,32", "--n", "1024,8192", "--dtype", "fp32,bf16", "--variant", "fake_rows")
    assert first.returncode == 0, first.stderr[-2000:]
    second = sweep("--grid", "measured", "--dtype", "fp32", "--variant", "fake_split")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "measured shapes: 4 shapes" in second.stderr
    with sqlite3.connect(db) as connection:
        split_shapes = set(connection.execute(
            "SELECT m.m, m.n, m.dtype FROM measurements m JOIN candidates c ON c.id = m.candidate_id"
            " WHERE c.variant = 'fake_split'").fetchall())
        copies = connection.execute("SELECT count(*) FROM copy_references").fetchone()[0]
    assert split_shapes == {(m, n, "fp32") for m in (1, 32) for n in (1024, 8192)}
    assert copies == 8  # the first sweep's; the measured grid adds no shape
    refused = CliRunner().invoke(app, ["sweep", "--grid", "measured", "--m", "4"])
    assert refused.exit_code == 2 and "the measured grid chooses its own shapes" in refused.output, refused.output
