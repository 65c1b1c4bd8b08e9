"""Loopback ports for test processes: never the same port twice in one pytest session.

Concurrency: one pytest process; the handed-out set is module state.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

_handed_out: set[int] = set()


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1, never the same one twice in this session."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port found")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive free ports on 127.0.0.1 (none handed out before).

    Taken below the kernel's ephemeral range: a port in it that is free now can become the
    local port of some outgoing connection (a client of the cluster just started) before
    the broker binds it."""
    if count <= 1:
        return free_port()
    import random

    high = min(_ephemeral_low(), 65536) - count
    low = 10000 if high > 12000 else 1024
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(500):
        first = rng.randrange(low, high)
        ports = range(first, first + count)
        if all(p not in _handed_out and port_is_free(p) for p in ports):
            _handed_out.update(ports)
            return first
    raise RuntimeError(f"no {count} consecutive free ports found")
