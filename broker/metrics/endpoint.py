"""The broker's Prometheus endpoint (``metrics.http.listener``): prometheus_client's own HTTP
server, on a registry of this broker's own.

The registry (a private ``CollectorRegistry``, not prometheus_client's global one, so two
brokers in one process, as in tests, never mix) holds the
:class:`~broker.metrics.registry.BrokerCollector` (everything read from the broker, on its
event loop) and prometheus_client's process collector (``process_cpu_seconds_total``,
``process_resident_memory_bytes``, open file descriptors, ...). The server
(``prometheus_client.start_http_server``: a WSGI server whose daemon thread answers each
scrape in a thread of its own) serves the text exposition format at ``/metrics`` (and
``/``). It starts when the broker starts (a port already in use fails start-up with an
error naming the property) and stops when the broker has shut down.

Concurrency: :meth:`MetricsEndpoint.start` and :meth:`MetricsEndpoint.stop` are called on
the broker's event loop; the server's threads only run the collectors' ``collect()``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from broker.config_def import ConfigError
from broker.metrics.registry import BrokerCollector, StateCollector

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView

__all__ = ["MetricsEndpoint", "metrics_url"]

log = logging.getLogger(__name__)


def metrics_url(host: str, port: int) -> str:
    """``http://host:port/metrics`` (an IPv6 host in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/metrics"


class MetricsEndpoint:
    """Serves one broker's metrics on ``host:port`` (port 0: any free port; :attr:`url`
    tells the one bound). ``collectors``: the state collectors (default
    :data:`~broker.metrics.registry.STATE_COLLECTORS`)."""

    def __init__(
        self,
        broker: BrokerView,
        host: str,
        port: int,
        *,
        collectors: list[StateCollector] | None = None,
    ) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.collectors = collectors
        self.registry = CollectorRegistry(auto_describe=False)
        self.url: str | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Register the collectors and start serving (on the broker's event loop)."""
        loop = asyncio.get_running_loop()
        self.registry.register(BrokerCollector(self.broker, loop, collectors=self.collectors))
        ProcessCollector(registry=self.registry)
        try:
            self._server, self._thread = start_http_server(
                self.port, addr=self.host, registry=self.registry
            )
        except OSError as exc:
            raise ConfigError(
                f"Invalid value for configuration metrics.http.listener: cannot serve metrics "
                f"on {self.host}:{self.port}: {exc}"
            ) from exc
        self.port = int(self._server.server_port)
        self.url = metrics_url(self.host, self.port)
        log.info("serving Prometheus metrics on %s", self.url)

    async def stop(self) -> None:
        """Stop serving (waits for the server thread's loop to end)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        await asyncio.to_thread(_shutdown, server, thread)
        log.info("stopped serving metrics on %s", self.url)


def _shutdown(server: WSGIServer, thread: threading.Thread | None) -> None:
    server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=5.0)
