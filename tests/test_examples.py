"""Every example runs, and does what its docstring says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import k8s_agent  # noqa: E402
import triage_function  # noqa: E402


def run_example(*args: str, stdin: str = "", example: str = "k8s_agent.py") -> str:
    """The example's output, run with this checkout's dcaf_like (first on its path)."""
    path = os.pathsep.join(filter(None, [str(EXAMPLES.parent), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / example), *args],
        env={**os.environ, "PYTHONPATH": path},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_the_walkthrough_deletes_the_crashing_pod_once_approved():
    out = run_example("--yes")

    assert "wants to run delete_pod{'name': 'web-2', 'namespace': 'default'}" in out
    assert "pods now: {'web-1': 'Running'}" in out


def test_the_walkthrough_leaves_the_pod_when_the_operator_says_no():
    out = run_example(stdin="n\n")

    assert "I left web-2 alone" in out
    assert "the operator said no" in out
    assert "'web-2': 'CrashLoopBackOff'" in out


def test_the_walkthrough_takes_the_end_of_input_as_a_no_and_says_so():
    out = run_example(stdin="")  # no terminal: stdin is closed

    assert "no answer (end of input): rejected" in out
    assert "'web-2': 'CrashLoopBackOff'" in out


def test_the_demo_client_takes_the_end_of_input_as_a_no(capsys):
    import ops_demo

    def closed(_prompt: str) -> str:
        raise EOFError

    assert ops_demo._confirm(closed, "  approve? [y/N] ") is False
    assert ops_demo._confirm(lambda _prompt: "y", "  approve? [y/N] ") is True
    assert "no answer (end of input): rejected" in capsys.readouterr().out


def test_the_example_agent_refuses_to_touch_kube_system():
    from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

    cluster = k8s_agent.Cluster()
    runtime = FakeRuntime(
        [tool_calls(tool_call("delete_pod", name="coredns", namespace="kube-system")), reply("I may not.")]
    )
    response = k8s_agent.build_agent(runtime, cluster).run("delete coredns")

    assert not response.has_pending_approvals
    assert "platform team" in response.rejected_tool_calls[0].rejection_reason
    assert "coredns" in cluster.pods["kube-system"]


def test_the_example_delete_pod_previews_the_pod_as_it_is_and_is_rechecked_before_it_runs():
    """docs/approvals.md, "What the approver sees": the example operations tools have previews."""
    import json

    from dcaf_like import ToolDecision
    from dcaf_like.testing import FakeRuntime, reply, tool_call

    cluster = k8s_agent.Cluster()
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), reply("Deleted.")])
    agent = k8s_agent.build_agent(runtime, cluster)
    proposed = agent.run("delete web-2")
    [call] = proposed.pending_tool_calls

    assert (call.risk, call.preview_kind) == ("reversible", "json")
    assert json.loads(call.preview or "") == {
        "pod": "default/web-2",
        "status now": "CrashLoopBackOff",
        "node": "node-b",
        "images": ["nginx:1.27"],
        "owner": "ReplicaSet web-6b7c9 (of Deployment web)",
        "after": "deleted; its owner, ReplicaSet web-6b7c9 (of Deployment web), starts a replacement",
    }
    cluster.pods["default"]["web-2"] = "Running"  # it recovered after the approver looked
    again = agent.decide(
        proposed.conversation_id, [ToolDecision(call.id, True, preview_digest=call.preview_digest)]
    )
    assert [c.id for c in again.pending_tool_calls] == [call.id]
    assert "web-2" in cluster.pods["default"]


def test_the_example_delete_pod_says_a_pod_without_an_owner_will_not_come_back():
    """docs/approvals.md, "What the approver sees": a pod no controller owns is gone once deleted."""
    import json

    from dcaf_like.testing import FakeRuntime, tool_call

    runtime = FakeRuntime([tool_call("delete_pod", name="worker-1", namespace="prod")])
    [call] = k8s_agent.build_agent(runtime).run("delete worker-1").pending_tool_calls

    shown = json.loads(call.preview or "")
    assert (shown["owner"], shown["after"]) == ("none", "deleted; no owner: it will not come back")
    assert (shown["node"], shown["images"]) == ("node-d", ["worker:0.9"])


def test_the_example_delete_pod_of_a_pod_that_does_not_exist_has_no_preview_and_says_why():
    from dcaf_like.testing import FakeRuntime, tool_call

    runtime = FakeRuntime([tool_call("delete_pod", name="web-9", namespace="prod")])
    [call] = k8s_agent.build_agent(runtime).run("delete web-9").pending_tool_calls

    assert call.preview is None
    assert "no pod web-9 in prod" in (call.preview_error or "")


def test_the_example_scale_deployment_previews_replicas_before_and_after_and_is_rechecked():
    """docs/approvals.md, "What the approver sees": scale_deployment shows the replicas as a diff."""
    from dcaf_like import ToolDecision
    from dcaf_like.testing import FakeRuntime, reply, tool_call

    cluster = k8s_agent.Cluster()
    runtime = FakeRuntime(
        [tool_call("scale_deployment", name="web", replicas=3, namespace="prod"), reply("Done.")]
    )
    agent = k8s_agent.build_agent(runtime, cluster)
    proposed = agent.run("scale web in prod to 3")
    [call] = proposed.pending_tool_calls

    assert (call.risk, call.preview_kind) == ("reversible", "diff")
    assert call.preview == (
        "--- deployment prod/web\n+++ deployment prod/web\n@@ spec @@\n-replicas: 1\n+replicas: 3\n"
    )
    cluster.deployments["prod"]["web"] = 2  # someone scaled it after the approver looked
    again = agent.decide(
        proposed.conversation_id, [ToolDecision(call.id, True, preview_digest=call.preview_digest)]
    )
    [waiting] = again.pending_tool_calls
    assert "-replicas: 2\n+replicas: 3" in (waiting.preview or "")
    assert cluster.deployments["prod"]["web"] == 2
    agent.decide(
        proposed.conversation_id, [ToolDecision(call.id, True, preview_digest=waiting.preview_digest)]
    )
    assert cluster.deployments["prod"]["web"] == 3


def test_the_example_agent_refuses_to_scale_in_kube_system():
    from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

    cluster = k8s_agent.Cluster()
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("scale_deployment", name="coredns", replicas=0, namespace="kube-system")),
            reply("I may not."),
        ]
    )
    response = k8s_agent.build_agent(runtime, cluster).run("stop coredns")

    assert "platform team" in response.rejected_tool_calls[0].rejection_reason
    assert cluster.deployments["kube-system"]["coredns"] == 1


def test_the_walkthrough_shows_the_approver_the_pod_its_owner_and_the_risk_before_asking():
    """docs/approvals.md, "What the approver sees": the walkthrough's approver reads the preview."""
    out = run_example(stdin="n\n")

    asked = out.split("approve? [y/N]")[0]
    assert "risk: reversible" in asked
    assert '"pod": "default/web-2"' in asked
    assert '"node": "node-b"' in asked
    assert '"owner": "ReplicaSet web-6b7c9 (of Deployment web)"' in asked


