"""Schema-driven fuzzing of the HTTP API (schemathesis against the server's own OpenAPI
document): whatever the generated request, the real server answers without a 5xx, keeps
answering ``/healthz`` and stays alive. Bounded for the suite: a fixed seed
(``derandomize``) and ``TURBDB_FUZZ_EXAMPLES`` examples per operation (default 15); ``make
fuzz`` runs many more."""

import os

import schemathesis
from hypothesis import HealthCheck, given, settings

from servicekit import FULL

EXAMPLES = int(os.environ.get("TURBDB_FUZZ_EXAMPLES", "15"))


def test_no_generated_request_gets_a_server_error(server):
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8, "the OpenAPI document lists the API's operations"
    for operation in operations:

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def no_server_error(case):
            response = case.call(headers={"Authorization": f"Bearer {FULL}"}, timeout=30)
            # 503 is the engine's or the admission queue's "busy, retry": a refusal, not a failure.
            assert response.status_code < 500 or response.status_code == 503, \
                f"{case.method} {case.formatted_path} {case.query} -> {response.status_code}: {response.text[:300]}"

        no_server_error()
        assert server.alive(), f"the server stopped answering after {operation.label}"
