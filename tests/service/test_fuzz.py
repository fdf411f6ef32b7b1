"""Schemathesis against the app's own OpenAPI schema: whatever the schema allows (and what it does
not: schemathesis also sends negative cases), the service never answers 5xx, and its answers conform
to the documented responses. Bounded by ``max_examples`` per operation to keep CI short."""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402 - after the importorskip

from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from service.app import create_app  # noqa: E402

import os  # noqa: E402

# 40 per operation keeps this file near half a minute on the 2-core CI machine; raise it locally
# (AUTOTUNER_FUZZ_EXAMPLES=1000) for a deeper search.
MAX_EXAMPLES = int(os.environ.get("AUTOTUNER_FUZZ_EXAMPLES", "40"))


@pytest.fixture
def api_schema(settings):
    # A default GPU, so that /dispatch without one is a valid request, as the schema says it is; a long
    # reload interval, so that valid /dispatch requests take the fast path (errors still reach the route).
    fuzzed = settings.model_copy(update={"default_gpu": "h100", "reload_interval_s": 3600})
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(fuzzed))


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_answers_5xx_and_conforms_to_its_schema(case, auth):
    # The right token on every call, so that upload bodies get past authentication to validation.
    response = case.call(headers=auth)
    assert response.status_code < 500, f"{case.method} {case.formatted_path} {case.query}: {response.text[:500]}"
    # Rules between fields of an upload (a candidate index within the run's list, an 'ok' row has a
    # time) are not expressible in JSON Schema, so a schema-valid upload may rightly get 422.
    excluded = [positive_data_acceptance] if case.operation.label == "POST /runs" else []
    case.validate_response(response, excluded_checks=excluded)