def test_the_demo_client_shows_the_preview_laid_out_or_why_there_is_none():
    import json

    import ops_demo

    preview = json.dumps({"pod": "prod/worker-1", "after": "deleted; no owner: it will not come back"})
    shown = ops_demo.shown_preview({"preview": preview, "preview_kind": "json", "preview_digest": "d"})
    failed = ops_demo.shown_preview({"preview": None, "preview_error": "no pod web-9 in prod"})

    assert shown.splitlines() == [
        "    {",
        '      "pod": "prod/worker-1",',
        '      "after": "deleted; no owner: it will not come back"',
        "    }",
    ]
    assert failed == "    (no preview: no pod web-9 in prod)"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_every_example_has_a_docstring_saying_how_to_run_it(path):
    assert "python examples/" in path.read_text().split('"""')[1]


def test_the_triage_function_answers_from_its_runbook_and_counts_turns():
    from dcaf_like import FunctionAgent

    agent = FunctionAgent(triage_function.triage)
    known = agent.run("ImagePullBackOff on api-1", platform_context={"tenant_name": "prod"})
    unknown = agent.run("the disk is full", session={"turns": 4})

    assert known.text.startswith("First step in prod: Check the image tag exists")
    assert known.session == {"turns": 1}
    assert "crashloopbackoff" in unknown.text
    assert unknown.session == {"turns": 5}


