"""Schema-driven fuzzing of the HTTP API (schemathesis against the server's own OpenAPI
document): whatever the generated request, the real server answers without a 5xx, keeps
answering ``/healthz`` and stays alive. Bounded for the suite: a fixed seed
(``derandomize``) and ``TURBDB_FUZZ_EXAMPLES`` examples per operation (default 15); ``make
fuzz`` runs many more."""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from servicekit import FULL

EXAMPLES = int(os.environ.get("TURBDB_FUZZ_EXAMPLES", "15"))


@pytest.fixture(scope="session")
def api_schema(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_server_error(case, server):
    response = case.call(headers={"Authorization": f"Bearer {FULL}"}, timeout=30)
    # 503 is the engine's or the admission queue's "busy, retry": a refusal, not a failure.
    assert response.status_code < 500 or response.status_code == 503, \
        f"{case.method} {case.formatted_path} {case.query} → {response.status_code}: {response.text[:300]}"
    assert server.alive()
