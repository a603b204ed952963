"""Shared test helpers: an in-memory 'cluster' and the tools that operate it."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _isolate import lift_parent_timeouts, run_in_child, should_isolate
from hypothesis import settings

from dcaf_like import Tool, tool

# Property tests check what holds, never how fast: Hypothesis's default deadline (200 ms an example)
# failed one on a loaded machine. How many examples each tries stays Hypothesis's default.
settings.register_profile("dcaf_like", deadline=None, print_blob=True)
settings.load_profile("dcaf_like")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Tests marked ``native`` run in a child process: a native crash fails that test alone."""
    return run_in_child(item) if should_isolate(item) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    lift_parent_timeouts(items)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Skipped tests said plainly at the very end, by group, each with the one command that runs them:
    a newcomer's ``make test`` must not pass over a group in silence (the browser tests, above all)."""
    groups: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        groups[reason] = groups.get(reason, 0) + 1
    if not groups:
        return
    terminalreporter.section("skipped: these groups did not run here", sep="-", yellow=True)
    for reason, count in sorted(groups.items(), key=lambda item: -item[1]):
        terminalreporter.line(f"{count:4d} skipped: {reason}", yellow=True)


# -- a leak fails the test that leaked it -----------------------------------------------------------


def _stranded_tasks() -> list[asyncio.Task[Any]]:
    """Tasks never finished whose event loop is closed: nothing can run them again, and when they are
    collected (in whichever test runs then) they fail that test ("Event loop is closed", "Task was
    destroyed but it is pending"). A psycopg pool's workers left on an ended loop were such tasks."""
    every = getattr(asyncio.tasks, "_all_tasks", None)
    if every is None:  # Python 3.12 keeps scheduled tasks under another name
        every = getattr(asyncio.tasks, "_scheduled_tasks", ())
    return [t for t in list(every) if not t.done() and t.get_loop().is_closed()]


@pytest.fixture(autouse=True)
def _package_logging_as_it_was() -> Iterator[None]:
    """After each test, the package's loggers as the suite found them: a test or a fixture that
    configures logging as the server does (``propagate`` off, handlers of its own, a ``dictConfig``
    that disables the loggers it does not name) would otherwise hide every later line from ``caplog``
    in the same worker, and a test that checks a line is (or is not) logged would pass or fail by
    which tests ran before it. As found at start, not before each test: a session fixture (a server in
    a thread) may configure logging while the first test that uses it is set up."""
    yield
    for name in _package_loggers():
        logger = logging.getLogger(name)
        propagate, level, handlers, disabled = _PRISTINE.get(name, (True, logging.NOTSET, [], False))
        logger.propagate, logger.level, logger.disabled = propagate, level, disabled
        logger.handlers[:] = handlers


def _package_loggers() -> list[str]:
    names = list(logging.root.manager.loggerDict)
    return ["dcaf_like", *(n for n in names if n.startswith("dcaf_like."))]


def _logger_state(logger: logging.Logger) -> tuple[bool, int, list[logging.Handler], bool]:
    return logger.propagate, logger.level, list(logger.handlers), logger.disabled


_PRISTINE = {name: _logger_state(logging.getLogger(name)) for name in _package_loggers()}


@pytest.fixture(autouse=True)
def _leaks_fail_their_own_test() -> Iterator[None]:
    """After each test: a task it left pending on a closed event loop fails it, naming the task, and
    is collected here, so its errors at collection are this test's too, not the next one's."""
    before = {id(t) for t in _stranded_tasks()}
    yield
    stranded = [t for t in _stranded_tasks() if id(t) not in before]
    if stranded:
        names = ", ".join(sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in stranded))
        del stranded
        gc.collect()
        pytest.fail(f"this test left tasks pending on a closed event loop: {names}", pytrace=False)