def test_every_runtime_runs_the_same_approval_flow():
    pytest.importorskip("agno", reason="the agno extra is not installed")
    pytest.importorskip("google.adk", reason="the adk extra is not installed")
    pytest.importorskip("langchain_aws", reason="langchain-aws is a dev dependency")
    import every_runtime

    rows = every_runtime.main()

    assert [r["runtime"] for r in rows] == [
        "OpenAIRuntime",
        "BedrockRuntime",
        "LangChain ChatOpenAI",
        "LangChain ChatBedrockConverse",
        "Agno OpenAILike",
        "ADK Gemini",
    ]
    for row in rows:
        assert row["waited for approval"], row
        assert row["ran once when approved"], row
        assert row["answer"] == "Deleted web-2.", row


def run_a2a_example(*args: str, stdin: str = "") -> str:
    pytest.importorskip("a2a.client", reason="the a2a extra is not installed")
    return run_example(*args, stdin=stdin, example="a2a_orchestrator.py")


def test_the_a2a_orchestrator_shows_its_user_the_remote_call_and_it_runs_once_approved():
    out = run_a2a_example("--yes")

    assert "remote agent: k8s (list_pods, delete_pod)" in out
    assert "the k8s agent wants to run delete_pod{'name': 'web-2'}" in out
    assert "orchestrator: k8s: Deleted web-2." in out
    assert "pods now: {'web-1': 'Running'}" in out


def test_the_a2a_orchestrator_leaves_the_pod_when_its_user_says_no():
    out = run_a2a_example(stdin="n\n")

    assert "orchestrator: Nothing was deleted." in out
    assert "'web-2': 'CrashLoopBackOff'" in out


def test_the_mcp_example_deletes_through_the_mcp_server_only_once_approved():
    pytest.importorskip("mcp", reason="the mcp extra is not installed")

    approved = run_example("--yes", example="mcp_agent.py")
    refused = run_example(stdin="n\n", example="mcp_agent.py")

    assert "ran list_pods{} -> " in approved  # allow-listed: ran at once
    assert "wants to run delete_pod{'name': 'web-2', 'namespace': 'default'}" in approved
    assert "ran delete_pod{'name': 'web-2', 'namespace': 'default'} -> pod \"web-2\" deleted" in approved
    assert 'pods now: {"web-1": "Running"}' in approved
    assert "ran delete_pod" not in refused
    assert '"web-2": "CrashLoopBackOff"}' in refused.split("pods now:")[1]


def test_the_command_agent_runs_each_approved_kubectl_command_against_the_fake_kubectl():
    out = run_example("--yes", example="command_agent.py")

    assert "the agent wants to run: $ kubectl get pods -n default" in out
    assert "web-2   CrashLoopBackOff" in out  # the fake kubectl's own output, back in executed_cmds
    assert "failed: sh -c 'kubectl delete pod web-2'" in out
    assert "program 'sh' is not allowed; the allowed programs are: kubectl" in out
    assert 'pod "web-2" deleted' in out
    assert "pods now: ['web-1']" in out


def test_the_command_agent_shows_the_dry_run_of_a_deletion_before_asking():
    """docs/approvals.md, "A command's dry run": the example's allow-list declares kubectl's dry run,
    so the approver of the deletion reads what it would remove; a listing has none, and says so."""
    out = run_example(stdin="y\nn\n", example="command_agent.py")

    listing, deletion = out.split("the agent wants to run: $ ")[1:3]
    assert "(no preview: NoDryRun: this command has no dry run" in listing
    assert deletion.startswith("kubectl delete pod web-2 -n default\n  its dry run says:\n")
    assert "    kind: Pod\n    metadata:\n      name: web-2\n" in deletion
    assert "phase: CrashLoopBackOff" in deletion
    assert "pods now: ['web-1', 'web-2']" in out  # the dry run deleted nothing, and the no was a no


def test_the_command_agent_runs_nothing_the_operator_rejects():
    out = run_example(stdin="y\nn\n", example="command_agent.py")

    assert "executed: kubectl get pods -n default" in out
    assert "executed: kubectl delete" not in out
    assert "I left the cluster alone (Not run. Rejected: the operator said no)" in out
    assert "pods now: ['web-1', 'web-2']" in out


def test_the_fake_kubectl_is_shipped_executable_with_the_example():
    kubectl = EXAMPLES / "bin" / "kubectl"

    assert kubectl.stat().st_mode & 0o111
    assert "command_agent.py" in kubectl.read_text()


