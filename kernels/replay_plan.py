"""Plans: ``plan(rows) -> out`` for one (device, shape, dtype), made from a build of any backend.

A plan records the build's launches once (the CUDA and Triton launch layers both record through
``kernels.launch_record``) and, where they depend only on device, shape, dtype and pointer alignment
apart from the input and output pointers, replays them pre-bound; otherwise it calls the build's
``launch``. The plan is generated as one function (``exec``), so that a call costs the allocation,
the device check, two data pointers, the stream and the launches, and nothing else.

Imports torch (only ``autotuner.runtime`` imports this module, on the first softmax).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

# (guards, statements, names): recorded launches as code for a generated plan (see _replay_code)
ReplayCode = tuple[list[str], list[str], dict[str, Any]]

_empty_like = torch.empty_like


def _make_plan(
    device: int, launch: Callable[[Any, Any], None], replay: ReplayCode | None = None
) -> Callable[[Any], Any]:
    """``plan(rows) -> out`` for 2-D contiguous rows on ``device``: allocate, launch on the current
    stream. With ``replay`` (see ``_replay_code``) the plan issues the build's recorded launches
    itself, pre-bound, for 16-byte aligned pointers while the replay's guards hold; otherwise the
    build's ``launch`` runs. ``device`` must be current for the launch (kernel handles and stream
    are the current device's); from another current device the launch runs under a device guard.

    Generated as one function, so that a call costs the allocation, the device check, two data
    pointers, the stream and the launches, and nothing else."""
    guards, statements, names = replay if replay is not None else ([], [], {})
    condition = " and ".join(["not (xp | op) & 15", *guards])
    fast = [
        "        xp = rows.data_ptr()",
        "        op = out.data_ptr()",
        f"        if {condition}:",
        "            stream = raw_stream(DEVICE)",
        *(f"            {line}" for line in statements),
        "            return out",
    ] if replay is not None else []
    source = "\n".join([
        "def plan(rows):",
        "    out = empty_like(rows)",
        "    if current_device() == DEVICE:",
        *fast,
        "        launch(rows, out)",
        "    else:",
        "        with cuda_device(DEVICE):",
        "            launch(rows, out)",
        "    return out",
    ])
    namespace = dict(names, DEVICE=device, empty_like=_empty_like, current_device=torch._C._cuda_getDevice,
                     raw_stream=torch._C._cuda_getCurrentRawStream, cuda_device=torch.cuda.device, launch=launch)
    exec(compile(source, f"<softmax plan on cuda:{device}>", "exec"), namespace)  # noqa: S102
    plan = namespace["plan"]
    plan.replays = replay is not None
    return plan


def _recorded_launches(launch: Callable[[Any, Any], None], rows: Any, out: Any) -> list | None:
    """The kernel launches one ``launch(rows, out)`` issues, recorded by the CUDA and Triton launch
    layers; None if it also ran any torch operation (an allocation, a fill, a torch kernel: work a
    replay would skip) or a launch the layers could not record."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernels.launch_record import recording

    class _Ops(TorchDispatchMode):
        ran = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.ran = True
            return func(*args, **(kwargs or {}))

    calls: list = []
    ops = _Ops()
    with recording(calls), ops:  # CUDA and Triton launches alike
        launch(rows, out)
    if ops.ran or not calls or any(call is None for call in calls):
        return None
    return calls


def _replay_code(launch: Callable[[Any, Any], None], rows: Any, out: Any) -> ReplayCode | None:
    """The launches of ``launch(rows, out)`` as code for ``_make_plan``: (guards, statements, names),
    with only the input and output pointers (``xp``, ``op``) and the stream left to fill in per
    call; None where replaying them is not safe.

    Safe means: every launch went through a layer that records it (``loader.KernelLauncher``,
    Triton's ``Launcher`` fast path), no torch operation ran beside them, every pointer argument is
    the input's, the output's or a buffer of the recorded stream (``loader.register_stream_buffer``,
    then guarded on that stream; no workspace, whose address can change), and two recordings agree
    (the launches are a function of the device, shape, dtype and pointer alignment, which is what a
    plan is kept for). Both pointers must be 16-byte aligned, as they are at each replay."""
    xp, op = rows.data_ptr(), out.data_ptr()
    if (xp | op) & 15:
        return None
    first = _recorded_launches(launch, rows, out)
    second = _recorded_launches(launch, rows, out) if first else None
    if not first or not second or len(first) != len(second):
        return None
    if not all(a.same_launch(b) for a, b in zip(first, second)):
        return None
    guards: list[str] = []
    statements: list[str] = []
    names: dict[str, Any] = {}
    for index, call in enumerate(first):
        code = call.bind_code(xp, op, f"_{index}")
        if code is None:
            return None
        guard, lines, bound_names = code
        if guard is not None and guard not in guards:
            guards.append(guard)
        statements += lines
        names.update(bound_names)
    return guards, statements, names


def plan_for_build(device: int, rows: Any, build: Any) -> Callable[[Any], Any]:
    """A plan launching ``build`` for rows shaped like ``rows`` on ``device``: one warm-up launch
    (the first launch of a specialisation goes through Triton's JIT), then the recording for the
    replay (outside CUDA-graph capture only). ``plan.replays`` says whether it replays."""
    launch = build.launch
    replay = None
    with torch.cuda.device(device):
        if not torch.cuda.is_current_stream_capturing():
            out = _empty_like(rows)
            launch(rows, out)
            replay = _replay_code(launch, rows, out)
    return _make_plan(device, launch, replay)
