"""LocalCommandRunner: an allowed program, as an argv, never through a shell; within its time and
output limits. And the command tool that hands it approved calls."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from dcaf_like import CommandRunner, InvalidToolArguments, LocalCommandRunner, command_tool
from dcaf_like.application.command_runner import CommandFailed, CommandRefused, CommandResult, checked_argv
from dcaf_like.testing import tool_calls

PYTHON = {"python": sys.executable}


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_an_allowed_program_runs_with_its_arguments_taken_literally_by_no_shell(tmp_path):
    echo = script(tmp_path, "echo-args", 'for a in "$@"; do echo "[$a]"; done')
    runner = LocalCommandRunner(allow={"echo-args": echo})

    result = runner.run(["echo-args", "a b", "; rm -rf /", "$HOME", "*", "`id`"])

    assert result == CommandResult(0, "[a b]\n[; rm -rf /]\n[$HOME]\n[*]\n[`id`]\n")


def test_a_program_not_on_the_allow_list_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    touch = script(tmp_path, "touch-it", f"touch {marker}")
    runner = LocalCommandRunner(allow={"kubectl": touch})

    with pytest.raises(CommandRefused, match="'touch-it' is not allowed; the allowed programs are: kubectl"):
        runner.run(["touch-it"])
    with pytest.raises(CommandRefused, match="is not allowed"):
        runner.run([touch])  # a path is not the allowed name, even to the allowed executable
    assert not marker.exists()


def test_with_no_program_allowed_commands_are_off():
    with pytest.raises(CommandRefused, match="commands are off"):
        LocalCommandRunner().check(["ls"])


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ("kubectl get pods", "must be a list of strings"),
        ([], "argv is empty"),
        (["kubectl", 3], r"argv\[1\] must be a string"),
        (["kubectl", "get\0pods"], r"argv\[1\] holds a NUL"),
        (["  "], "must name a program"),
    ],
)
def test_a_malformed_argv_is_refused(argv, problem):
    with pytest.raises(CommandRefused, match=problem):
        checked_argv(argv)


def test_a_name_on_the_allow_list_is_found_on_the_runners_path(tmp_path):
    script(tmp_path, "kubectl", 'echo "kubectl $*"')
    runner = LocalCommandRunner(allow=["kubectl"], path=str(tmp_path))

    assert runner.run(["kubectl", "get", "pods"]).output == "kubectl get pods\n"


def test_a_program_that_is_not_installed_fails_with_its_name(tmp_path):
    runner = LocalCommandRunner(allow=["kubectl"], path=str(tmp_path))

    with pytest.raises(CommandFailed, match="'kubectl' was not found"):
        runner.run(["kubectl", "version"])


def test_it_runs_in_its_working_directory(tmp_path):
    runner = LocalCommandRunner(allow=PYTHON, cwd=tmp_path)

    result = runner.run(["python", "-c", "import os; print(os.getcwd())"])

    assert Path(result.output.strip()).resolve() == tmp_path.resolve()


def test_output_past_the_cap_is_cut_and_said_so():
    runner = LocalCommandRunner(allow=PYTHON, max_output=10)

    result = runner.run(["python", "-c", "print('x' * 100000)"])

    assert result == CommandResult(0, "x" * 10, truncated=True)
    assert result.text() == "xxxxxxxxxx\n[output truncated]"


def test_stderr_and_the_exit_status_are_part_of_what_the_model_reads():
    runner = LocalCommandRunner(allow=PYTHON)

    code = "import sys; print('out'); sys.stderr.write('oops\\n'); sys.exit(3)"

    result = runner.run(["python", "-c", code])

    assert result.exit_code == 3
    assert "out" in result.output
    assert "oops" in result.output
    assert result.text().endswith("[exit status 3]")


def test_a_command_past_its_time_limit_is_killed_with_what_it_wrote(tmp_path):
    runner = LocalCommandRunner(allow=PYTHON, timeout=0.5)
    code = "import time; print('started', flush=True); time.sleep(30)"

    with pytest.raises(CommandFailed, match=r"time limit of 0\.5s") as failed:
        runner.run(["python", "-c", code])

    assert failed.value.output == "started\n"


def test_the_local_runner_is_a_command_runner():
    assert isinstance(LocalCommandRunner(), CommandRunner)


def test_the_command_tool_refuses_a_program_the_runner_would_not_run_when_proposed():
    tool = command_tool(LocalCommandRunner(allow=["kubectl"]))

    assert tool.name == "run_command"
    assert tool.requires_approval
    assert "Programs you may run: kubectl." in tool.description
    assert tool.validate({"argv": ["kubectl", "get", "pods"]}) == {"argv": ["kubectl", "get", "pods"]}
    with pytest.raises(InvalidToolArguments, match="'rm' is not allowed"):
        tool.validate({"argv": ["rm", "-rf", "/"]})
    with pytest.raises(InvalidToolArguments, match="fewer than 1 items"):
        tool.validate({"argv": []})
    with pytest.raises(InvalidToolArguments):
        tool.validate({"argv": ["kubectl"], "shell": True})


def test_a_runner_of_another_kind_stands_behind_the_same_port():
    """A runner that sends commands elsewhere (here: remembers them) is used through the port alone."""

    class RecordingRunner:
        programs = ("kubectl",)

        def __init__(self) -> None:
            self.sent: list[tuple[str, ...]] = []

        def check(self, argv):
            if argv[0] not in self.programs:
                raise CommandRefused(f"{argv[0]} is not run on the remote host")

        def run(self, argv):
            self.sent.append(tuple(argv))
            return CommandResult(0, "remote: ok\n")

    runner = RecordingRunner()
    tool = command_tool(runner)

    assert tool.func(argv=["kubectl", "get", "ns"]) == "remote: ok\n"
    assert runner.sent == [("kubectl", "get", "ns")]


def test_allow_takes_names_not_paths():
    with pytest.raises(ValueError, match="not a program's name"):
        LocalCommandRunner(allow=["/usr/bin/kubectl"])
    with pytest.raises(TypeError, match="not one string"):
        LocalCommandRunner(allow="kubectl")


# -- a command's dry run (docs/approvals.md, "A command's dry run") --------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["kubectl", "delete", "pod", "web-1", "-n", "prod"],
        ["kubectl", "scale", "deployment/api", "--replicas=5"],
        ["kubectl", "apply", "-f", "manifests/api.yaml"],
        ["/usr/local/bin/kubectl", "set", "image", "deployment/api", "api=api:2"],
    ],
)
def test_a_kubectl_command_that_changes_something_has_a_server_side_dry_run(argv):
    from dcaf_like.commands import kubectl_dry_run

    assert kubectl_dry_run(argv) == [*argv, "--dry-run=server", "-o", "yaml"]


@pytest.mark.parametrize(
    "argv",
    [
        ["kubectl", "get", "pods"],  # changes nothing: nothing to dry-run
        ["kubectl", "exec", "web-1", "--", "rm", "-rf", "/"],
        ["kubectl", "delete", "pod", "web-1", "--", "--dry-run=server"],  # after --, a dry run is an argument
        ["kubectl", "delete", "pod", "web-1", "--dry-run=none"],  # the model's own dry run
        ["kubectl", "--context", "prod", "delete", "pod", "web-1"],  # a global flag first
        ["kubectl", "delete", "pod", "web-1", "--server=https://elsewhere"],
        ["kubectl", "delete", "pod", "web-1", "-shttps://elsewhere"],
        ["kubectl", "delete", "pod", "web-1", "--kubeconfig", "/tmp/theirs"],
        ["kubectl", "delete", "pod", "web-1", "--token=abc"],
        ["kubectl", "create", "--raw", "/api/v1/namespaces/prod/pods", "-f", "pod.json"],
        ["kubectl", "apply", "-f", "https://example.com/manifest.yaml"],  # kubectl would fetch it
        ["kubectl", "apply", "-f", "/etc/shadow"],  # its content could come back in the preview's error
        ["kubectl", "apply", "-f/etc/shadow"],
        ["kubectl", "apply", "--filename=../../etc/shadow"],
        ["kubectl", "apply", "-k", "overlays/prod"],  # a kustomization may fetch remote bases
        ["kubectl", "delete", "pod", "web-1", "--log-file=/etc/cron.d/x"],  # kubectl would write it
        ["helm", "uninstall", "api"],
    ],
)
def test_no_dry_run_is_made_where_it_would_not_be_safe_before_an_approval(argv):
    from dcaf_like.commands import kubectl_dry_run

    assert kubectl_dry_run(argv) is None


def test_a_proposed_command_is_previewed_by_its_dry_run_and_only_the_approval_runs_it(tmp_path):
    """The approver sees what the API server says the command would do; the command itself runs
    only once approved; a command with no dry run says so instead of a preview. Here the dry run is
    given as ``dry_run=``, asked of every command (for a runner whose allow-list declares none)."""
    from dcaf_like import Agent
    from dcaf_like.commands import kubectl_dry_run
    from dcaf_like.testing import FakeRuntime, reply, tool_call

    log = tmp_path / "kubectl.log"
    kubectl = script(tmp_path, "kubectl", f'echo "$*" >> {log}; echo "pod/web-1 deleted (plan: $*)"')
    tool = command_tool(LocalCommandRunner(allow={"kubectl": kubectl}), dry_run=kubectl_dry_run)
    script_ = [
        tool_call("run_command", argv=["kubectl", "delete", "pod", "web-1"]),
        reply("Deleted."),
        tool_call("run_command", argv=["kubectl", "get", "pods"]),
    ]
    agent = Agent(tools=[tool], runtime=FakeRuntime(script_))

    asked = agent.run("delete web-1")
    [call] = asked.pending_tool_calls
    assert "delete pod web-1 --dry-run=server -o yaml" in (call.preview or "")
    assert log.read_text().splitlines() == ["delete pod web-1 --dry-run=server -o yaml"]

    agent.approve(asked.conversation_id, call.id)
    assert log.read_text().splitlines()[-1] == "delete pod web-1"  # the approved command, as approved

    [reading] = agent.run("and the pods?", conversation_id=asked.conversation_id).pending_tool_calls
    assert reading.preview is None
    assert "has no dry run" in (reading.preview_error or "")
    assert len(log.read_text().splitlines()) == 2  # nothing ran for it


# -- a dry run declared per program on the runner's allow-list (docs/approvals.md, "A command's dry run")


def test_each_program_is_previewed_by_the_dry_run_its_entry_on_the_allow_list_declares(tmp_path):
    """kubectl declares its dry run, helm none: a kubectl command waits with what the server says it
    would do, a helm command with the reason it has no preview, and neither runs before an approval."""
    from dcaf_like import Agent
    from dcaf_like.commands import Program, kubectl_dry_run
    from dcaf_like.testing import FakeRuntime, tool_call

    log = tmp_path / "ran.log"
    kubectl = script(tmp_path, "kubectl", f'echo "kubectl $*" >> {log}; echo "pod/web-1 deleted (plan: $*)"')
    helm = script(tmp_path, "helm", f'echo "helm $*" >> {log}')
    runner = LocalCommandRunner(
        allow=[Program("kubectl", kubectl, dry_run=kubectl_dry_run), Program("helm", helm)]
    )
    script_ = [
        tool_calls(
            tool_call("run_command", argv=["kubectl", "delete", "pod", "web-1"]),
            tool_call("run_command", argv=["helm", "uninstall", "api"]),
        )
    ]
    agent = Agent(tools=[command_tool(runner)], runtime=FakeRuntime(script_))

    deleting, uninstalling = agent.run("clean up").pending_tool_calls

    assert "plan: delete pod web-1 --dry-run=server -o yaml" in (deleting.preview or "")
    assert uninstalling.preview is None
    assert "has no dry run" in (uninstalling.preview_error or "")
    assert log.read_text().splitlines() == ["kubectl delete pod web-1 --dry-run=server -o yaml"]
    assert runner.dry_run_programs == ("kubectl",)


def test_a_declared_dry_run_keeps_kubectls_safety_rules_and_runs_nothing_where_unsafe(tmp_path):
    from dcaf_like import Agent
    from dcaf_like.commands import Program, kubectl_dry_run
    from dcaf_like.testing import FakeRuntime, tool_call

    log = tmp_path / "ran.log"
    kubectl = script(tmp_path, "kubectl", f'echo "$*" >> {log}')
    runner = LocalCommandRunner(allow=[Program("kubectl", kubectl, dry_run=kubectl_dry_run)])
    proposed = ["kubectl", "--context", "prod", "delete", "pod", "web-1"]
    agent = Agent(
        tools=[command_tool(runner)], runtime=FakeRuntime([tool_call("run_command", argv=proposed)])
    )

    [call] = agent.run("delete web-1 in prod").pending_tool_calls

    assert call.preview is None
    assert "has no dry run" in (call.preview_error or "")
    assert not log.exists()  # nothing ran


def test_a_dry_run_that_would_run_another_program_is_refused_and_runs_nothing(tmp_path):
    from dcaf_like import Agent
    from dcaf_like.commands import Program
    from dcaf_like.testing import FakeRuntime, tool_call

    log = tmp_path / "ran.log"
    kubectl = script(tmp_path, "kubectl", f'echo "kubectl $*" >> {log}')
    helm = script(tmp_path, "helm", f'echo "helm $*" >> {log}')
    runner = LocalCommandRunner(
        allow=[Program("kubectl", kubectl, dry_run=lambda argv: ["helm", "list"]), Program("helm", helm)]
    )
    agent = Agent(
        tools=[command_tool(runner)],
        runtime=FakeRuntime([tool_call("run_command", argv=["kubectl", "delete", "pod", "web-1"])]),
    )

    [call] = agent.run("delete web-1").pending_tool_calls

    assert call.preview is None
    assert "the dry run of 'kubectl' runs another program, 'helm'" in (call.preview_error or "")
    assert not log.exists()


def test_a_runner_whose_allow_list_declares_no_dry_run_gives_no_preview():
    from dcaf_like.commands import Program

    assert command_tool(LocalCommandRunner(allow=["kubectl"])).preview is None
    assert command_tool(LocalCommandRunner(allow=[Program("kubectl")])).preview is None


def test_dry_runs_are_declared_on_the_allow_list_or_as_dry_run_not_both():
    from dcaf_like.commands import Program, kubectl_dry_run

    runner = LocalCommandRunner(allow=[Program("kubectl", dry_run=kubectl_dry_run)])

    with pytest.raises(ValueError, match="give them there or as dry_run=, not both"):
        command_tool(runner, dry_run=kubectl_dry_run)


def test_a_program_entry_takes_a_name_not_a_path():
    from dcaf_like.commands import Program

    with pytest.raises(ValueError, match="not a program's name"):
        LocalCommandRunner(allow=[Program("/usr/bin/kubectl")])


def test_a_command_without_a_dry_run_waits_without_a_preview_and_logs_no_failure(tmp_path, caplog):
    """docs/approvals.md, "A command's dry run": a command with no dry run is no fault. Its call says
    why it has no preview, and no tool failure is logged for it (an operator's WARNING lines are
    for what went wrong)."""
    from dcaf_like import Agent
    from dcaf_like.commands import Program, kubectl_dry_run
    from dcaf_like.testing import FakeRuntime, tool_call

    kubectl = script(tmp_path, "kubectl", "echo ran")
    runner = LocalCommandRunner(allow=[Program("kubectl", kubectl, dry_run=kubectl_dry_run)])
    agent = Agent(
        tools=[command_tool(runner)],
        runtime=FakeRuntime([tool_call("run_command", argv=["kubectl", "get", "pods"])]),
    )

    with caplog.at_level(logging.DEBUG, logger="dcaf_like"):
        [call] = agent.run("which pods?").pending_tool_calls

    assert call.preview is None
    assert "has no dry run" in (call.preview_error or "")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
