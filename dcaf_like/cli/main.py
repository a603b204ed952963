"""``dcaf-like``: the command line. ``dcaf-like serve examples/k8s_agent.py:agent --port 8000``,
``dcaf-like chat examples/k8s_agent.py:agent`` (or ``--url http://127.0.0.1:8000``)."""

from __future__ import annotations

import argparse
import getpass
import importlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from dcaf_like.application.errors import ApplicationError, MissingCapability
from dcaf_like.application.ports import GrantStore, ServedAgent
from dcaf_like.application.retention import DAY, DEFAULT_RETENTION_DAYS
from dcaf_like.helpdesk.function_agent import as_served
from dcaf_like.server.detached import SHUTDOWN_GRACE
from dcaf_like.server.middleware import DEFAULT_MAX_BODY_BYTES
from dcaf_like.server.serving import run_uvicorn, serve, settle_heap, with_bound_name
from dcaf_like.server.store_choice import DEFAULT_STORE, check_store, configured
from dcaf_like.signing import signing_key
from dcaf_like.stores import StoreConfigError, open_store, redact, store_from_environment
from dcaf_like.stores.memory import InMemoryConversationRepository


class TargetError(Exception):
    """The command line names something that cannot be served."""


def load_target(spec: str, *, factory: bool = False) -> ServedAgent:
    """``path/to/file.py:name`` or ``package.module:name``; with `factory`, ``name()`` is served."""
    location, sep, attribute = spec.rpartition(":")
    if not sep or not location or not attribute:
        raise TargetError(f"expected FILE.py:NAME or MODULE:NAME, got {spec!r}")
    module = _load_module(location)
    try:
        target = getattr(module, attribute)
    except AttributeError:
        names = sorted(n for n in vars(module) if not n.startswith("_"))
        raise TargetError(f"{location} has no {attribute!r}; it has: {', '.join(names)}") from None
    if factory:
        if not callable(target):
            raise TargetError(f"--factory: {spec} is not callable")
        target = target()
    if not callable(target) and not hasattr(target, "ahandle"):
        raise TargetError(f"{spec} is neither an Agent nor an agent function")
    if not hasattr(target, "ahandle") and not _takes_two_arguments(target):
        hint = "; if it returns the agent, did you mean --factory?" if _takes_no_arguments(target) else ""
        raise TargetError(
            f"{spec} is not an agent function: an agent function takes (messages, context){hint}"
        )
    return as_served(target)


def _takes_two_arguments(func: Any) -> bool:
    """True when `func` can be called as an agent function is, ``func(messages, context)``."""
    try:
        inspect.signature(func).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): let the first turn tell
        return True
    return True


def _takes_no_arguments(func: Any) -> bool:
    try:
        inspect.signature(func).bind()
    except (TypeError, ValueError):
        return False
    return True


