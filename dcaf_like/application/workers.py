"""Who holds a lease (a worker id), and whether that worker is known to be gone.

A worker id names the host, the process and a random part, and, on Linux, where the process lives:
the machine's boot and its PID namespace, and the process's start time. Another worker on the same
machine and namespace can then tell for certain that the holder of a lease has exited (its process
is gone, or its PID now belongs to a process started later), and settle its call at once instead of
waiting out the lease (docs/runs.md, "Claims and leases"). Anywhere else (another host, another
container, a platform without ``/proc``) nothing is known and the lease decides, as before.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from pathlib import Path

_PROC = Path("/proc")


def new_worker_id() -> str:
    """Who holds a lease: host, process, a random part (two services in one process differ), and
    where the process lives (empty where that cannot be known)."""
    pid = os.getpid()
    return f"{host_name()}:{pid}:{os.urandom(4).hex()}:{_place()}.{_own_start(pid) or ''}"


def worker_gone(worker: str) -> bool:
    """True only when `worker` certainly exited: it ran on this machine, in this PID namespace, and
    its process is gone or its PID was reused. False when it runs, or when that cannot be known."""
    parts = worker.split(":")
    if len(parts) != 4 or not parts[1].isdigit():
        return False  # an id of another format (older, or given by the user): the lease decides
    host, pid, _, where = parts
    place, _, started = where.partition(".")
    if not place or not started or host != host_name() or place != _place():
        return False
    now = _started(int(pid))
    return now is None or now != started


@functools.cache
def host_name() -> str:
    """This machine's name, as worker ids and the log lines of tools name it."""
    return socket.gethostname()


@functools.cache
def _place() -> str:
    """This machine's boot and PID namespace, hashed; empty without ``/proc``."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat(_PROC / "self/ns/pid").st_ino
    except OSError:
        return ""
    return hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def _own_start(pid: int) -> str | None:
    """When this process started: it never changes while `pid` is ours, so it is read once per pid
    (a forked child, whose pid differs, reads its own); building an agent need not read a file."""
    return _started(pid)


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, from ``/proc/PID/stat``); None: no such process."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields are counted after its end.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]  # field 22, starttime
