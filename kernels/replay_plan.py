"""Plans: ``plan(rows) -> out`` for one (device, shape, dtype), made from a build of any backend.

A plan records the build's launches once (the CUDA and Triton launch layers both record through
``kernels.launch_record``) and, where they depend only on device, shape, dtype and pointer alignment
apart from the input and output pointers, replays them pre-bound; otherwise it calls the build's
``launch``. The plan is generated as one function (``exec``), so that a call costs the allocation,
the device check, two data pointers, the stream and the launches, and nothing else. Where the
native module is built (``kernels.native``) and takes every launch, the plan's first step is one C
call that allocates and launches (torch's Python argument parser alone costs more than a small
kernel's launch); its first run is checked bit for bit against the build's own launch.

Imports torch (only ``autotuner.runtime`` imports this module, on the first softmax).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from kernels.native import load as native_module
from kernels.native import plan_launches

# (guards, statements, names): recorded launches as code for a generated plan (see _replay_code)
ReplayCode = tuple[list[str], list[str], dict[str, Any]]

_empty_like = torch.empty_like


def _make_plan(
    device: int, launch: Callable[[Any, Any], None], replay: ReplayCode | None = None, native: Any = None
) -> Callable[[Any], Any]:
    """``plan(rows) -> out`` for 2-D contiguous rows on ``device``: allocate, launch on the current
    stream. With ``native`` (a plan of the native module, ``kernels.native``) one C call allocates
    and launches while the replay's guards hold and rows are 16-byte aligned. With ``replay`` (see
    ``_replay_code``) the plan issues the build's recorded launches itself, pre-bound, for 16-byte
    aligned pointers while the replay's guards hold; otherwise the build's ``launch`` runs.
    ``device`` must be current for the launch (kernel handles and stream are the current device's);
    from another current device the launch runs under a device guard.

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
    native_lines = [
        f"    if current_device() == DEVICE{''.join(f' and {guard}' for guard in guards)}:",
        "        out = native_run(rows, raw_stream(DEVICE), NATIVE)",
        "        if out is not None:",
        "            return out",
    ] if native is not None else []
    source = "\n".join([
        "def plan(rows):",
        *native_lines,
        "    out = empty_like(rows)",
        "    if current_device() == DEVICE:",
        *fast,
        "        launch(rows, out)",
        "    else:",
        "        with cuda_device(DEVICE):",
        "            launch(rows, out)",
        "    return out",
    ])
    module = native_module()
    namespace = dict(names, DEVICE=device, empty_like=module.empty_like if module else _empty_like,
                     current_device=torch._C._cuda_getDevice, raw_stream=torch._C._cuda_getCurrentRawStream,
                     cuda_device=torch.cuda.device, launch=launch, NATIVE=native,
                     native_run=module.run if module else None)
    exec(compile(source, f"<softmax plan on cuda:{device}>", "exec"), namespace)  # noqa: S102
    plan = namespace["plan"]
    plan.replays = replay is not None
    plan.native = native is not None
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


def _agreed_launches(launch: Callable[[Any, Any], None], rows: Any, out: Any) -> list | None:
    """The recorded launches of ``launch(rows, out)`` where two recordings agree (the launches are
    then a function of the device, shape, dtype and pointer alignment, which is what a plan is kept
    for); None otherwise, or for pointers not 16-byte aligned."""
    if (rows.data_ptr() | out.data_ptr()) & 15:
        return None
    first = _recorded_launches(launch, rows, out)
    second = _recorded_launches(launch, rows, out) if first else None
    if not first or not second or len(first) != len(second):
        return None
    if not all(a.same_launch(b) for a, b in zip(first, second)):
        return None
    return first


def _replay_code(launch: Callable[[Any, Any], None], rows: Any, out: Any) -> ReplayCode | None:
    """The launches of ``launch(rows, out)`` as code for ``_make_plan`` (``_replay_of``)."""
    calls = _agreed_launches(launch, rows, out)
    return _replay_of(calls, rows, out) if calls else None


def _replay_of(calls: list, rows: Any, out: Any) -> ReplayCode | None:
    """The recorded ``calls`` (``_agreed_launches``) as code for ``_make_plan``: (guards,
    statements, names), with only the input and output pointers (``xp``, ``op``) and the stream
    left to fill in per call; None where replaying them is not safe.

    Safe means: every launch went through a layer that records it (``loader.KernelLauncher``,
    Triton's ``Launcher`` fast path), no torch operation ran beside them, every pointer argument is
    the input's, the output's or a buffer of the recorded stream (``loader.register_stream_buffer``,
    then guarded on that stream; no workspace, whose address can change), and two recordings agree.
    Both pointers must be 16-byte aligned, as they are at each replay."""
    xp, op = rows.data_ptr(), out.data_ptr()
    guards: list[str] = []
    statements: list[str] = []
    names: dict[str, Any] = {}
    for index, call in enumerate(calls):
        code = call.bind_code(xp, op, f"_{index}")
        if code is None:
            return None
        guard, lines, bound_names = code
        if guard is not None and guard not in guards:
            guards.append(guard)
        statements += lines
        names.update(bound_names)
    return guards, statements, names


def _native_plan(calls: list, rows: Any, out: Any) -> Any:
    """The recorded ``calls`` as a plan of the native module, or None: the module not built, a
    launch it cannot take (``native_launch``), a layout the driver does not confirm, or a first
    native run whose output differs in any bit from ``out`` (``launch(rows, out)``'s, already
    written)."""
    module = native_module()
    if module is None:
        return None
    xp, op = rows.data_ptr(), out.data_ptr()
    launches = [call.native_launch(xp, op) for call in calls]
    if any(launch is None for launch in launches):
        return None
    try:
        native = plan_launches(module, launches)
        if native is None:
            return None
        got = module.run(rows, torch._C._cuda_getCurrentRawStream(rows.get_device()), native)
    except (RuntimeError, SystemError, TypeError, ValueError) as exc:  # a module built wrong: Python path
        # shown once per message by the warnings filters' default
        warnings.warn(f"the native launch module failed ({type(exc).__name__}: {exc}); softmax() takes the "
                      f"Python path", RuntimeWarning, stacklevel=3)
        return None
    if got is None or not torch.equal(got.view(torch.uint8), out.view(torch.uint8)):
        return None
    return native


def plan_for_build(device: int, rows: Any, build: Any) -> Callable[[Any], Any]:
    """A plan launching ``build`` for rows shaped like ``rows`` on ``device``: one warm-up launch
    (the first launch of a specialisation goes through Triton's JIT), then the recording for the
    replay and the native plan (outside CUDA-graph capture only). ``plan.replays`` and
    ``plan.native`` say which paths it has."""
    launch = build.launch
    replay = native = None
    with torch.cuda.device(device):
        if not torch.cuda.is_current_stream_capturing():
            out = _empty_like(rows)
            launch(rows, out)
            calls = _agreed_launches(launch, rows, out)
            replay = _replay_of(calls, rows, out) if calls else None
            native = _native_plan(calls, rows, out) if replay is not None else None
    return _make_plan(device, launch, replay, native)