def test_the_audit_hook_appends_each_tool_the_agent_ran_as_a_json_line(tmp_path):
    import json
    from datetime import UTC, datetime

    from audit_hook import AuditFile

    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool(requires_approval=False, secret=["token"])
    def rotate_key(service: str, token: str) -> str:
        """Rotate a service's key."""
        return f"{service} rotated"

    @tool(requires_approval=False)
    def broken(name: str) -> str:
        """Always fails."""
        raise RuntimeError("the API said no")

    audit = tmp_path / "tools.jsonl"
    clock = lambda: datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # noqa: E731
    model = FakeRuntime(
        [tool_call("rotate_key", service="db", token="hunter2hunter2"), tool_call("broken", name="x"), "done"]
    )
    agent = Agent(tools=[rotate_key, broken], runtime=model, hooks=[AuditFile(audit, clock=clock)])

    response = agent.run("rotate the db key")

    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(line["tool"], line["status"]) for line in lines] == [
        ("rotate_key", "executed"),
        ("broken", "failed"),
    ]
    assert lines[0]["arguments"] == {"service": "db", "token": "***"}  # a secret never reaches the file
    assert "hunter2" not in audit.read_text()
    assert lines[0]["at"] == "2026-11-24T10:00:00+00:00"
    assert lines[0]["conversation_id"] == response.conversation_id
    assert lines[0]["decided_by"] == "policy"
    assert "the API said no" in lines[1]["error"]


def test_the_audit_example_runs_and_records_who_approved(tmp_path):
    import json

    out = run_example(str(tmp_path / "a.jsonl"), example="audit_hook.py")

    [line] = [json.loads(text) for text in out.splitlines()]
    assert (line["tool"], line["decided_by"], line["status"]) == ("delete_pod", "olga", "executed")


def test_business_hours_refuse_an_approved_tool_at_night_and_let_it_run_by_day():
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from business_hours_hook import BusinessHours

    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    ran: list[str] = []

    @tool
    def restart(name: str) -> str:
        """Restart a deployment."""
        ran.append(name)
        return f"{name} restarted"

    def agent_at(when: datetime) -> Agent:
        hours = BusinessHours(zone="Europe/Paris", clock=lambda zone: when.astimezone(zone))
        model = FakeRuntime([tool_call("restart", name="web"), "ok"])
        return Agent(tools=[restart], runtime=model, hooks=[hours])

    paris = ZoneInfo("Europe/Paris")
    sunday_night = agent_at(datetime(2026, 11, 29, 3, 0, tzinfo=paris))
    tuesday_morning = agent_at(datetime(2026, 11, 24, 10, 30, tzinfo=paris))

    night = sunday_night.run("restart web")
    refused = sunday_night.approve(night.conversation_id, night.pending_tool_calls[0].id, user="olga")
    day = tuesday_morning.run("restart web")
    allowed = tuesday_morning.approve(day.conversation_id, day.pending_tool_calls[0].id, user="olga")

    [call] = refused.executed_tool_calls
    assert call.status == "failed"
    assert call.error == (
        "not run: refused by the hook 'business_hours': outside business hours "
        "(Mon Tue Wed Thu Fri 09:00-17:00 Europe/Paris); it is Sun 03:00 there"
    )
    assert [c.status for c in allowed.executed_tool_calls] == ["executed"]
    assert ran == ["web"]  # only by day, though a human approved both
    model_read = sunday_night.runtime.requests[-1].messages[-1]  # type: ignore[attr-defined]
    assert "refused by the hook 'business_hours'" in model_read.content


def test_business_hours_let_the_tools_named_always_through():
    from datetime import UTC, datetime

    from business_hours_hook import BusinessHours

    from dcaf_like.application.hooks import ToolCallInfo, hook_context

    saturday = BusinessHours(always={"list_pods"}, clock=lambda zone: datetime(2026, 11, 28, 12, tzinfo=UTC))
    context = hook_context("agent", "conv_1", {})

    assert saturday.before_tool(context, ToolCallInfo("tc_1", "list_pods", "{}", "approved")) is None
    assert saturday.before_tool(context, ToolCallInfo("tc_2", "delete_pod", "{}", "approved")) is not None