class Cluster:
    """Pods by namespace; records every deletion so tests can count executions."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, str]] = {
            "default": {"web-1": "Running", "web-2": "CrashLoopBackOff"},
            "prod": {"api-1": "Running"},
            "kube-system": {"coredns": "Running"},
        }
        self.deleted: list[tuple[str, str]] = []

    def tools(self) -> list[Tool]:
        cluster = self

        @tool(requires_approval=False)
        def list_pods(namespace: str = "default") -> dict[str, str]:
            """List the pods of a namespace with their status."""
            return cluster.pods.get(namespace, {})

        @tool(editable=True)
        def delete_pod(name: str, namespace: str = "default") -> str:
            """Delete a pod.

            Args:
                name: The pod to delete.
                namespace: Its namespace.
            """
            if name not in cluster.pods.get(namespace, {}):
                raise LookupError(f"pod {name} not found in {namespace}")
            del cluster.pods[namespace][name]
            cluster.deleted.append((namespace, name))
            return f'pod "{name}" deleted'

        @tool
        def restart_pod(name: str, namespace: str = "default") -> str:
            """Restart a pod."""
            return f'pod "{name}" restarted'

        return [list_pods, delete_pod, restart_pod]


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


# -- real services on this machine ------------------------------------------------------------------

REDIS_URL = os.environ.get("DCAF_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def service_missing(what: str) -> None:
    """Skip when a local service is not running, unless CI says services are required."""
    if os.environ.get("DCAF_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} is required (DCAF_REQUIRE_SERVICES=1) but not reachable")
    pytest.skip(f"{what} is not running on this machine; start it as .ci/run does (docs/development.md)")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis (database 15, so a developer's data in db 0 is never touched)."""
    redis = pytest.importorskip("redis", reason="the redis extra is not installed: pip install -e '.[redis]'")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError:
        service_missing(f"Redis at {REDIS_URL}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    prefix = f"dcaf-test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


POSTGRES_URL = os.environ.get("DCAF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A database of this test session's own on the real PostgreSQL, dropped at the end."""
    psycopg = pytest.importorskip(
        "psycopg", reason="the postgres extra is not installed: pip install -e '.[postgres]'"
    )
    from psycopg.conninfo import conninfo_to_dict

    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=2)
    except psycopg.OperationalError:
        service_missing(f"PostgreSQL at {POSTGRES_URL}")
    name = f"dcaf_test_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(POSTGRES_URL)
    host, port, user = params.get("host", "127.0.0.1"), params.get("port", 5432), params.get("user", "")
    password = f":{params['password']}" if params.get("password") else ""
    yield f"postgresql://{user}{password}@{host}:{port}/{name}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=2) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def postgres_table(postgres_url: str) -> str:
    """A table name of this test's own in the session's database (which is dropped whole)."""
    return f"t_{uuid.uuid4().hex[:12]}"


def _atomic_moto_server(server_module: Any) -> Any:
    """moto's threaded server, each request handled whole before the next starts. DynamoDB applies a
    conditional write or a transaction atomically; moto's backend checks the condition and writes
    without a lock, so two threads may both pass the check (a compare-and-set with two winners, under
    load). Serializing requests gives the emulator the atomicity the real service has."""
    import threading

    from werkzeug.serving import make_server

    app_module = server_module.DomainDispatcherApplication, server_module.create_backend_app
    lock = threading.Lock()

    class Atomic(server_module.ThreadedMotoServer):  # type: ignore[misc]
        def _server_entry(self) -> None:
            dispatcher = app_module[0](app_module[1])

            def app(environ: Any, start_response: Any) -> list[bytes]:
                with lock:
                    return list(dispatcher(environ, start_response))

            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=server_module.MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return Atomic(ip_address="127.0.0.1", port=0, verbose=False)


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> Iterator[str]:
    """DynamoDB emulated by moto's server on a loopback port (an emulator, not AWS)."""
    server_module = pytest.importorskip(
        "moto.server", reason="moto[server] is a dev dependency: pip install -e '.[dev]'"
    )
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-1")
    server = _atomic_moto_server(server_module)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
