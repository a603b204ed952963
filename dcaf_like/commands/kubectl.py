"""kubectl's dry run: the server-side dry run of a kubectl command that changes something, made
only where it is safe to run before anyone approved anything (docs/approvals.md, "A command's dry
run"). Declare it on a runner's allow-list: ``LocalCommandRunner(allow=[Program("kubectl",
dry_run=kubectl_dry_run)])``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

#: kubectl's commands that take ``--dry-run=server``: the API server checks and renders the change
#: and keeps nothing.
KUBECTL_DRY_RUNS = frozenset(
    {"annotate", "apply", "create", "delete", "label", "patch", "replace", "scale", "set"}
)
#: Flags a dry run is never made with, before a human approved anything: another server, cluster,
#: identity or credentials; raw requests; a dry run of the model's own; the end of the flags (after
#: ``--`` the dry run would be an argument, and the command would run for real); files kubectl would
#: write (logs, profiles, caches) or a kustomization it would build (which may fetch remote bases).
_NO_DRY_RUN_WITH = frozenset(
    {
        "--",
        "--dry-run",
        "--raw",
        "--log-file",
        "--log-dir",
        "--profile",
        "--profile-output",
        "--cache-dir",
        "-k",
        "--kustomize",
        "--server",
        "--kubeconfig",
        "--context",
        "--cluster",
        "--user",
        "--token",
        "--as",
        "--as-group",
        "--as-uid",
        "--username",
        "--password",
        "--certificate-authority",
        "--client-certificate",
        "--client-key",
        "--insecure-skip-tls-verify",
        "--tls-server-name",
    }
)


def kubectl_dry_run(argv: Sequence[str]) -> list[str] | None:
    """The server-side dry run of a kubectl command that changes something (``kubectl <command> ...
    --dry-run=server -o yaml``), or None when the command has none or it cannot be made safely: a
    command not in :data:`KUBECTL_DRY_RUNS` (or after a global flag), a flag of
    :data:`_NO_DRY_RUN_WITH`, ``-s`` (the server), anything by URL (kubectl would fetch it), or a
    manifest (``-f``) outside the runner's folder: an absolute path, or one through ``..`` (its
    content could come back in the preview's error, to someone who approved nothing)."""
    if len(argv) < 2 or PurePath(argv[0]).name != "kubectl" or argv[1] not in KUBECTL_DRY_RUNS:
        return None
    arguments = list(argv[2:])
    for n, argument in enumerate(arguments):
        flag = argument.split("=", 1)[0]
        if flag in _NO_DRY_RUN_WITH or "://" in argument:
            return None
        short = argument.startswith("-") and not argument.startswith("--")
        if short and argument[1:2] in ("s", "k"):
            return None
        manifest = _manifest(argument, arguments[n + 1] if n + 1 < len(arguments) else "")
        if manifest is not None and (PurePath(manifest).is_absolute() or ".." in PurePath(manifest).parts):
            return None
    return [*argv, "--dry-run=server", "-o", "yaml"]


def _manifest(argument: str, following: str) -> str | None:
    """The file `argument` names after ``-f`` / ``--filename`` (in any of their forms), else None."""
    if argument in ("-f", "--filename"):
        return following
    if argument.startswith("--filename="):
        return argument.removeprefix("--filename=")
    if argument.startswith("-f") and not argument.startswith("--"):
        return argument[2:].removeprefix("=")
    return None