def _load_module(location: str) -> Any:
    if location.endswith(".py"):
        path = Path(location)
        if not path.is_file():
            raise TargetError(f"no such file: {location}")
        name = f"_dcaf_like_target_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise TargetError(f"cannot import {location}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(location)
    except ModuleNotFoundError as exc:
        raise TargetError(f"cannot import {location}: {exc}") from exc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dcaf-like", description="Serve and operate dcaf_like agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve an agent over the HelpDesk protocol")
    run.add_argument("target", help="FILE.py:NAME or MODULE:NAME (an Agent or an agent function)")
    run.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    run.add_argument("--port", type=int, default=8000)
    run.add_argument("--factory", action="store_true", help="NAME is a function returning the agent")
    run.add_argument(
        "--store",
        default=None,
        help="where conversations live: sqlite:///PATH, redis://HOST:PORT/DB, postgresql://USER@HOST/DB, "
        "dynamodb://TABLE?region=R, memory:// (default: $DCAF_STORE, else sqlite:///dcaf_like.sqlite3)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes sharing the port; they must share a store (SQLite, Redis, PostgreSQL, "
        "DynamoDB)",
    )
    run.add_argument(
        "--retention-days",
        type=_days,
        default=DEFAULT_RETENTION_DAYS,
        help="forget a conversation this long after its last save, one waiting for approval not before its "
        f"window closes, unless the store URL sets ttl= (default: {DEFAULT_RETENTION_DAYS}; 0 keeps all)",
    )
    run.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    run.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="a Host name the server answers for, besides loopback's and its own address (repeatable; "
        "name, name:port, *.domain, or * for any; default: $DCAF_ALLOWED_HOSTS)",
    )
    run.add_argument(
        "--allowed-origin",
        action="append",
        metavar="ORIGIN",
        help="an origin (https://ops.example.com) whose pages may send changes, besides the server's own "
        "(repeatable; default: $DCAF_ALLOWED_ORIGINS)",
    )
    run.add_argument(
        "--api-keys-file",
        metavar="FILE",
        help="the API keys, one identity[:scope+scope]=key a line (# comments allowed), in a file only its "
        "owner may read (chmod 600); instead of $DCAF_API_KEYS (docs/operations.md)",
    )
    run.add_argument(
        "--audit-key-file",
        metavar="FILE",
        help="the key that signs the audit trail's digests, in a file only its owner may read (chmod 600); "
        "instead of $DCAF_AUDIT_KEY; none: the trail is chained but unsigned (docs/operations.md)",
    )
    run.add_argument("--no-ui", dest="ui", action="store_false", help="do not serve the chat page at /")
    run.add_argument("--a2a", action="store_true", help="also speak A2A (card, JSON-RPC at /a2a)")
    run.add_argument("--mcp", action="store_true", help="also serve the tools that need no approval over MCP")
    run.add_argument(
        "--metrics", action="store_true", help="serve Prometheus metrics at /metrics (admin scope)"
    )
    run.add_argument(
        "--log-format", default=None, choices=["text", "json"], help="default: $DCAF_LOG_FORMAT, else text"
    )
    run.add_argument(
        "--shutdown-grace",
        type=float,
        default=SHUTDOWN_GRACE,
        metavar="SECONDS",
        help="on SIGTERM, refuse new turns (503) and give the running ones this long (default: %(default)g)",
    )
    run.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    prune = commands.add_parser(
        "prune",
        help="forget the conversations a store keeps past their retention (serve's ttl does it as it goes)",
    )
    prune.add_argument(
        "--store",
        default=None,
        help="the store, as serve's --store: sqlite:///PATH, redis://HOST:PORT/DB, dynamodb://TABLE?region=R "
        "(default: $DCAF_STORE, else sqlite:///dcaf_like.sqlite3)",
    )
    prune.add_argument(
        "--namespace",
        default=None,
        help="the agent's name, its namespace in the store (default: the URL's namespace=, else 'agent', "
        "the name of an Agent given none)",
    )
    prune.add_argument(
        "--retention-days",
        type=_days,
        default=None,
        help="keep conversations saved within this many days "
        f"(default: the URL's ttl=, else {DEFAULT_RETENTION_DAYS})",
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would be forgotten, forget nothing")
    chat = commands.add_parser(
        "chat", help="chat with an agent on the terminal, deciding each call it wants approved"
    )
    chat.add_argument("target", nargs="?", help="FILE.py:NAME or MODULE:NAME, run in this process")
    chat.add_argument("--url", help="a served agent instead (http://HOST:PORT)")
    chat.add_argument("--api-key", help="with --url: the server's API key (default: $DCAF_API_KEY)")
    chat.add_argument("--factory", action="store_true", help="NAME is a function returning the agent")
    chat.add_argument(
        "--conversation",
        metavar="ID",
        help="reopen this conversation: its last messages, then what waits in it for a decision",
    )
    chat.add_argument(
        "--store", default=None, help="with a target: where conversations live (default: memory)"
    )
    chat.add_argument(
        "--session",
        metavar="JSON",
        help="a JSON object the conversation's session starts with (sent with the first message, as "
        "a client may: to test what your tools do with it; the session is never authority)",
    )
    chat.add_argument(
        "--platform-context",
        metavar="JSON",
        help="a JSON object sent as the platform context of every message (tenant, namespace, ...)",
    )
    worker = commands.add_parser(
        "worker",
        help="run the background tools of an agent: a Celery worker taking the jobs of its CeleryExecutor",
    )
    worker.add_argument(
        "target", help="FILE.py:NAME or MODULE:NAME: an Agent with executor=CeleryExecutor(...)"
    )
    worker.add_argument("--factory", action="store_true", help="NAME is a function returning the agent")
    worker.add_argument(
        "--store",
        default=None,
        help="where conversations live, as serve's --store: the API servers' store (default: the agent's, "
        "else $DCAF_STORE, else sqlite:///dcaf_like.sqlite3)",
    )
    worker.add_argument(
        "--concurrency", type=int, default=4, help="jobs run at once, each in a thread (default: %(default)s)"
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (jobs by outcome, the tools they ran) at /metrics on this port",
    )
    worker.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    _audit_parser(commands)
    approvals = commands.add_parser(
        "approvals", help="the calls waiting for your decision across conversations: list and decide"
    )
    approvals.add_argument("--url", required=True, help="the served agent (http://HOST:PORT)")
    approvals.add_argument("--api-key", help="the server's API key (default: $DCAF_API_KEY)")
    approvals.add_argument("--limit", type=int, default=20, help="calls per page (1 to 200)")
    _grants_parser(commands)
    return parser


def _grants_parser(commands: Any) -> None:
    grants = commands.add_parser("grants", help="standing grants of a served agent: list, make, revoke")
    grants.add_argument("--url", required=True, help="the served agent (http://HOST:PORT)")
    grants.add_argument("--api-key", help="a key with the approve scope (default: $DCAF_API_KEY)")
    actions = grants.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the grants in force, newest first")
    listing.add_argument("--all", action="store_true", help="expired and revoked ones too")
    make = actions.add_parser("make", help="approve matching calls of one requester for a while")
    make.add_argument("tool", help="the tool whose calls it approves")
    make.add_argument("--requester", required=True, help="whose calls (an identity's name, or *)")
    make.add_argument(
        "--arg", action="append", default=[], metavar="KEY=VALUE", help="an argument the call must have"
    )
    make.add_argument(
        "--context", action="append", default=[], metavar="KEY=VALUE", help="a platform context value"
    )
    make.add_argument("--duration", type=float, required=True, help="seconds (at most a day)")
    make.add_argument("--reason", default="", help="why: kept with the grant and in the audit trail")
    revoke = actions.add_parser("revoke", help="approve nothing more by a grant")
    revoke.add_argument("id", help="the grant's id (g_...)")


def _audit_parser(commands: Any) -> None:
    audit = commands.add_parser(
        "audit",
        help="attack a served agent's approval gate as a hostile client and report what held",
        description="Attack the approval gate of the agent served at URL and report, per attack family, "
        "what held (docs/audit.md). It APPROVES, once per proposal, calls the agent proposes for --propose: "
        "point it at a staging agent or a harmless gated tool (dcaf_like.audit.canary_tool), never at "
        "an agent whose tool you do not want run. Exit status 0: every family held; 1: one failed; "
        "2: the audit could not run. `dcaf-like audit verify --store URL` checks a store's audit trail "
        "instead.",
    )
    audit.add_argument("url", help="the served agent, e.g. http://127.0.0.1:8000 (loopback only by default)")
    audit.add_argument("--api-key", help="sent as Authorization: Bearer (default: $DCAF_API_KEY)")
    audit.add_argument(
        "--propose",
        default=None,
        help='a message that makes the agent propose a gated call (default: "Delete the pod web-2 in '
        'namespace default.")',
    )
    audit.add_argument(
        "--tool", help="the only tool whose calls the audit approves (default: the first that waits)"
    )
    audit.add_argument(
        "--ledger", help="a file the served tool appends one line to per execution: exact counts"
    )
    audit.add_argument("--report", help="write the report there: .md for Markdown, else JSON")
    audit.add_argument(
        "--i-own-this-server", action="store_true", help="allow a URL that is not a loopback address"
    )
    audit.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    audit.add_argument("--concurrency", type=int, default=20, help="identical approvals sent at once")
    audit.add_argument("--timeout", type=float, default=120, help="seconds for each request")
    audit.add_argument(
        "--budget",
        type=float,
        default=300,
        help="seconds for the whole audit: the families not started by then are reported not reached "
        "(0: no limit)",
    )
    audit.add_argument(
        "--identity",
        action="append",
        default=[],
        metavar="NAME=KEY",
        help="an identity for the teams family, repeated: NAME=KEY, or NAME=@FILE to read the key from a "
        "file (keys are never printed)",
    )
    audit.add_argument("--requester", help="the identity that proposes the calls (default: the first)")
    audit.add_argument(
        "--teams-propose",
        help="the requester's message for the teams family, one that makes the agent propose a call "
        "under a rule needing two approvers (default: --propose)",
    )
    audit.add_argument(
        "--outsider",
        action="append",
        default=[],
        metavar="NAME",
        help="an identity in none of the groups the rule names, repeated",
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["audit", "keygen"]:
        from dcaf_like.cli.verify import keygen

        return keygen(argv[2:])
    if argv[:2] == ["audit", "verify"]:  # beside `audit URL`, which takes any word as its URL
        from dcaf_like.cli.verify import main as verify

        return verify(argv[2:])
    args = _parser().parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))
    if args.command == "chat":
        return _chat(args)
    if args.command == "prune":
        return _prune(args)
    if args.command == "audit":
        return _audit(args)
    if args.command == "approvals":
        return _approvals(args)
    if args.command == "grants":
        return _grants(args)
    if args.command == "worker":
        return _worker(args)
    try:
        api_keys = None if args.api_keys_file is None else _keys_from_file(args.api_keys_file)
        key = signing_key(args.audit_key_file)  # checked here, so that a bad key stops the start
        target = load_target(args.target, factory=args.factory)
        if args.workers > 1:
            return _serve_workers(args, target)
        serve(
            target,
            api_keys=api_keys,
            host=args.host,
            port=args.port,
            store=args.store,
            max_body_bytes=args.max_body_bytes,
            log_level=args.log_level,
            log_format=args.log_format,
            ui=args.ui,
            a2a=args.a2a,
            mcp=args.mcp,
            retention_days=args.retention_days,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
            metrics=args.metrics,
            shutdown_grace=args.shutdown_grace,
            audit_key=key,
        )
    except (TargetError, ApplicationError, StoreConfigError, TypeError, ValueError) as exc:
        print(f"dcaf-like: {exc}", file=sys.stderr)
        return 2
    return 0


