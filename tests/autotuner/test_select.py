"""The embedded lookup: no GPU libraries imported, fallbacks in order, clear errors, fast warm path."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from autotuner.lookup.select import KernelChoice, TableStore, UnknownGpuError
from autotuner.fit.index import index_document
from autotuner.lookup.table import DispatchTable
from tests.autotuner.test_table import document


def store_with(*gpus: str) -> TableStore:
    return TableStore(DispatchTable(index_document({**document(), "gpu": gpu})) for gpu in gpus)


def test_importing_and_calling_select_kernel_loads_neither_torch_nor_cupy():
    code = ("import sys; from autotuner import select_kernel; c = select_kernel(4096, 32000, 'bf16', gpu='h100');"
            "print(c.variant); assert 'torch' not in sys.modules and 'cupy' not in sys.modules, sorted(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_choice_is_immutable_and_its_config_a_fresh_plain_dict():
    choice = store_with("h100").select(4096, 1024, "bfloat16", "h100")
    assert isinstance(choice, KernelChoice) and choice.variant == "vector" and choice.dtype == "bf16"
    config = choice.config
    config["vec"] = 1
    assert choice.config == {"vec": 8}
    with pytest.raises(AttributeError):
        choice.variant = "other"  # type: ignore[misc]


def test_a_choice_built_on_the_first_lookup_path_equals_one_built_field_by_field():
    store = store_with("h100")
    # the first lookup takes the long way, the next new shapes the spelling's reader: both build with tuple.__new__
    for m, n, exact in ((4096, 1024, True), (1000, 3000, False), (1, 65536, True), (77, 50001, False)):
        fast = store.select(m, n, "bf16", "h100")
        plain = KernelChoice(*fast)  # through the generated __new__
        assert fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
        assert list(fast._asdict().items()) == list(plain._asdict().items())
        assert type(fast) is KernelChoice and fast.reason == "" and fast.exact is exact and fast.source == "table"
        with pytest.raises(AttributeError):
            fast.variant = "other"  # type: ignore[misc]
    assert ("bf16", "h100", "cold") in store._spelled


def test_a_spelling_already_met_answers_its_next_new_shapes_from_the_table_that_replaced_its_own():
    store = store_with("h100")
    assert store.select(4096, 1024, "bfloat16", "H100").variant == "vector"  # the spelling's reader is kept
    assert store.select(4096, 2048, "bfloat16", "H100").variant != "any"
    only_any = {**document(), "candidates": [document()["candidates"][2]],
                "points": [{**point, "times": [point["times"][2]]} for point in document()["points"]]}
    store.add(DispatchTable(index_document(only_any)))
    for m, n in ((4096, 1024), (4096, 2048), (77, 3001)):  # cached and new shapes alike
        choice = store.select(m, n, "bfloat16", "H100")
        assert choice.variant == "any" and choice.source in ("table", "model"), (m, n, choice)


def test_missing_gpu_falls_back_to_nearest_model_with_a_warning():
    store = store_with("h100", "a100")
    with pytest.warns(RuntimeWarning, match="answered from the h100 table"):
        choice = store.select(1, 1024, "bf16", "h200")
    assert choice.source == "nearest-gpu:h100" and choice.gpu == "h200"


def test_without_any_table_the_documented_rule_answers_any_shape():
    choice = TableStore().select(3, 123457, "fp16", "h100")
    assert choice.variant == "torch_softmax" and choice.source == "fallback"


def test_strict_lookup_names_the_known_gpus():
    with pytest.raises(UnknownGpuError, match="known: a100, h100"):
        store_with("h100", "a100").select(1, 1024, "bf16", "mi300", allow_fallback=False)


@pytest.mark.parametrize("m, n, dtype, error", [
    (-1, 10, "fp32", ValueError), (1, 0, "fp32", ValueError), (1, 2**31, "fp32", ValueError),
    (1.5, 10, "fp32", TypeError), (1, 10, "int8", ValueError),
])
def test_bad_arguments_raise_clear_errors(m, n, dtype, error):
    with pytest.raises(error):
        TableStore().select(m, n, dtype, "h100")


class _Dim:
    """An integer of another kind, as numpy's int64 or a 0-d integer tensor is: it has __index__."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def test_integers_of_any_kind_are_taken_as_their_value():
    store = store_with("h100")
    assert store.select(_Dim(4096), _Dim(50000), "bf16", "h100") == store.select(4096, 50000, "bf16", "h100")
    with pytest.raises(TypeError, match="got bool and int"):
        store.select(True, 10, "fp32", "h100")


