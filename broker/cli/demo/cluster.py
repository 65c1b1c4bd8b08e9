"""The demo's embedded cluster: one broker and its ZooKeeper on free loopback ports, always
stopped.

Concurrency: the demo's one thread.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from broker.cli.demo.output import say


class DemoError(Exception):
    """A step of the demo failed; the message says which and why."""


def free_port(taken: set[int]) -> int:
    """A currently free TCP port on 127.0.0.1 not in ``taken``."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port
    raise DemoError("no free port on 127.0.0.1")


def cluster_up(cluster_dir: Path) -> str:
    """Start a one-broker cluster on free ports (as ``millrace cluster up``); returns the
    bootstrap servers."""
    from broker.cli.cluster import ClusterError
    from broker.cli.cluster import cluster_up as start_cluster

    taken: set[int] = set()
    zk_port, base_port = free_port(taken), free_port(taken)
    try:
        info = start_cluster(cluster_dir, 1, base_port, zk_port, progress=None)
    except ClusterError as exc:
        raise DemoError(f"the cluster did not start: {exc}") from exc
    return str(info["bootstrap_servers"])


def cluster_down(cluster_dir: Path) -> None:
    """Stop the cluster (as ``millrace cluster down``: SIGTERM, then SIGKILL by pid)."""
    from broker.cli.cluster import ClusterError
    from broker.cli.cluster import cluster_down as stop_cluster

    try:
        stop_cluster(cluster_dir, progress=None)
    except (ClusterError, OSError) as exc:
        sys.stderr.write(f"demo: stopping the cluster failed: {exc}\n")


@contextlib.contextmanager
def embedded_cluster(cluster_dir: Path) -> Iterator[str]:
    """Start a fresh cluster in ``cluster_dir``, yield its bootstrap servers, always stop it."""
    if (cluster_dir / "cluster.json").exists():
        cluster_down(cluster_dir)  # a previous run that was killed before cleaning up
    shutil.rmtree(cluster_dir, ignore_errors=True)
    cluster_dir.mkdir(parents=True)
    try:
        yield cluster_up(cluster_dir)
    finally:
        say("Stopping the cluster ...")
        cluster_down(cluster_dir)
