"""Shared test helpers: an in-memory 'cluster' and the tools that operate it."""

from __future__ import annotations

import pytest

from dcaf_like import Tool, tool


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
