"""A rich progress bar for sweeps: counts items already in the database as done, shows the last result."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from autotuner.tune.measure import WorkItem


class SweepProgress:
    def __init__(self, console: Console, total: int):
        self._progress = Progress(
            TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[last]}"), console=console, transient=False,
        )
        self._task = self._progress.add_task("sweep", total=total, last="")

    def __enter__(self) -> "SweepProgress":
        self._progress.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._progress.stop()

    @property
    def console(self) -> Console:
        return self._progress.console

    def grow(self, items: int) -> None:
        """More items to measure (a strategy's next round): the total and the ETA follow."""
        total = self._progress.tasks[0].total or 0
        self._progress.update(self._task, total=total + items)

    def update(self, item: WorkItem, result: dict[str, Any] | None) -> None:
        if result is None:
            self._progress.advance(self._task)
            return
        what = "copy" if item.kind == "copy" else f"{item.variant}[{item.config_key}]"
        time = f"{result['median_us']:.2f} us" if result.get("median_us") else result.get("status", "?")
        self._progress.update(self._task, advance=1, last=f"{item.dtype} {item.m}x{item.n} {what}: {time}")
