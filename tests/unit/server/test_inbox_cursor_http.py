"""A crafted inbox cursor is bad input: GET /api/approvals answers 422 naming the cursor, never 500."""

import base64

from fastapi.testclient import TestClient

from dcaf_like import Agent
from dcaf_like.server.app import create_app
from dcaf_like.testing import FakeRuntime

KEY = "k-alice-0123456789"


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_a_cursor_whose_time_is_too_large_for_a_float_is_a_422() -> None:
    app = create_app(Agent(runtime=FakeRuntime(["hi"])), api_keys={KEY: "alice"})
    client = TestClient(app, base_url="http://localhost", raise_server_exceptions=False)
    for text in ("[" + "1" * 400 + ',"a","b"]', '[1e999,"a","b"]'):
        response = client.get(
            "/api/approvals", params={"cursor": _cursor(text)}, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_cursor"
