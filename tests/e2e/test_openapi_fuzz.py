"""Schemathesis generates requests from the app's own OpenAPI and checks every answer: no 5xx, the
documented status codes, content types and error bodies, and malformed data refused with a 4xx.

`positive_data_acceptance` is left out on purpose: some schema-valid bodies are refused by rules a JSON
schema cannot express (the last message must be the user's; a turn must say or decide something), with
a 400 that names the field. Those rules have their own tests in test_errors_http.py.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks

from dcaf_like import Agent, create_app, tool
from dcaf_like.testing import FakeRuntime


@tool(editable=True)
def delete_pod(name: str, namespace: str = "default") -> str:
    """Delete a pod."""
    return f'pod "{name}" deleted'


app = create_app(Agent(tools=[delete_pod], runtime=FakeRuntime(["ok"] * 100_000)), max_body_bytes=64_000)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_makes_the_server_fail_or_break_its_contract(case):
    case.call_and_validate(excluded_checks=[checks.positive_data_acceptance])


def test_the_turn_routes_document_their_body_as_chat_request():
    document = app.openapi()
    schemas = document["components"]["schemas"]

    for path in ("/api/chat", "/api/chat-stream"):
        body = document["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ChatRequest"}
    assert schemas["ChatRequest"]["required"] == ["messages"]
    message_ref = schemas["ChatRequest"]["properties"]["messages"]["items"]["$ref"]
    assert message_ref.removeprefix("#/components/schemas/") in schemas
