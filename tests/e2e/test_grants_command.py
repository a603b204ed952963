"""docs/approvals.md, "Grants", from the terminal: ``dcaf-like grants`` makes, lists and revokes grants
over HTTP with the caller's key, against a live server; the server judges each request as it judges
any client's, and a refusal is shown as the server says it."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
import test_grants_http as over_http

from dcaf_like.cli._remote import plain_http_warning
from dcaf_like.cli.main import main

BOB, DAVE, ask = over_http.BOB, over_http.DAVE, over_http.ask
# The agent and server of the grants' HTTP tests: bob approves and is an admin, dave only approves.
cluster, clock, server = over_http.cluster, over_http.clock, over_http.server


def grants(server: httpx.Client, key: str, *args: str) -> int:
    return main(["grants", "--url", str(server.base_url), "--api-key", key, *args])


def test_a_grant_made_from_the_terminal_approves_until_it_is_revoked_there(server, capsys):
    made = grants(
        server, BOB, "make", "restart_pod", "--requester", "alice", "--arg", "namespace=dev",
        "--duration", "600", "--reason", "the deploy",
    )  # fmt: skip
    said = capsys.readouterr().out
    assert made == 0, said
    grant_id = re.search(r"Made (g_\w+) \[active until 1970-01-12 13:56 UTC\]", said)
    assert grant_id is not None, said
    assert "granted by bob: the deploy" in said

    assert ask(server, "restart web-1 dev")["tool_calls"] == []  # ran at once, by the grant

    assert grants(server, BOB, "list") == 0
    assert grant_id[1] in capsys.readouterr().out

    assert grants(server, BOB, "revoke", grant_id[1]) == 0
    assert f"Revoked {grant_id[1]} [revoked by bob]" in capsys.readouterr().out
    [waiting] = ask(server, "restart web-2 dev")["tool_calls"]  # waits for a person again
    assert waiting["execute"] is False

    assert grants(server, BOB, "list") == 0
    assert capsys.readouterr().out.strip() == "No grants in force."
    assert grants(server, BOB, "list", "--all") == 0
    assert grant_id[1] in capsys.readouterr().out


def test_what_the_server_refuses_is_said_as_it_says_it(server, capsys):
    """dave approves but is no admin: a grant for alice's calls is refused, nothing is made."""
    made = grants(server, DAVE, "make", "restart_pod", "--requester", "alice", "--duration", "600")

    assert made == 2
    assert "Refused: 403" in capsys.readouterr().out
    assert grants(server, BOB, "list", "--all") == 0
    assert capsys.readouterr().out.strip() == "No grants."
    assert grants(server, BOB, "revoke", "g_unknown") == 2
    assert "Refused: 404 grant_not_found" in capsys.readouterr().out


def test_an_argument_that_is_not_key_equals_value_is_refused_before_anything_is_sent(server, capsys):
    made = grants(
        server, BOB, "make", "restart_pod", "--requester", "alice", "--arg", "dev", "--duration", "60"
    )

    assert made == 2
    assert "--arg takes KEY=VALUE, not 'dev'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "key", "warned"),
    [
        ("http://ops.example.com:8000", "k", True),
        ("http://10.0.0.5:8000", "k", True),
        ("https://ops.example.com", "k", False),
        ("http://127.0.0.1:8000", "k", False),
        ("http://localhost:8000", "k", False),
        ("http://[::1]:8000", "k", False),
        ("http://ops.example.com:8000", None, False),
    ],
)
def test_a_key_sent_over_plain_http_to_another_host_is_warned_about(url: str, key: Any, warned: bool):
    """docs/approvals.md, "Grants" and "One inbox": the commands warn, and still send (a trusted
    network may be the operator's choice)."""
    assert (plain_http_warning(url, key) is not None) is warned


def test_the_command_warns_on_stderr_and_never_prints_the_key(server, capsys, monkeypatch):
    monkeypatch.setenv("DCAF_API_KEY", BOB)
    url = str(server.base_url).replace("127.0.0.1", "localhost")
    assert main(["grants", "--url", url, "list"]) == 0
    out = capsys.readouterr()
    assert "warning" not in out.err
    assert BOB not in out.out + out.err
