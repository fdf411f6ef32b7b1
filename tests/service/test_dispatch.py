"""GET /dispatch through the test client: answers, aliases, defaults, validation and fallbacks."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from autotuner.fit.index import index_document
from db import queries
from db.engine import make_engine, transaction
from service.app import create_app
from tests.service.fixture_data import MS, NS, VARIANTS, table_payload


def fastest(m: int, n: int, dtype: str) -> str:
    times = {v.name: v.time_us(m, n, dtype) for v in VARIANTS}
    return min((t, name) for name, t in times.items() if t is not None)[1]


def test_dispatch_answers_a_measured_shape_with_its_fastest_candidate(client):
    for m, n in [(MS[0], NS[0]), (MS[3], NS[5]), (MS[-1], NS[-1])]:
        body = client.get("/dispatch", params={"m": m, "n": n, "dtype": "bf16", "gpu": "h100"}).json()
        assert body["variant"] == fastest(m, n, "bf16")
        assert body["exact"] is True and body["source"] == "table"
        assert (body["m"], body["n"], body["dtype"], body["gpu"], body["timing_method"]) == (m, n, "bf16", "h100", "cold")
        expected = next(v for v in VARIANTS if v.name == body["variant"])
        assert body["config"] == expected.config and body["config_key"] == expected.config_key
        assert body["predicted_us"] == pytest.approx(expected.time_us(m, n, "bf16"))


def test_dispatch_answers_an_unmeasured_shape_from_the_table_rule(client):
    body = client.get("/dispatch", params={"m": 3000, "n": 50257, "dtype": "bf16", "gpu": "h100"}).json()
    assert body["exact"] is False and body["source"] == "table"
    assert body["variant"] in {v.name for v in VARIANTS} and body["predicted_us"] > 0


@pytest.mark.parametrize("spelling", ["fp16", "float16", "half", "HALF", "f16", "torch.float16", " Float16 "])
def test_dispatch_accepts_dtype_aliases(client, spelling):
    response = client.get("/dispatch", params={"m": 64, "n": 4096, "dtype": spelling, "gpu": "h100"})
    assert response.status_code == 200, response.text
    assert response.json()["dtype"] == "fp16"


def test_dispatch_accepts_a_device_name_for_the_gpu(client):
    body = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "NVIDIA H100 80GB HBM3"}).json()
    assert body["gpu"] == "h100"


def test_dispatch_unknown_gpu_is_404_listing_the_known_ones(client):
    response = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "b200"})
    assert response.status_code == 404
    body = response.json()
    assert body["known_gpus"] == ["a100", "h100"]
    assert "'b200'" in body["message"] and "a100, h100" in body["message"]


def test_dispatch_known_gpu_without_that_table_is_404_naming_what_it_has(client):
    response = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "fp32", "gpu": "h100"})
    assert response.status_code == 404
    assert "no fp32/cold table" in response.json()["message"] and "bf16/cold" in response.json()["message"]
    response = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100", "timing_method": "warm"})
    assert response.status_code == 404


def test_dispatch_without_gpu_needs_a_default(client, settings):
    response = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16"})
    assert response.status_code == 422
    assert "gpu is required" in response.json()["message"]
    with TestClient(create_app(settings.model_copy(update={"default_gpu": "a100"}))) as defaulted:
        body = defaulted.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16"}).json()
        defaulted_schema = defaulted.get("/openapi.json").json()
    assert body["gpu"] == "a100"

    def gpu_parameter(schema: dict) -> dict:
        return next(p for p in schema["paths"]["/dispatch"]["get"]["parameters"] if p["name"] == "gpu")

    # the schema says what the answers do: required without a default GPU, optional with one
    required = gpu_parameter(client.get("/openapi.json").json())
    assert required["required"] is True and "no AUTOTUNER_DEFAULT_GPU" in required["description"]
    assert gpu_parameter(defaulted_schema).get("required", False) is False


@pytest.mark.parametrize("params, place", [
    ({"m": -5}, "query parameter 'm'"),
    ({"n": 0}, "query parameter 'n'"),
    ({"m": 2**31}, "query parameter 'm'"),
    ({"n": 2**40}, "query parameter 'n'"),
    ({"m": "abc"}, "query parameter 'm'"),
    ({"m": 1.5}, "query parameter 'm'"),
    ({"dtype": "int8"}, "query parameter 'dtype'"),
    ({"timing_method": "hot"}, "query parameter 'timing_method'"),
])
def test_dispatch_rejects_bad_parameters_with_a_readable_422(client, params, place):
    query = {"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100", **params}
    response = client.get("/dispatch", params=query)
    assert response.status_code == 422
    body = response.json()
    assert body["message"].startswith(place), body["message"]
    assert body["detail"] and body["detail"][0]["loc"][0] == "query"


def test_zero_rows_answer_the_one_row_kernel_at_no_cost(client):
    """M = 0 launches nothing: /dispatch answers as select_kernel does (tests/autotuner/test_select.py
    checks the three answer alike on the shipped tables)."""
    zero = client.get("/dispatch", params={"m": 0, "n": 1024, "dtype": "bf16", "gpu": "h100"})
    one = client.get("/dispatch", params={"m": 1, "n": 1024, "dtype": "bf16", "gpu": "h100"}).json()
    assert zero.status_code == 200
    assert (zero.json()["m"], zero.json()["variant"], zero.json()["predicted_us"]) == (0, one["variant"], 0.0)


def test_dispatch_requires_m_n_and_dtype(client):
    response = client.get("/dispatch", params={"gpu": "h100"})
    assert response.status_code == 422
    message = response.json()["message"]
    assert "query parameter 'm': Field required" in message and "'n'" in message and "'dtype'" in message


def test_dispatch_applies_the_configured_bounds(client, settings):
    with TestClient(create_app(settings.model_copy(update={"max_m": 1000, "max_n": 5000}))) as bounded:
        assert bounded.get("/dispatch", params={"m": 1000, "n": 5000, "dtype": "bf16", "gpu": "h100"}).status_code == 200
        response = bounded.get("/dispatch", params={"m": 1001, "n": 5000, "dtype": "bf16", "gpu": "h100"})
        assert response.status_code == 422 and "at most 1000" in response.json()["message"]
        response = bounded.get("/dispatch", params={"m": 1, "n": 5001, "dtype": "bf16", "gpu": "h100"})
        assert response.status_code == 422 and "at most 5000" in response.json()["message"]


def test_dispatch_falls_back_to_torch_when_no_candidate_admits_the_shape(settings):
    engine = make_engine(settings.database_url)
    with transaction(engine) as session:
        gpu = queries.get_or_create_gpu(session, "l40s", "NVIDIA L40S")
        payload = table_payload("l40s", "NVIDIA L40S", "fp32", run_id=1)
        warp_only = [i for i, v in enumerate(VARIANTS) if v.name == "cuda_warp_row"]
        payload["candidates"] = [payload["candidates"][i] for i in warp_only]
        for point in payload["points"]:
            point["times"] = [point["times"][i] for i in warp_only]
        payload = index_document(payload)  # the index of the table as edited
        queries.save_table(session, gpu, "fp32", "cold", payload, source_runs=[1], candidate_count=1)
    engine.dispose()
    with TestClient(create_app(settings)) as client:
        inside = client.get("/dispatch", params={"m": 64, "n": 1024, "dtype": "fp32", "gpu": "l40s"}).json()
        outside = client.get("/dispatch", params={"m": 64, "n": 5000, "dtype": "fp32", "gpu": "l40s"}).json()
    assert inside["variant"] == "cuda_warp_row" and inside["source"] == "table"
    assert (outside["variant"], outside["source"], outside["predicted_us"]) == ("torch_softmax", "fallback", None)


def test_repeated_dispatch_is_replayed_from_the_cache_with_identical_bytes(settings):
    app = create_app(settings.model_copy(update={"reload_interval_s": 3600}))
    with TestClient(app) as client:
        query = {"m": 100, "n": 5000, "dtype": "bf16", "gpu": "h100"}
        first = client.get("/dispatch", params=query)
        second = client.get("/dispatch", params=query)
        other = client.get("/dispatch", params={**query, "dtype": "fp16"})
        rejected = [client.get("/dispatch", params={**query, "m": -1}) for _ in range(2)]
    assert first.content == second.content and first.headers["content-type"] == second.headers["content-type"]
    assert other.json()["dtype"] == "fp16"
    assert [r.status_code for r in rejected] == [422, 422]  # errors are never cached
    assert app.fast_dispatch.hits == 1 and len(app.fast_dispatch) == 2


@pytest.mark.parametrize("query", [
    "m=4096&n=32000&dtype=bf16&gpu=h100",
    "m=3000&n=50257&dtype=bfloat16&gpu=NVIDIA%20H100%2080GB%20HBM3",
    "m=7&n=100&dtype=HALF&gpu=a100&timing_method=cold",
    "m=64&n=1000&dtype=torch.float16&gpu=h100&unrelated=1",
])
def test_the_fast_path_answers_exactly_as_the_route_does(settings, query):
    through_route = create_app(settings.model_copy(update={"reload_interval_s": 0}))  # a check is always due
    fast = create_app(settings.model_copy(update={"reload_interval_s": 3600}))
    with TestClient(through_route) as slow_client, TestClient(fast) as fast_client:
        expected = slow_client.get(f"/dispatch?{query}")
        answered = fast_client.get(f"/dispatch?{query}")
    assert through_route.fast_dispatch.fast_answers == 0 and fast.fast_dispatch.fast_answers == 1
    assert answered.status_code == expected.status_code == 200
    assert answered.content == expected.content
    assert answered.headers["content-type"] == expected.headers["content-type"]


def test_the_fast_path_leaves_errors_and_odd_queries_to_the_route(settings):
    app = create_app(settings.model_copy(update={"reload_interval_s": 3600}))
    with TestClient(app) as client:
        assert client.get("/dispatch?m=8&n=64&dtype=bf16&gpu=b200").json()["known_gpus"] == ["a100", "h100"]
        assert client.get("/dispatch?m=-1&n=64&dtype=bf16&gpu=h100").status_code == 422
        assert client.get("/dispatch?m=8&n=64&dtype=bf16").status_code == 422  # no default GPU
        repeated = client.get("/dispatch?m=8&m=4096&n=64&dtype=bf16&gpu=h100")
        assert repeated.status_code == 422 and "given 2 times" in repeated.json()["message"]  # never one of them
    assert app.fast_dispatch.fast_answers == 0 and len(app.fast_dispatch) == 0


def test_dispatch_normalises_dtype_and_gpu_names_once(client, monkeypatch):
    """The route normalises the names (service.params); the lookup then takes them as canonical."""
    from autotuner.lookup import select

    def refuse(*args):
        raise AssertionError(f"normalised a second time: {args}")

    monkeypatch.setattr(select, "normalize_dtype", refuse)
    monkeypatch.setattr(select, "_gpu_key", refuse)
    monkeypatch.setattr(select, "DTYPE_ALIASES", {})
    body = client.get("/dispatch", params={"m": 3000, "n": 50257, "dtype": "bfloat16", "gpu": "NVIDIA H100 80GB HBM3"}).json()
    assert (body["dtype"], body["gpu"], body["source"]) == ("bf16", "h100", "table")
