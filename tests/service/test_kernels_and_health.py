"""GET /kernels and GET /healthz."""
from __future__ import annotations

from fastapi.testclient import TestClient

from service.app import create_app


def test_kernels_lists_every_registered_variant_with_its_seed(client):
    body = client.get("/kernels").json()
    names = [entry["name"] for entry in body]
    assert "torch_softmax" in names and len(names) == len(set(names))
    torch_entry = next(entry for entry in body if entry["name"] == "torch_softmax")
    assert torch_entry["seed"] == "torch" and torch_entry["configs"] == [{}]
    assert set(torch_entry["dtypes"]) == {"fp32", "fp16", "bf16"}
    assert all(entry["available"] is None for entry in body)  # not checked: the server needs no GPU


def test_kernels_say_what_a_gpu_needs_and_which_models_run_them(client):
    """The needs are the configs' requirements, the models those of gpu_models.GPU_MODELS that meet
    them by gpu_models.runs_on, the rule the lookup offers candidates by."""
    from autotuner.lookup.gpu_models import GPU_MODELS, runs_on
    from kernels import all_variants

    body = {entry["name"]: entry for entry in client.get("/kernels").json()}
    assert body["torch_softmax"]["needs"]["min_arch"] == 50 and len(body["torch_softmax"]["runs_on"]) == len(GPU_MODELS)
    cluster = body["cuda_cluster_split"]
    assert cluster["needs"]["min_arch"] == 90 and cluster["needs"]["cluster_sizes"] == [2, 4, 8, 16]
    assert "a100" not in cluster["runs_on"] and {"h100", "h200", "b200"} <= set(cluster["runs_on"])
    assert "b200" not in cluster["runs_every_config_on"]  # 16-block clusters: Hopper only (max 8 on B200)
    extreme = body["cuda_smem_cache_extreme"]
    assert extreme["needs"]["smem_per_block_max"] > 163 * 1024 and "a100" not in extreme["runs_on"]
    for variant in all_variants():
        needs = [variant.requirements(c, d) for c in variant.all_configs() for d in variant.dtypes]
        expected = sorted((k for k, spec in GPU_MODELS.items() if any(runs_on(r, spec) for r in needs)))
        assert sorted(body[variant.name]["runs_on"]) == expected, variant.name


def test_healthz_reports_database_and_tables(client, auth):
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    assert body["database"]["reachable"] is True and body["database"]["backend"] == "sqlite"
    assert body["database"].get("url") is None  # no file path for an unauthenticated caller
    assert client.get("/healthz", headers=auth).json()["database"]["url"].startswith("sqlite:///")
    assert (body["tables"]["count"], body["tables"]["from_database"], body["tables"]["shipped"]) == (4, 4, 0)
    assert body["tables"]["last_error"] is None and body["tables"]["loaded_at"].endswith("Z")


def test_healthz_is_degraded_but_answers_when_the_database_is_gone(settings, tmp_path, auth):
    from sqlalchemy import create_engine

    app = create_app(settings)
    with TestClient(app) as client:
        app.state.engine = create_engine(f"sqlite:///{tmp_path / 'missing-dir' / 'x.sqlite'}")
        body = client.get("/healthz").json()
        detailed = client.get("/healthz", headers=auth).json()
        dispatch = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100"})
    assert body["status"] == "degraded" and body["database"]["reachable"] is False
    assert body["database"]["error"] == "OperationalError (details only with an upload token)"
    assert "unable to open database file" in detailed["database"]["error"]  # the driver's text: token holders only
    assert dispatch.status_code == 200  # answered from the tables already loaded