def test_the_answering_view_picks_what_select_kernel_answers_on_every_listed_gpu():
    """``answering_view`` gives the runtime the table and view ``select_kernel`` answers a GPU from, its
    own or a borrowed one (a donor's measurements, a twin's prediction), so that its native plans pick
    what the lookup answers: on every GPU model listed, over 400 shapes log-uniform over the domain.
    The H100's relatives without a table of their own borrow the H100's."""
    import random
    import warnings

    from autotuner.lookup.gpu_models import GPU_MODELS
    from autotuner.lookup.select import default_store, select_kernel

    store, rng = default_store(), random.Random(3)
    shapes = [(int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24))) for _ in range(400)]
    for gpu in ("h800", "gh200", "h100-pcie", "h100-nvl"):
        assert store.answering_table(gpu, "bf16")[0] is store.get("h100", "bf16"), gpu
    viewed = 0
    for gpu in sorted(GPU_MODELS):
        answering = store.answering_view(gpu, "bf16")
        if answering is None:
            continue
        viewed += 1
        table, view = answering
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a donor's answer says so
            for m, n in shapes:
                choice, picked = select_kernel(m, n, "bf16", gpu), table.pick(m, n, view)
                expected = ("torch_softmax", ()) if picked is None else \
                    (table.candidates[picked]["variant"], tuple(table.candidates[picked]["config"].items()))
                assert (choice.variant, choice.config_items) == expected, (gpu, m, n)
    assert viewed >= 12


def test_warm_lookup_is_a_dictionary_probe():
    store = store_with("h100")
    store.select(4096, 50000, "bf16", "h100")
    started = time.perf_counter()
    for _ in range(10000):
        store.select(4096, 50000, "bf16", "h100")
    per_call_us = (time.perf_counter() - started) / 10000 * 1e6
    assert per_call_us < 5.0  # generous for a loaded CI machine; docs/RESULTS_<GPU>.md has the measured figure


def test_runtime_replaces_a_choice_this_host_cannot_run_with_torch(monkeypatch):
    from autotuner import runtime

    monkeypatch.setattr(runtime, "_builds", {})
    with pytest.warns(RuntimeWarning, match="cannot run here"):
        build = runtime.build_for("no_such_variant", {"block": 1}, "fp32", 10)
    assert build.variant == "torch_softmax"


def test_the_answer_cache_is_bounded(monkeypatch):
    from autotuner.lookup import select

    monkeypatch.setattr(select, "CACHE_LIMIT", 8)
    store = store_with("h100")
    for n in range(1, 50):
        store.select(1, n, "bf16", "h100")
    assert len(store._cache) <= 8


def test_gpu_spellings_resolve_alike_and_a_bad_one_raises_every_time():
    store = store_with("h100")
    by_name = store.select(4096, 1024, "bf16", "NVIDIA H100 80GB HBM3")
    assert by_name.gpu == "h100" and by_name.source == "table"
    for _ in range(2):  # a rejected spelling is never remembered as valid
        with pytest.raises(ValueError, match="GPU key is empty"):
            store.select(4096, 1024, "bf16", "   ")


def test_select_kernel_answers_from_the_default_store_and_its_cache(monkeypatch):
    from autotuner.lookup import select

    store = store_with("h100")
    monkeypatch.setattr(select, "_default_store", store)
    first = select.select_kernel(4096, 1024, "bf16", gpu="h100")
    assert first is store.select(4096, 1024, "bf16", "h100") and first.variant == "vector"
    assert select.select_kernel(4096, 1024, "bf16", gpu="h100") is first  # the inlined warm path


def test_select_kernels_new_shape_path_answers_as_the_readers_choice(monkeypatch):
    """``select_kernel``'s short way for a new shape (its spelling's reader): the same choices as the
    reader's, field by field and type, at measured points and 3000 log-uniform shapes of shipped tables."""
    import random

    from autotuner.lookup import select

    shipped = TableStore()
    select.add_shipped_tables(shipped)
    rng = random.Random(11)
    shapes = [(max(1, int(2 ** rng.uniform(0, 20))), max(1, int(2 ** rng.uniform(0, 24)))) for _ in range(3000)]
    sources = set()
    # the a100's table is a predicted one; the hand-made table answers the fallback and its model too
    for store, gpu, dtype in ((shipped, "h100", "bf16"), (shipped, "h100", "fp32"), (shipped, "a100", "fp16"),
                              (store_with("h100"), "h100", "bf16")):
        monkeypatch.setattr(select, "_default_store", store)
        select.select_kernel(3, 8, dtype, gpu)  # the spelling's first lookup: its reader is kept
        reader = store._spelled[(dtype, gpu, "cold")]
        measured = [(m, n) for m, n, *_ in reader.table.document["index"]["exact"][reader.view]][:200]
        for m, n in measured + shapes:
            store._cache.clear()  # every lookup a new shape
            short, plain = select.select_kernel(m, n, dtype, gpu), reader.choice(m, n)
            assert type(short) is KernelChoice and short == plain
            assert list(short._asdict().items()) == list(plain._asdict().items()), (gpu, dtype, m, n)
            sources.add(short.source)
    assert {"table", "model", "fallback"} <= sources


