"""Served with a store that implements only the core (get and save), the server answers turns, and
each route that needs a capability the store lacks answers 501 with a JSON body naming it
(docs/stores.md, "Writing a store"); an audit key on such a store is refused at start-up."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dcaf_like import Agent, MissingCapability, create_app
from dcaf_like.domain.trail import AuditKey
from dcaf_like.testing import FakeRuntime, reply
from tests.unit.application.test_store_capabilities import CoreStore


def client_on(store: CoreStore, **options: object) -> TestClient:
    agent = Agent(runtime=FakeRuntime([reply("hello")]), repository=store)
    return TestClient(create_app(agent, ui=False, **options))  # type: ignore[arg-type]


def test_a_turn_is_served_and_the_routes_that_need_a_capability_name_it():
    store = CoreStore()
    with client_on(store) as client:
        turn = client.post("/api/chat", json={"messages": [{"role": "user", "content": "hi"}]})
        assert turn.status_code == 200
        conversation_id = turn.json()["data"]["conversation_id"]
        assert conversation_id in store.documents

        expected = {
            ("post", f"/api/conversations/{conversation_id}/cancel"): "CancelFlags",
            ("get", "/api/conversations"): "Listing",
            ("delete", f"/api/conversations/{conversation_id}"): "Listing",
            ("get", "/api/audit"): "AuditTrail",
            ("get", "/api/audit/export"): "AuditTrail",
        }
        for (method, path), capability in expected.items():
            answer = getattr(client, method)(path)
            body = answer.json()
            assert answer.status_code == 501, (path, body)
            assert body["error"]["code"] == "missing_capability", body
            assert "CoreStore cannot" in body["error"]["message"]
            assert capability in body["error"]["message"]

        # reading one conversation needs only the core
        assert client.get(f"/api/conversations/{conversation_id}").status_code == 200
    assert conversation_id in store.documents  # the refused delete forgot nothing


def test_an_audit_key_on_a_store_without_an_audit_trail_is_refused_at_start_up():
    app = create_app(
        Agent(runtime=FakeRuntime([]), repository=CoreStore()),
        ui=False,
        audit_key=AuditKey(b"sixteen bytes or more of key"),
    )
    refused = pytest.raises(MissingCapability, match=r"CoreStore cannot keep the audit trail \(AuditTrail\)")
    with refused, TestClient(app):
        pass
