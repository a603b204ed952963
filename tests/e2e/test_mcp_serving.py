"""An agent's tools served over MCP (``create_app(agent, mcp=True)``) to a real MCP client: tools that
run without approval run; a gated one is neither listed nor run, and the policy still decides."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client

from dcaf_like import Agent, ApprovalPolicy, Identity, anyone_but, argument_in, deny, require_approval, tool
from dcaf_like.testing import FakeRuntime


def _text(result) -> str:
    return "\n".join(block.text for block in result.content)


@pytest.fixture
def mcp_url(start_server, cluster):
    scaled: list[tuple[str, int, str]] = []

    @tool(requires_approval=False)
    def scale(name: str, replicas: int, namespace: str = "default") -> str:
        """Scale a deployment."""
        scaled.append((name, replicas, namespace))
        return f"{name} scaled to {replicas}"

    policy = ApprovalPolicy(
        [
            deny("kube-system belongs to the platform team", when=argument_in("namespace", "kube-system")),
            require_approval("prod needs a human", when=argument_in("namespace", "prod")),
        ]
    )
    agent = Agent(tools=[*cluster.tools(), scale], runtime=FakeRuntime(), approval_policy=policy)
    client = start_server(agent, mcp=True)
    cluster.scaled = scaled
    return str(client.base_url.join("/mcp"))


async def test_only_tools_that_run_without_approval_are_listed(mcp_url):
    async with Client(mcp_url) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}

    assert set(listed) == {"list_pods", "scale"}
    assert listed["scale"].input_schema["required"] == ["name", "replicas"]


async def test_an_open_tool_runs_and_a_gated_one_is_refused_without_running(mcp_url, cluster):
    async with Client(mcp_url) as client:
        pods = await client.call_tool("list_pods", {"namespace": "default"})
        gated = await client.call_tool("delete_pod", {"name": "web-2"})
        scaled = await client.call_tool("scale", {"name": "web", "replicas": 3})

    assert not pods.is_error
    assert "CrashLoopBackOff" in _text(pods)
    assert gated.is_error
    assert "needs a human's approval" in _text(gated)
    assert "POST /api/chat" in _text(gated)
    assert cluster.deleted == []
    assert "web-2" in cluster.pods["default"]
    assert not scaled.is_error
    assert cluster.scaled == [("web", 3, "default")]


async def test_the_policy_decides_each_call_by_its_arguments(mcp_url, cluster):
    async with Client(mcp_url) as client:
        denied = await client.call_tool(
            "scale", {"name": "coredns", "replicas": 0, "namespace": "kube-system"}
        )
        needs_human = await client.call_tool("scale", {"name": "api", "replicas": 0, "namespace": "prod"})
        invalid = await client.call_tool("scale", {"name": "web", "replicas": "many"})

    assert denied.is_error
    assert "denied by policy: kube-system belongs to the platform team" in _text(denied)
    assert needs_human.is_error
    assert "needs a human's approval" in _text(needs_human)
    assert invalid.is_error
    assert "replicas" in _text(invalid)
    assert cluster.scaled == []


def test_only_an_agent_can_be_served_over_mcp():
    from dcaf_like import create_app

    def triage(messages, context):
        return "no"

    with pytest.raises(TypeError, match="only an Agent's tools"):
        create_app(triage, mcp=True)


def test_another_agent_uses_the_served_tools_through_an_mcp_toolset_with_an_api_key(start_server, cluster):
    from dcaf_like.testing import reply, tool_call, tool_calls
    from dcaf_like.toolsets.mcp import MCPServerUnavailable, MCPToolset

    served = Agent(tools=cluster.tools(), runtime=FakeRuntime())
    base = start_server(served, mcp=True, api_keys={"ops-bot-key-0123456789": "ops-bot"}).base_url
    url = str(base.join("/mcp"))
    keyless = MCPToolset("ops", url=url, allow="*")
    remote = MCPToolset("ops", url=url, headers={"Authorization": "Bearer ops-bot-key-0123456789"}, allow="*")
    model = FakeRuntime([tool_calls(tool_call("list_pods", namespace="prod")), reply("api-1 runs.")])

    try:
        with pytest.raises(MCPServerUnavailable, match="'ops'"):
            keyless.load()
        response = Agent(tools=[remote], runtime=model).run("what runs in prod?")
    finally:
        keyless.close()
        remote.close()

    assert [t.name for t in model.requests[0].tools] == ["list_pods"]  # the gated tools are not offered
    assert response.executed_tool_calls[0].output == '{"api-1": "Running"}'


async def test_an_mcp_call_runs_as_the_api_keys_identity_and_the_policy_sees_it(start_server):
    from dcaf_like.toolsets.mcp import _http_with_headers

    @tool(requires_approval=False)
    def whoami(who: Identity | None) -> str:
        """Say who is asking."""
        return "anonymous" if who is None else who.name

    @tool(requires_approval=False)
    def scale(replicas: int) -> str:
        """Scale the web deployment."""
        return f"scaled to {replicas}"

    policy = ApprovalPolicy([deny("only the ops key may scale", when=anyone_but("ops"), tools=["scale"])])
    agent = Agent(tools=[whoami, scale], runtime=FakeRuntime(), approval_policy=policy)
    keys = {"ops-key-0123456789abcdef": "ops", "alice-key-0123456789abcdef": "alice"}
    base = start_server(agent, mcp=True, api_keys=keys).base_url
    url = str(base.join("/mcp"))

    outputs = {}
    for key, name in keys.items():
        async with Client(_http_with_headers(url, {"Authorization": f"Bearer {key}"})) as client:
            outputs[name] = (
                _text(await client.call_tool("whoami", {})),
                _text(await client.call_tool("scale", {"replicas": 3})),
            )

    assert outputs["ops"] == ("ops", "scaled to 3")
    assert outputs["alice"][0] == "alice"
    assert "denied by policy: only the ops key may scale" in outputs["alice"][1]


async def test_images_and_files_a_proxied_tool_returns_are_served_on_as_mcp_content(start_server, tmp_path):
    import base64
    import sys
    from pathlib import Path

    from dcaf_like.toolsets.mcp import MCPToolset

    tests = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(tests))
    from mcp_server import ARCHIVE, GRAPH

    command = [
        sys.executable,
        str(tests / "mcp_server.py"),
        "--record",
        str(tmp_path / "calls.jsonl"),
        "--media",
    ]
    upstream = MCPToolset("k8s", command=command, allow=["cpu_graph", "logs_archive"])
    try:
        client = start_server(Agent(tools=[upstream], runtime=FakeRuntime()), mcp=True)
        async with Client(str(client.base_url.join("/mcp"))) as mcp:
            graph = await mcp.call_tool("cpu_graph", {"name": "web-2"})
            logs = await mcp.call_tool("logs_archive", {"name": "web-2"})
    finally:
        upstream.close()

    text, image = graph.content
    assert (text.type, text.text) == ("text", "CPU of web-2 over the last hour")
    assert (image.type, image.mime_type, base64.b64decode(image.data)) == ("image", "image/png", GRAPH)
    [resource] = logs.content  # a file and no text
    assert resource.type == "resource"
    assert (str(resource.resource.uri), resource.resource.mime_type) == (
        "attachment:web-2.log.gz",
        "application/gzip",
    )
    assert base64.b64decode(resource.resource.blob) == ARCHIVE
