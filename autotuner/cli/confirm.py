"""``autotuner confirm`` (registered on ``cli.app``): re-time on this host's GPU the answers a pending fit
would change, against today's, and store them as a confirmation run (``autotuner/fit/confirm.py``).

The hidden ``--measurer``/``--setup`` options and ``AUTOTUNER_FAKE_GPU`` work as ``autotuner sweep``'s do
(``autotuner/cli/sweep.py``), so tests run the real command on a CPU with a replaying measurer."""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from autotuner.cli.app import DbOption, DtypesOption, MethodOption, UserError, command, console, out
from autotuner.cli.sweep import REAL_MEASURER


@command()
def confirm(
    gpu: Annotated[str, typer.Option(help="GPU model whose pending fit to confirm (h100, ...); this host's GPU must be one.")],
    db: DbOption = None,
    dtype: DtypesOption = "all",
    method: MethodOption = "cold",
    device: Annotated[int, typer.Option(help="CUDA device index to measure on.")] = 0,
    time_cap: Annotated[float, typer.Option(help="Seconds of timing per candidate and shape, at most.")] = 0.5,
    item_timeout: Annotated[float, typer.Option(help="Seconds before a hung candidate is killed.")] = 120.0,
    measurer: Annotated[str, typer.Option(hidden=True, help="Tests: worker measurer factory, module:attribute.")] = REAL_MEASURER,
    setup: Annotated[Optional[list[str]], typer.Option(hidden=True, help="Tests: module:function run here and in the worker first.")] = None,
) -> None:
    """Re-time, side by side on this GPU, the pick a pending `autotuner fit` would give and the pick answering
    today at every measured shape where they differ, and verify again each kernel whose failure only one
    source reported; the results are stored as a confirmation run, which the next fit reads as evidence of
    its own. Run it where a fit was refused because answers would move on one source's evidence, or left
    out readings one uploader alone stands behind."""
    from contextlib import ExitStack

    from sqlalchemy.orm import Session

    from autotuner.cli.sweep import chosen_devices, fake_gpu, resolve_gpus, visible_device_count
    from autotuner.fit import confirm as confirmation
    from autotuner.fit.fit import FitError
    from autotuner.lookup.gpu import validate_gpu_key
    from autotuner.tune.env import collect_environment
    from autotuner.tune.grid import parse_dtypes
    from autotuner.tune.parallel import open_shared_database
    from autotuner.tune.progress import SweepProgress
    from autotuner.tune.worker import WorkerRunner, resolve_hook
    from kernels import get_variant

    key = validate_gpu_key(gpu)
    hooks = list(setup or [])
    for hook in [measurer, *hooks]:
        resolve_hook(hook)
    for hook in hooks:
        resolve_hook(hook)()
    fake = fake_gpu(measurer)
    devices = chosen_devices(None, device, (lambda: fake[1]) if fake else visible_device_count)
    info = resolve_gpus(key, devices, fake)
    engine = open_shared_database(db)
    pendings = []
    for dt in parse_dtypes(dtype):
        with Session(engine) as session:
            try:
                entry = confirmation.pending(session, key, dt, method)
            except FitError as exc:
                console.print(f"[yellow]{exc}[/yellow]", highlight=False)
                continue
        where = f"{key}/{dt}/{method}"
        out.print(f"{where}: a fit would change {len(entry.changes)} answer(s) against {entry.origin}; "
                  f"{len(entry.unreproduced)} failure(s) reported by one source only", highlight=False)
        pendings.append(entry)

    def runnable(name: str) -> bool:  # a test measurer answers for any variant; the GPU runs what is available
        try:
            return fake is not None or bool(get_variant(name).available())
        except KeyError:
            return False

    items, skipped = confirmation.plan(pendings, runnable)
    for what in skipped[:10]:
        console.print(f"[yellow]not measured here:[/yellow] {what}", highlight=False)
    if not items:
        out.print("nothing to measure: every answer a fit would give is the one answering today", highlight=False)
        return
    with ExitStack() as stack:
        runner = stack.enter_context(WorkerRunner(devices[0], method, item_timeout_s=item_timeout, time_cap_s=time_cap,
                                                  setup=hooks, measurer_factory=measurer))
        progress = stack.enter_context(SweepProgress(console, len(items)))
        run_id, results = confirmation.record(engine, info, collect_environment(), method, items, runner,
                                              command=" ".join(sys.argv), progress=progress.update)
    found = confirmation.verdicts(pendings, results)
    confirmed = sum(v.confirmed for v in found)
    failed = sum(v.ratio is None for v in found)
    out.print(f"confirmation run {run_id}: {len(items)} item(s) measured; of {len(found)} changed answer(s), "
              f"{confirmed} confirmed (the new pick not slower than today's beyond the measured repeatability), "
              f"{len(found) - confirmed - failed} refuted, {failed} not timed; run `autotuner fit --gpu {key}` to "
              f"refit with it", highlight=False)
    if failed == len(found) and found:
        raise UserError("no changed answer could be timed here (see the reasons above)")
