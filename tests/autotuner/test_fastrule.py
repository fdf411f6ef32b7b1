"""The compiled lookup rule (autotuner/lookup/_fastrule*.c) answers as its Python form does, to the last
bit: neighbours and weights, picks, the nearest point and the scaling model's time, on every shipped
table and the classic ones; and a whole process's answers with and without it are the same."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.lookup import predict, regret
from tests.autotuner.shipped_picks import tables_to_replay
from autotuner.lookup.table import DispatchTable

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "data" / "classic_tables"
fastrule = regret._fastrule


def test_the_install_built_the_compiled_rule():
    """`pip install -e .` builds it wherever a C compiler is (CI has one): a missing module there is a
    packaging fault, not a slow fallback to keep quiet about."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the lookup runs its Python form")
    if os.environ.get("SOFTMAX_AUTOTUNER_COMPILED_LOOKUP") == "0":
        pytest.skip("SOFTMAX_AUTOTUNER_COMPILED_LOOKUP=0 is set")
    assert fastrule is not None, "autotuner.lookup._fastrule was not built: run `pip install -e .`"


needs_compiled = pytest.mark.skipif(fastrule is None, reason="the compiled rule is not built here")


def _tables() -> list[DispatchTable]:
    documents = [table.document for table in tables_to_replay()]
    documents += [json.loads(path.read_text()) for path in sorted(CLASSIC.glob("*.json"))]
    return [DispatchTable({**document, "rule": rule}) for document in documents
            for rule in ("local-regret-clamped", "local-regret")]


def _queries(table: DispatchTable, count: int, seed: int) -> list[tuple[int, int]]:
    """Shapes over the whole domain, measured M and N, their neighbours and the edges among them."""
    rng = random.Random(seed)
    ms = sorted({p["m"] for p in table.points})
    ns = sorted({p["n"] for p in table.points})
    queries = []
    for _ in range(count):
        m = rng.choice([rng.choice(ms), rng.choice(ms) + rng.choice((-1, 1)), rng.randint(0, 64),
                        int(2 ** rng.uniform(0, 21))])
        n = rng.choice([rng.choice(ns), rng.choice(ns) + rng.choice((-1, 1)), rng.randint(1, 300_000),
                        int(2 ** rng.uniform(0, 24.5))])
        queries.append((max(m, 0), max(n, 1)))
    return queries


@needs_compiled
@pytest.mark.parametrize("table", _tables(), ids=lambda t: f"{t.gpu}-{t.dtype}-{t.rule}-{len(t.points)}")
def test_compiled_stencil_and_pick_equal_the_python_ones(table):
    clamped = table.rule != "local-regret"
    fits = 0
    for m, n in _queries(table, 1500, seed=11):
        table._stencil(m, n)  # builds the class's layout
        layout = table._layouts[table._class_points(n)[0]]
        compiled, python = regret.stencil(layout, m, n, clamped), regret.stencil_python(layout, m, n, clamped)
        assert compiled[0] == python[0], (m, n)
        assert list(map(float.hex, compiled[1])) == list(map(float.hex, python[1])), (m, n)
        if not compiled[0]:
            continue
        allowed = table.allowed(m, n)
        rows = [table._log_regret[c] for c in compiled[0]]
        gaps = frozenset().union(*map(table._gaps_at, compiled[0]))
        plan = regret.plan(rows, gaps, allowed)
        assert _exact(plan) == _exact(regret.plan_python(rows, gaps, allowed)), (m, n)
        assert regret.best(plan, compiled[1]) == regret.best_python(plan, compiled[1]), (m, n)
        fits += plan[1] is not None
    assert fits or table.gpu != "h100", "no query reached the fit over partial candidates"


