"""Requests from this broker to other brokers by id: one pipelined connection per broker.

Coordinators use it to reach partition leaders (WriteTxnMarkers) and partition leaders to
reach transaction coordinators (AddPartitionsToTxn verification, KIP-890). A request for
this broker itself goes to ``local_handler`` without a socket. Addresses come from
``address_of`` (the metadata cache) at connect time; a connection that failed is dropped and
the next request to that broker connects again, so a broker that moved or restarted is
found. Retrying is the caller's business: a failed request raises ``ConnectionError`` or
``TimeoutError``, and ``LookupError`` when the broker's address is unknown.

Concurrency: event loop only; connects to one broker are serialised by a per-broker lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.network.client import BrokerConnection
from kafka_security.client_security import ClientSecurity

__all__ = ["BrokerPool"]

log = logging.getLogger(__name__)

LocalHandler = Callable[[int, int, Any], Awaitable[Any]]
AddressOf = Callable[[int], tuple[str, int] | None]


class BrokerPool:
    """Connections from this broker to the others, opened on demand."""

    def __init__(
        self,
        broker_id: int,
        address_of: AddressOf,
        local_handler: LocalHandler | None = None,
        *,
        client_id: str,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self._security = security
        self.broker_id = broker_id
        self._address_of = address_of
        self._local_handler = local_handler
        self._client_id = client_id
        self._request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._closed = False

    async def request(self, target: int, api_key: int, api_version: int, body: Any) -> Any:
        """Send ``body`` to broker ``target`` and return its response entity."""
        if self._closed:
            raise ConnectionError("the broker pool is closed")
        if target == self.broker_id:
            if self._local_handler is None:
                raise ConnectionError("no local handler for requests to this broker")
            return await self._local_handler(api_key, api_version, body)
        conn = await self._connection(target)
        try:
            return await conn.request(api_key, api_version, body)
        except (ConnectionError, TimeoutError):
            self._drop(target, conn)
            raise

    def set_local_handler(self, handler: LocalHandler) -> None:
        """How requests for this broker itself are served (the dispatcher, no socket)."""
        self._local_handler = handler

    async def _connection(self, target: int) -> BrokerConnection:
        lock = self._locks.setdefault(target, asyncio.Lock())
        async with lock:
            conn = self._connections.get(target)
            if conn is not None and conn.connected:
                return conn
            address = self._address_of(target)
            if address is None:
                raise LookupError(f"the address of broker {target} is unknown")
            host, port = address
            conn = BrokerConnection(
                host,
                port,
                client_id=self._client_id,
                connect_timeout_s=self._connect_timeout_s,
                request_timeout_s=self._request_timeout_s,
                security=self._security,
            )
            await conn.connect()
            self._connections[target] = conn
            return conn

    def _drop(self, target: int, conn: BrokerConnection) -> None:
        if self._connections.get(target) is conn:
            del self._connections[target]
        task = asyncio.get_running_loop().create_task(conn.close())
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def close(self) -> None:
        self._closed = True
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()
