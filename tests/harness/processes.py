"""Processes the tests started: liveness, waiting, SIGKILL by pid, finding them by command line.

Tests stop what they start by its own pid, even when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # state is the field after the parenthesised command name
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def wait_pid_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def kill_pid(pid: int) -> None:
    """SIGKILL one pid (ours) and wait for it to go."""
    if pid <= 1 or pid == os.getpid() or not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    wait_pid_gone(pid, 10)


def pids_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (a cluster's unique temporary directory)."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def process_identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks): tells a process from a later one given the same pid.
    None if ``pid`` is gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return pid, int(fields[19])


def child_pids(pid: int) -> list[int]:
    """Live descendants of ``pid`` (children, grandchildren, ...), from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and fields[0] not in ("Z", "X"):
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found.extend(kids)
        frontier.extend(kids)
    return sorted(found)