def _exact(value):
    """A nested plan with every float as its hex string: == then compares bits, not values."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, (tuple, list)):
        return type(value)(_exact(item) for item in value)
    return value


@needs_compiled
def test_compiled_plan_equals_the_python_one_on_made_up_regrets():
    """Ties, capped values, gaps, partial candidates in several groups, unsorted allowed sets."""
    import math

    rng = random.Random(9)
    cap = math.log(1.5)
    for trial in range(3000):
        corners, count = rng.randint(1, 7), rng.randint(1, 14)
        pool = [0.0, cap, 0.01, 0.02]
        rows = [tuple(None if rng.random() < (0.2 if trial % 2 else 0.0) else
                      (rng.choice(pool) if rng.random() < 0.5 else rng.uniform(0.0, cap)) for _ in range(count))
                for _ in range(corners)]
        gaps = frozenset(i for i in range(count) if rng.random() < 0.1)
        allowed = tuple(rng.sample(range(count), rng.randint(1, count)))
        compiled, python = regret.plan(rows, gaps, allowed), regret.plan_python(rows, gaps, allowed)
        assert _exact(compiled) == _exact(python), (rows, gaps, allowed)
    with pytest.raises(IndexError):
        regret.plan([(0.0,)], frozenset(), (3,))


@needs_compiled
@pytest.mark.parametrize("table", _tables()[::2], ids=lambda t: f"{t.gpu}-{t.dtype}-{len(t.points)}")
def test_compiled_nearest_point_and_model_time_equal_the_python_ones(table):
    model = predict._model_of(table)
    rng = random.Random(5)
    for m, n in _queries(table, 400, seed=13):
        key, points = table._class_points(n)
        table._nearest(m, n, table.allowed(m, n) or (0,))  # builds the class's logs
        logs = table._point_logs[key]
        lm, ln = regret.log2_or_zero(m), regret.log2_or_zero(n)
        python = min(((pm - lm) ** 2 + (pn - ln) ** 2, index) for index, (pm, pn) in enumerate(logs))[1]
        assert fastrule.nearest(table._packed_logs[key], lm, ln) == python, (m, n)
        for index in rng.sample(range(len(table.candidates)), min(6, len(table.candidates))):
            compiled, reference = model.time(index, m, n), model.time_python(index, m, n)
            assert (compiled is None) == (reference is None), (index, m, n)
            assert compiled is None or compiled.hex() == reference.hex(), (index, m, n, compiled, reference)


DUMP = """
import json, random, warnings
warnings.simplefilter("ignore")
from autotuner.lookup import regret
from autotuner.lookup.select import default_store
store, rng, out = default_store(), random.Random(17), []
for i in range(2500):
    m, n = int(2 ** rng.uniform(0, 21)), int(2 ** rng.uniform(0, 24.5))
    for gpu in ("h100", "h200", "a100", "l4"):
        for dtype in ("fp16", "bf16", "fp32"):
            c = store.select(m, n, dtype, gpu)
            out.append([m, n, dtype, gpu, c.variant, c.config_key, c.source, c.exact,
                        None if c.predicted_us is None else c.predicted_us.hex()])
print(json.dumps({"compiled": regret._fastrule is not None, "answers": out}))
"""


@needs_compiled
def test_a_process_answers_alike_with_and_without_the_compiled_rule(tmp_path):
    def answers(compiled: str) -> dict:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SOFTMAX_AUTOTUNER_COMPILED_LOOKUP": compiled,
               "AUTOTUNER_DB": str(tmp_path / "absent" / "tuning.sqlite")}
        done = subprocess.run([sys.executable, "-c", DUMP], env=env, capture_output=True, text=True,
                              timeout=300, check=True)
        return json.loads(done.stdout)
    with_rule, without = answers("1"), answers("0")
    assert with_rule["compiled"] and not without["compiled"]
    assert with_rule["answers"] == without["answers"]


@needs_compiled
@needs_compiled
def test_model_time_past_any_valid_shape_computes_its_floor_as_python_does():
    table = _tables()[0]
    model = predict._model_of(table)
    for m, n in ((2**33, 3), (3, 2**40), (2**31 - 1, 2**31 - 1)):
        for index in range(min(4, len(table.candidates))):
            compiled, reference = model.time(index, m, n), model.time_python(index, m, n)
            assert (compiled is None) == (reference is None)
            assert compiled is None or compiled.hex() == reference.hex()


def test_bad_arguments_raise_instead_of_crashing():
    with pytest.raises(TypeError):
        fastrule.make_layout([1], [[1]], [(0.5,)], [1], [[1]], [(0.5, 2.0)], 4, 16)
    with pytest.raises(ValueError):
        fastrule.make_layout([1, 2], [[1]], [(0.5, 2.0)], [1], [[1]], [(0.5, 2.0)], 4, 16)
    with pytest.raises(ValueError):
        fastrule.make_layout([1], [[]], [(0.5, 2.0)], [1], [[1]], [(0.5, 2.0)], 4, 16)
    with pytest.raises(ValueError):  # a capsule of the wrong kind
        fastrule.model_time(fastrule.make_layout([1], [[1]], [(0.5, 2.0)], [1], [[1]], [(0.5, 2.0)], 4, 16), 1, 1, 0.0)
    with pytest.raises(TypeError):
        fastrule.best(((1.0, 0, (0.1,)),), [1.0])
    for malformed in ((((1.0, 0),), None), ((1.0,), None), (None, (1, [0.0], (), ((0,), 1),)),
                      (None, (1, [0.0], ((0, (0.1,)),), (((0,), 1, (0.1,), ((0,),)),)))):
        with pytest.raises(TypeError):  # checked before it is read: an error, never a crash
            fastrule.best(malformed, [1.0])
    with pytest.raises(ValueError):  # not a layout
        fastrule.stencil(None, 1, 1, True)
