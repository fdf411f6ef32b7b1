"""Every error is a JSON object with a message; OpenAPI and its docs page are served."""
from __future__ import annotations


def test_unknown_path_and_wrong_method_are_json(client):
    missing = client.get("/nowhere")
    assert missing.status_code == 404 and missing.json()["message"] == "Not Found"
    wrong = client.delete("/dispatch")
    assert wrong.status_code == 405 and wrong.json()["message"] == "Method Not Allowed"


def test_validation_errors_keep_the_detail_and_add_a_message(client):
    body = client.get("/dispatch", params={"m": "x", "n": -1, "dtype": "bf16", "gpu": "h100"}).json()
    assert body["message"] == ("query parameter 'm': Input should be a valid integer, unable to parse string as an "
                               "integer (got 'x'); query parameter 'n': Input should be greater than or equal to 1 (got '-1')")
    assert [error["loc"] for error in body["detail"]] == [["query", "m"], ["query", "n"]]


def test_an_unexpected_failure_is_a_json_500_without_internals(settings, monkeypatch):
    from fastapi.testclient import TestClient

    from service.app import create_app

    def broken(*_args, **_kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("service.routes.measurements.search_measurements", broken)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.get("/measurements")
    assert response.status_code == 500
    assert response.json() == {"message": "internal error (RuntimeError); the server log has the details"}


def test_openapi_documents_every_endpoint_and_the_upload_document(client):
    schema = client.get("/openapi.json").json()
    assert {"/dispatch", "/gpus", "/tables/{gpu}/{dtype}", "/kernels", "/measurements", "/healthz", "/runs", "/"} <= set(schema["paths"])
    upload = schema["paths"]["/runs"]["post"]
    assert upload["requestBody"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ExchangeDocument"
    assert {"ExchangeDocument", "RunRecord", "MeasurementRecord", "ErrorBody"} <= set(schema["components"]["schemas"])
    assert upload["security"] == [{"HTTPBearer": []}]
    dispatch = {p["name"]: p for p in schema["paths"]["/dispatch"]["get"]["parameters"]}
    assert dispatch["m"]["schema"]["minimum"] == 0 and dispatch["m"]["schema"]["maximum"] == 2**31 - 1
    assert "half" in dispatch["dtype"]["schema"]["enum"]
    assert client.get("/docs").status_code == 200
