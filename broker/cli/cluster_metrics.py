"""The metrics endpoints of ``millrace cluster up``: one Prometheus port per broker.

Each broker gets ``metrics.http.listener=http://127.0.0.1:<port>`` with a concrete free port
(chosen when the cluster is created and written into its ``server.properties``, so
``cluster start-broker`` serves on the same port again), and its ``cluster.json`` entry
records ``metrics_url``. A user's ``--set metrics.http.listener=...`` is respected: empty
turns the endpoints off (``metrics_url`` null); ``http://host:0`` picks a free port per
broker on that host; a fixed port is taken as it is for a one-broker cluster and refused for
more (several brokers on one host cannot share it).

Synchronous, for the command's one thread; failures raise
:class:`~broker.cli.cluster_process.ClusterError`.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from broker.cli.cluster_process import HOST, ClusterError
from broker.config import parse_metrics_listener

__all__ = ["PROPERTY", "MetricsPort", "plan_metrics_ports"]

PROPERTY = "metrics.http.listener"


@dataclass(frozen=True, slots=True)
class MetricsPort:
    """Where one broker serves its metrics."""

    host: str
    port: int

    @property
    def listener(self) -> str:
        """The ``metrics.http.listener`` value."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    @property
    def url(self) -> str:
        """Where Prometheus scrapes it."""
        return f"{self.listener}/metrics"


def plan_metrics_ports(
    overrides: Mapping[str, str], brokers: int, taken: Collection[int] = ()
) -> list[MetricsPort | None]:
    """Each broker's metrics endpoint (None: off), from ``--set metrics.http.listener``
    (unset: a free port on 127.0.0.1 each). Free ports avoid ``taken`` (the cluster's other
    ports)."""
    raw = overrides.get(PROPERTY)
    if raw is not None and not raw.strip():
        return [None] * brokers
    host, port = (HOST, 0) if raw is None else _parse(raw)
    if port == 0:
        return [MetricsPort(host, p) for p in _free_ports(host, brokers, taken)]
    if brokers > 1:
        raise ClusterError(
            f"--set {PROPERTY}={raw}: {brokers} brokers on one host cannot share port {port}; "
            f"give port 0 (http://{host}:0: a free port for each broker) or leave it unset"
        )
    if port in taken:
        raise ClusterError(f"--set {PROPERTY}={raw}: port {port} is one of the cluster's ports")
    return [MetricsPort(host, port)] * brokers


def _parse(raw: str) -> tuple[str, int]:
    parsed = parse_metrics_listener(raw)
    if parsed is None:
        raise ClusterError(
            f"invalid --set: Invalid value {raw!r} for configuration {PROPERTY} (expected "
            "http://host:port with a port from 0 to 65535, or empty)"
        )
    return parsed


def _free_ports(host: str, count: int, taken: Collection[int]) -> list[int]:
    """``count`` distinct ports the OS reports free on ``host`` now (all held open together
    while choosing, so none repeats), none of them in ``taken``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket(family, socket.SOCK_STREAM)
            held.append(sock)
            try:
                sock.bind((host, 0))
            except OSError as exc:
                raise ClusterError(
                    f"cannot find a free port for {PROPERTY} on {host}: {exc}"
                ) from exc
            port = int(sock.getsockname()[1])
            if port not in taken:
                ports.append(port)
    finally:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()
    return ports