def _api_key(args: argparse.Namespace) -> str | None:
    """The key of ``--api-key`` (or ``$DCAF_API_KEY``) for ``--url``, warned about on stderr when plain
    http would carry it to another host."""
    from dcaf_like.cli._remote import plain_http_warning

    api_key: str | None = args.api_key or os.environ.get("DCAF_API_KEY")
    if (warning := plain_http_warning(args.url, api_key)) is not None:
        print(f"dcaf-like {args.command}: warning: {warning}", file=sys.stderr)
    return api_key


def _approvals(args: argparse.Namespace) -> int:
    from dcaf_like.cli.approvals import InboxError, RemoteInbox, run

    inbox = RemoteInbox(args.url, api_key=_api_key(args))
    try:
        run(inbox, sys.stdout, sys.stdin.readline, limit=args.limit)
    except InboxError as exc:
        print(f"dcaf-like approvals: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stdout)
    return 0


def _grants(args: argparse.Namespace) -> int:
    from dcaf_like.cli._remote import Remote, RemoteError
    from dcaf_like.cli.grants import list_grants, make_grant, pairs, revoke_grant

    remote = Remote(args.url, api_key=_api_key(args))
    try:
        if args.action == "list":
            return list_grants(remote, sys.stdout, everything=args.all)
        if args.action == "revoke":
            return revoke_grant(remote, sys.stdout, args.id)
        try:
            grant = {
                "tool": args.tool,
                "requester": args.requester,
                "arguments": pairs(args.arg, "--arg"),
                "context": pairs(args.context, "--context"),
                "duration": args.duration,
                "reason": args.reason,
            }
        except ValueError as exc:
            print(f"dcaf-like grants: {exc}", file=sys.stderr)
            return 2
        return make_grant(remote, sys.stdout, grant)
    except RemoteError as exc:
        print(f"dcaf-like grants: {exc}", file=sys.stderr)
        return 2


def _worker(args: argparse.Namespace) -> int:
    """``dcaf-like worker app.py:agent``: a Celery worker running the agent's background tools, on
    the store its API servers use (docs/deployment.md, "The tool tier")."""
    from dcaf_like.agent import Agent
    from dcaf_like.jobs.celery import CeleryExecutor  # not at import: it loads celery

    try:
        target = load_target(args.target, factory=args.factory)
        if not isinstance(target, Agent) or not isinstance(target.executor, CeleryExecutor):
            raise TargetError(f"{args.target} has no job engine: give it Agent(executor=CeleryExecutor(...))")
        executor = target.executor
        tracer = None
        if args.metrics_port is not None:
            from prometheus_client import start_http_server

            from dcaf_like.telemetry.prometheus import MetricsTracer

            tracer = MetricsTracer
            start_http_server(args.metrics_port)
        worker, _ = configured(target, args.store, default=DEFAULT_STORE, tracer=tracer)
        app = executor.worker_app(worker.jobs)
    except (TargetError, StoreConfigError, TypeError, ValueError) as exc:
        print(f"dcaf-like worker: {exc}", file=sys.stderr)
        return 2
    app.worker_main(
        [
            "worker",
            f"--queues={executor.queue}",
            "--pool=threads",
            f"--concurrency={args.concurrency}",
            f"--loglevel={args.log_level.upper()}",
            "--without-gossip",
            "--without-mingle",
        ]
    )
    return 0


def _keys_from_file(path: str) -> dict[str, str]:
    from dcaf_like.server.auth import keys_from_file  # not at import: it loads starlette

    return keys_from_file(path)


def _days(value: str) -> float:
    try:
        days = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of days, not {value!r}") from None
    if days < 0 or days != days or days == float("inf"):
        raise argparse.ArgumentTypeError(f"a number of days, 0 or more, not {value!r}")
    return days


def _prune(args: argparse.Namespace) -> int:
    """``dcaf-like prune``: what serve's retention forgets as it goes, in one pass (for a store written
    without a ttl, or after lowering it)."""
    url = args.store or store_from_environment() or DEFAULT_STORE
    if args.retention_days == 0:
        print(
            "dcaf-like prune: --retention-days 0 keeps every conversation: nothing to prune", file=sys.stderr
        )
        return 2
    namespace = args.namespace or dict(parse_qsl(urlsplit(url).query)).get("namespace") or "agent"
    try:
        store = open_store(url, namespace=namespace)
    except StoreConfigError as exc:
        print(f"dcaf-like prune: {exc}", file=sys.stderr)
        return 2
    ttl = getattr(store, "ttl", None)
    days = args.retention_days or (ttl / DAY if ttl else DEFAULT_RETENTION_DAYS)
    try:
        count = store.prune(days * DAY, dry_run=args.dry_run)
        ended = None
        if isinstance(store, GrantStore):  # grants that ended as long ago approve nothing: forgotten too
            now = getattr(store, "clock", time.time)()
            try:
                ended = store.forget_grants(now - days * DAY, dry_run=args.dry_run)
            except MissingCapability as exc:
                print(f"dcaf-like prune: grants kept: {exc}", file=sys.stderr)
    except ApplicationError as exc:
        print(f"dcaf-like prune: {exc}", file=sys.stderr)
        return 1
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    verb = "would forget" if args.dry_run else "forgot"
    conversations = "conversation" if count == 1 else "conversations"
    over = f"{days:g} day" if days == 1 else f"{days:g} days"
    print(f"{verb} {count} {conversations} of {redact(url)} last saved over {over} ago")
    if ended is not None:
        print(f"{verb} {ended} standing {'grant' if ended == 1 else 'grants'} that ended over {over} ago")
    return 0


def _chat(args: argparse.Namespace) -> int:
    from dcaf_like.cli.terminal import ChatError, HttpTransport, InProcessTransport, TerminalChat

    if (args.target is None) == (args.url is None):
        print("dcaf-like chat: name an agent (FILE.py:NAME) or a server (--url), not both", file=sys.stderr)
        return 2
    try:
        session = _json_object(args.session, "--session")
        platform_context = _json_object(args.platform_context, "--platform-context")
    except ValueError as exc:
        print(f"dcaf-like chat: {exc}", file=sys.stderr)
        return 2
    transport: InProcessTransport | HttpTransport
    try:
        if args.url is not None:
            transport = HttpTransport(args.url, api_key=args.api_key or os.environ.get("DCAF_API_KEY"))
            if (problem := transport.check()) is not None:  # said now, not at the first message
                print(f"dcaf-like chat: {problem}", file=sys.stderr)
                return 2
        else:
            target, _ = configured(load_target(args.target, factory=args.factory), args.store, default=None)
            transport = InProcessTransport(target, user=getpass.getuser())
    except (TargetError, ApplicationError, StoreConfigError, TypeError) as exc:
        print(f"dcaf-like: {exc}", file=sys.stderr)
        return 2
    chat = TerminalChat(
        transport,
        out=sys.stdout,
        session=session,
        platform_context=platform_context,
        conversation_id=args.conversation,
    )
    try:
        if args.conversation is not None:
            chat.reopen()
        chat.run()
    except ChatError as exc:
        print(f"dcaf-like chat: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print()
    finally:
        transport.close()
    return 0


def _json_object(text: str | None, option: str) -> dict[str, Any] | None:
    """The JSON object an option holds (None if not given); ValueError saying what is wrong."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{option} is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{option} must be a JSON object ({{...}}), not {type(value).__name__}: {text!r}")
    return value


def _audit(args: argparse.Namespace) -> int:
    from dcaf_like.audit import run_audit
    from dcaf_like.audit.target import TargetRefused

    try:
        report = run_audit(
            args.url,
            api_key=args.api_key or os.environ.get("DCAF_API_KEY"),
            propose=args.propose,
            tool=args.tool,
            ledger=args.ledger,
            i_own_this_server=args.i_own_this_server,
            max_body_bytes=args.max_body_bytes,
            concurrency=args.concurrency,
            timeout=args.timeout,
            budget=args.budget or None,
            identities=_identities(args.identity),
            requester=args.requester,
            outsiders=args.outsider,
            teams_propose=args.teams_propose,
        )
    except (TargetRefused, ImportError, ValueError, OSError) as exc:
        print(f"dcaf-like audit: {exc}", file=sys.stderr)
        return 2
    print(report.to_markdown(), end="")
    if args.report:
        Path(args.report).write_text(report.render(args.report), encoding="utf-8")
    if report.error:
        return 2
    return 0 if report.held else 1


def _identities(given: Sequence[str]) -> dict[str, str]:
    """``NAME=KEY`` or ``NAME=@FILE`` options as names and keys (the errors name no key)."""
    identities: dict[str, str] = {}
    for text in given:
        name, sep, key = text.partition("=")
        if not sep or not name or not key:  # named only when "=" says which part is the name
            which = f" (for {name!r})" if sep and name else ""
            raise ValueError(f"--identity wants NAME=KEY or NAME=@FILE{which}")
        if name in identities:
            raise ValueError(f"--identity {name!r} is given twice")
        if key.startswith("@"):
            key = Path(key[1:]).read_text(encoding="utf-8").strip()
        identities[name] = key
    return identities


# Several workers: uvicorn starts each process afresh, so each loads the target itself, told by these.
_TARGET = "DCAF_SERVE_TARGET"
_FACTORY = "DCAF_SERVE_FACTORY"
_STORE = "DCAF_SERVE_STORE"
_MAX_BODY = "DCAF_SERVE_MAX_BODY_BYTES"
_UI = "DCAF_SERVE_UI"
_A2A = "DCAF_SERVE_A2A"
_MCP = "DCAF_SERVE_MCP"
_METRICS = "DCAF_SERVE_METRICS"
_RETENTION = "DCAF_SERVE_RETENTION_DAYS"
_GRACE = "DCAF_SERVE_SHUTDOWN_GRACE"
_KEYS_FILE = "DCAF_SERVE_API_KEYS_FILE"  # its path: each worker reads the keys from the file itself
_AUDIT_KEY_FILE = "DCAF_SERVE_AUDIT_KEY_FILE"  # likewise (or each worker reads $DCAF_AUDIT_KEY)


def _serve_workers(args: argparse.Namespace, target: ServedAgent) -> int:
    """Check in this process what every worker will do, then let uvicorn start the workers."""
    target, described = configured(
        target, args.store, default=DEFAULT_STORE, retention_days=args.retention_days
    )
    check_store(target)
    if isinstance(target.repository, InMemoryConversationRepository):
        raise TargetError(
            f"{args.workers} workers cannot share an in-memory store: an approval would reach a worker "
            "that never saw the proposal. Use --store sqlite:///PATH or redis://HOST:PORT/DB"
        )
    from dcaf_like.server.perimeter import HOSTS_ENV, ORIGINS_ENV

    # Each worker's create_app reads the allowed hosts and origins from the environment.
    hosts = with_bound_name(args.allowed_host, args.host)
    if hosts is not None:
        os.environ[HOSTS_ENV] = ",".join(hosts)
    if args.allowed_origin is not None:
        os.environ[ORIGINS_ENV] = ",".join(args.allowed_origin)
    os.environ.update(
        {
            _TARGET: args.target,
            _FACTORY: "1" if args.factory else "",
            _STORE: args.store or "",
            _MAX_BODY: str(args.max_body_bytes),
            _UI: "1" if args.ui else "",
            _A2A: "1" if args.a2a else "",
            _MCP: "1" if args.mcp else "",
            _METRICS: "1" if args.metrics else "",
            _RETENTION: repr(args.retention_days),
            _GRACE: repr(args.shutdown_grace),
            _KEYS_FILE: "" if args.api_keys_file is None else str(Path(args.api_keys_file).resolve()),
            _AUDIT_KEY_FILE: "" if args.audit_key_file is None else str(Path(args.audit_key_file).resolve()),
        }
    )
    if args.metrics and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Every worker writes its values there; /metrics sums them (prometheus-client multiprocess mode).
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="dcaf-metrics-")
    run_uvicorn(
        "dcaf_like.cli.main:worker_app",
        factory=True,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        store_description=described,
        workers=args.workers,
        log_format=args.log_format,
    )
    return 0


def worker_app() -> Any:
    """The app of one worker process (uvicorn's factory), from what :func:`_serve_workers` set."""
    sys.path.insert(0, str(Path.cwd()))
    retention = float(os.environ.get(_RETENTION) or DEFAULT_RETENTION_DAYS)
    target, _ = configured(
        load_target(os.environ[_TARGET], factory=os.environ.get(_FACTORY) == "1"),
        os.environ.get(_STORE) or None,
        default=DEFAULT_STORE,
        retention_days=retention,
    )
    from dcaf_like.server.app import create_app

    keys_file = os.environ.get(_KEYS_FILE)
    audit_key_file = os.environ.get(_AUDIT_KEY_FILE)
    app = create_app(
        target,
        api_keys=_keys_from_file(keys_file) if keys_file else None,
        max_body_bytes=int(os.environ[_MAX_BODY]),
        ui=os.environ.get(_UI, "1") == "1",
        a2a=os.environ.get(_A2A) == "1",
        mcp=os.environ.get(_MCP) == "1",
        metrics=os.environ.get(_METRICS) == "1",
        shutdown_grace=float(os.environ.get(_GRACE) or SHUTDOWN_GRACE),
        audit_key=signing_key(audit_key_file or None),
    )
    settle_heap()
    return app


if __name__ == "__main__":
    raise SystemExit(main())