def test_shipped_tables_are_read_on_their_first_use():
    """The default store parses a shipped file when its (gpu, dtype, method) is first asked for, so a
    process that looks up one GPU and dtype reads one file at start-up, not all of them."""
    from autotuner.lookup import select as select_module

    store = select_module.TableStore()
    select_module.add_shipped_tables(store)
    assert not store._tables
    store.select(1, 4096, "fp16", "h100")
    assert list(store._tables) == [("h100", "fp16", "cold")]
    assert len(store.tables()) == len(select_module.shipped_table_files())


def test_a_shipped_file_named_for_another_table_is_not_used(tmp_path, monkeypatch, caplog):
    import json as json_module

    from autotuner.lookup import select as select_module

    document = json_module.loads(select_module.shipped_table_files()[0].read_text())
    misnamed = tmp_path / "h100_fp32_cold.json"
    misnamed.write_text(json_module.dumps({**document, "gpu": "h100", "dtype": "bf16"}))
    monkeypatch.setattr(select_module, "shipped_table_files", lambda: [misnamed])
    store = select_module.TableStore()
    select_module.add_shipped_tables(store)
    assert store.get("h100", "fp32") is None and store.gpus() == []
    assert "not used" in caplog.text


@pytest.mark.parametrize("name", ["nonsense", "h20", "v100"])
def test_an_unknown_gpu_is_warned_about_once_naming_the_known_models(name):
    import warnings

    from autotuner.lookup import select

    select._warned_gpus.discard(name)
    store = store_with("h100")
    with pytest.warns(RuntimeWarning, match=f"GPU '{name}' is not a model the lookup knows.*known: .*h100"):
        choice = store.select(8, 1024, "bf16", name)
    assert choice.variant == "torch_softmax" and choice.source == "fallback"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        store.select(16, 1024, "bf16", name)


def test_zero_rows_answer_alike_in_the_lookup_the_cli_and_dispatch():
    """M = 0 launches nothing: the kernel M = 1 would run, predicted 0 µs, a reason saying so; the
    lookup, ``autotuner select`` and ``/dispatch`` answer it alike (the README's domain starts at 0)."""
    import json

    from typer.testing import CliRunner

    from autotuner import select_kernel
    from autotuner.cli import app
    from autotuner.lookup.select import ZERO_ROWS_REASON, default_store
    from service.config import Settings
    from service.routes.dispatch import answer_dispatch
    from service.schemas import DispatchQuery

    embedded = select_kernel(0, 4096, "bf16", "h100")
    one_row = select_kernel(1, 4096, "bf16", "h100")
    assert (embedded.variant, embedded.config) == (one_row.variant, one_row.config)
    assert embedded.predicted_us == 0.0 and embedded.reason == ZERO_ROWS_REASON and not embedded.exact
    # the default database (absent here: empty); a missing $AUTOTUNER_DB would be refused as a typo
    printed = CliRunner().invoke(app, ["select", "0", "4096", "bf16", "--gpu", "h100"], env={"AUTOTUNER_DB": None})
    assert printed.exit_code == 0, printed.output
    answer = json.loads(printed.output)
    assert answer.pop("table")["origin"].startswith("shipped:") and answer == embedded.as_dict()
    served = answer_dispatch(default_store(), Settings(), DispatchQuery(m=0, n=4096, dtype="bf16", gpu="h100"))
    assert (served.m, served.variant, served.config, served.predicted_us, served.source) == \
        (0, embedded.variant, embedded.config, 0.0, embedded.source)


MEMORY_PROBE = """
import json, random, resource, warnings
warnings.simplefilter("ignore")
from autotuner import select_kernel
rng = random.Random(7)
for dtype in ("fp16", "bf16", "fp32"):  # loads the tables and decodes their partitions
    for n in (8, 9):
        select_kernel(3, n, dtype, "h100")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(200_000):
    select_kernel(int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24)), rng.choice(("fp16", "bf16", "fp32")), "h100")
print(json.dumps({"grown_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
"""


def test_two_hundred_thousand_new_shapes_grow_the_process_by_at_most_50_mb(tmp_path):
    """Every lookup cache is bounded (the answers, the views), not by the shapes met."""
    import json
    import os
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "AUTOTUNER_DB": str(tmp_path / "absent.sqlite")}
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE], env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    assert json.loads(done.stdout)["grown_mb"] <= 50
