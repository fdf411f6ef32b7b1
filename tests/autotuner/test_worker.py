"""Crash isolation: a faulting or hanging candidate is recorded and the worker replaced."""
from __future__ import annotations

import pytest

from autotuner.tune.measure import WorkItem
from autotuner.tune.worker import WorkerRunner

FACTORY = "tests.autotuner.fakes:FaultyMeasurer"


def item(variant: str, n: int = 1024) -> WorkItem:
    return WorkItem("candidate", 4, n, "fp32", variant, "block=128")


@pytest.fixture
def runner():
    with WorkerRunner(None, "cold", item_timeout_s=3.0, measurer_factory=FACTORY) as worker:
        yield worker


def test_process_death_is_recorded_as_fault_and_worker_replaced(runner):
    first = runner.measure(item("good"))
    died = runner.measure(item("segfault"))
    after = runner.measure(item("good"))
    assert first["status"] == "ok" and after["status"] == "ok"
    assert died["status"] == "fault" and "exit code 139" in died["error"]
    assert first["error"] != after["error"], "a new worker process should have answered"
    assert runner.restarts == 1


def test_hang_is_recorded_as_timeout_and_sweep_goes_on(runner):
    hung = runner.measure(item("hang"))
    assert hung["status"] == "timeout"
    assert runner.measure(item("good"))["status"] == "ok"
    assert runner.restarts == 1


def test_fatal_cuda_error_replaces_the_worker(runner):
    before = runner.measure(item("good"))
    fatal = runner.measure(item("fatal"))
    after = runner.measure(item("good"))
    assert fatal["status"] == "fault" and "illegal memory access" in fatal["error"]
    assert before["error"] != after["error"]
