"""The asyncio socket server (Kafka's ``SocketServer``): the listener and the set of its
connections. (Kafka's ``KafkaServer``, the broker itself, is :class:`broker.server.Broker`.)

Each accepted connection is a :class:`~broker.network.connection.Connection` (an
``asyncio.Protocol``): frames are cut out of the received bytes and each request's handler
starts at once, in arrival order; responses leave in request order, log bytes with
``sendfile``. That module's docstring has the theory of operation, the flow control and
the limits (``socket.request.max.bytes``, ``queued.max.requests``,
``connections.max.idle.ms``).

Concurrency: everything runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable

from broker.network.connection import Connection, RequestHandler, sendfile_now
from broker.protocol.response import Chunk, CloseConnection, ConnectionInfo, FileRegion, Response

__all__ = [
    "Chunk",
    "CloseConnection",
    "ConnectionInfo",
    "FileRegion",
    "RequestHandler",
    "Response",
    "SocketServer",
    "sendfile_now",
]

log = logging.getLogger(__name__)


class SocketServer:
    """Listens on one address and serves Kafka requests with ``handler``."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: RequestHandler,
        *,
        listener_name: str = "PLAINTEXT",
        max_request_bytes: int = 104_857_600,
        max_queued_requests: int = 500,
        idle_timeout_s: float = 600.0,
        ssl_context: ssl.SSLContext | None = None,
        on_connect: Callable[[ConnectionInfo, asyncio.BaseTransport], None] | None = None,
    ) -> None:
        """``ssl_context``: serve TLS (an SSL or SASL_SSL listener; responses' log bytes are
        then copied through Python, as Kafka loses zero-copy under TLS). ``on_connect``:
        called once a connection is up (after its TLS handshake) to set what the listener's
        security knows of the client (its principal, its SASL state); raising closes it."""
        self.host = host
        self.port = port
        self._handler = handler
        self._listener = listener_name
        self._max_request_bytes = max_request_bytes
        self._max_queued = max_queued_requests
        self._idle_timeout_s = idle_timeout_s
        self._ssl = ssl_context
        self._on_connect = on_connect
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._next_id = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._connection,
            self.host,
            self.port,
            reuse_address=True,
            ssl=self._ssl,
            ssl_handshake_timeout=10.0 if self._ssl is not None else None,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        log.info("listening on %s:%d", self.host, self.port)

    def _connection(self) -> Connection:
        self._next_id += 1
        conn = Connection(
            self._handler,
            ConnectionInfo("?", self._listener, self._next_id),
            max_request_bytes=self._max_request_bytes,
            max_queued=self._max_queued,
            idle_timeout_s=self._idle_timeout_s,
            on_open=self._opened,
            on_close=self._connections.discard,
        )
        return conn

    def _opened(self, conn: Connection, transport: asyncio.BaseTransport) -> None:
        # registered once up: a TLS handshake that fails never makes a connection
        self._connections.add(conn)
        if self._on_connect is not None:
            self._on_connect(conn.info, transport)

    async def stop(self) -> None:
        """Stop accepting, then close every connection (unanswered requests are dropped)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        for _ in range(50):  # connection_lost runs on the next loop iterations
            if not self._connections:
                break
            await asyncio.sleep(0.01)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
