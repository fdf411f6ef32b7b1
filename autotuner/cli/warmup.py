"""``autotuner warmup``: compile every kernel instance the GPU's dispatch tables can pick, and the native
launch module, so that a server's first requests pay no compile (``autotuner.warmup``)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from autotuner.cli.app import UserError, command, console, out, print_json


@command()
def warmup(
    gpu: Annotated[Optional[str], typer.Option(help="GPU key whose tables to read (default: the current device's).")] = None,
    dtype: Annotated[str, typer.Option(help="Comma list of fp32, fp16, bf16 (aliases accepted), or 'all'.")] = "all",
    no_native: Annotated[bool, typer.Option("--no-native", help="Do not build the native launch module.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Compile every kernel instance softmax() can pick on this GPU and the native launch module, and
    teach the native plans each instance's launches."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autotuner import warmup as warm
    from autotuner.lookup.gpu import validate_gpu_key
    from autotuner.tune.grid import parse_dtypes

    dtypes = tuple(parse_dtypes(dtype))
    key = validate_gpu_key(gpu) if gpu else None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("warm-up", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label[:60])

        try:
            report = warm(key, dtypes, progress, native=not no_native)
        except RuntimeError as exc:
            raise UserError(str(exc)) from None
    if as_json:
        print_json(report)
        return
    native = report.get("native")
    if native is not None:
        status = f"built ({native['path']})" if native["ok"] else f"not built: {native['error'].splitlines()[-1]}"
        out.print(f"native launch module: {status}, {native['seconds']} s", highlight=False)
    for name, entry in report["dtypes"].items():
        out.print(f"{report['gpu']} {name}: {entry['instances']} kernel instances, {entry['triton_launches']} Triton "
                  f"buckets, {entry['plan_launches_taught']} launches taught to the native plan, {entry['seconds']} s"
                  + (f", {len(entry['failed'])} failed" if entry["failed"] else ""), highlight=False)
        for failure in entry["failed"]:
            console.print(f"  [yellow]failed:[/yellow] {failure}", highlight=False)
    out.print(f"warm-up took {report['seconds']} s", highlight=False)
