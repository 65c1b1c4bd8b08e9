"""The inter-broker client: one pipelined TCP connection to a Kafka-protocol broker.

Theory of operation. A request is framed as ``size int32`` + request header + body. The
header is v1 (``api_key int16, api_version int16, correlation_id int32, client_id nullable
string``) or, when the request body is flexible, v2 (v1 plus an empty tagged-field section).
Each request gets the next correlation id and a future in the pending table, and its frame
is written under a lock (writes are serialised, one whole frame at a time). A single reader
task, owned by the connection, reads size-prefixed response frames, takes the correlation id
from the response header (v0: ``correlation_id int32``; v1, used for flexible responses
except ApiVersions per KIP-511, adds tagged fields), decodes the body with the kio reader for
the request's (api_key, api_version) and resolves that request's future. Responses are
matched by correlation id, so any number of requests may be in flight (pipelining).

Failure: when the connection is lost every in-flight request fails with
``ConnectionError``. A request that times out raises ``TimeoutError`` and closes the
connection (the other in-flight requests fail with ``ConnectionError``), as Kafka's
NetworkClient disconnects on a request timeout: a late response could otherwise be read as
the answer to something else after a retry. ``connect`` may be called again after a failure.

Concurrency: everything runs on one event loop; the reader task is created by ``connect``
and cancelled and awaited by ``close`` (or by the next ``connect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from functools import cache
from typing import Any

from kio.serial import entity_reader

from broker.protocol import fetch_response, registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.framing import size_prefix, skip_tagged_fields
from kafka_security.client_security import ClientSecurity, exchange_requests
from kafka_security.sasl_mechanisms import SaslAuthenticationError, make_client

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">hhih")
_I32 = struct.Struct(">i")
# A response larger than this is treated as a broken stream (Kafka's socket.receive limit
# for inter-broker responses is far below it).
_MAX_RESPONSE_BYTES = 2**31 - 1


# Responses decoded by hand: the follower's Fetch, whose records kio would copy out of the
# frame (see broker/protocol/fetch_response.py).
_FAST_READERS: dict[tuple[int, int], Any] = {
    (ApiKey.FETCH, 12): fetch_response.decode_response_v12,
}


@cache
def _response_reader(api_key: int, api_version: int) -> Any:
    fast = _FAST_READERS.get((api_key, api_version))
    if fast is not None:
        return fast
    return entity_reader(registry.response_class(api_key, api_version))


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    """Request header v1, or v2 (with an empty tagged-field section) when ``flexible``."""
    if client_id is None:
        head = _HEADER.pack(api_key, api_version, correlation_id, -1)
    else:
        raw = client_id.encode("utf-8")
        head = _HEADER.pack(api_key, api_version, correlation_id, len(raw)) + raw
    return head + b"\x00" if flexible else head


def _request_is_flexible(api_key: int, api_version: int, body: Any) -> bool:
    flexible = getattr(type(body), "__flexible__", None)
    if isinstance(flexible, bool):
        return flexible
    return registry.is_flexible(api_key, api_version)


class BrokerConnection:
    """One TCP connection to a Kafka-protocol broker; pipelined requests, responses matched
    by correlation id.

    Wire format: see the module docstring. Concurrency: event loop only; ``request`` may be
    called concurrently from many coroutines.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        """``security``: TLS and SASL for a secured inter-broker listener (None: plaintext)."""
        self.security = security
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._next_correlation_id = 0
        self._connected = False

    def __repr__(self) -> str:
        state = "connected" if self._connected else "disconnected"
        return f"BrokerConnection({self.host}:{self.port}, {state})"

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def in_flight(self) -> int:
        """Requests sent (or being sent) whose response has not arrived."""
        return len(self._pending)

    async def connect(self) -> None:
        """Open the connection; raises ``ConnectionError`` (any socket error) or
        ``TimeoutError`` after ``connect_timeout_s``."""
        if self._connected:
            raise RuntimeError(f"{self!r} is already connected")
        await self._reap_reader()
        try:
            security = self.security
            ctx = security.ssl_context if security is not None else None
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=ctx,
                    server_hostname=self.host if ctx is not None else None,
                )
        except TimeoutError:
            raise TimeoutError(
                f"connecting to {self.host}:{self.port} timed out after {self.connect_timeout_s}s"
            ) from None
        except OSError as exc:
            if isinstance(exc, ConnectionError):
                raise
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader, self._writer = reader, writer
        self._connected = True
        self._reader_task = asyncio.create_task(
            self._read_loop(reader), name=f"broker-client-reader {self.host}:{self.port}"
        )
        if security is not None and security.sasl:
            try:
                await self._authenticate(security)
            except BaseException:
                await self.close()
                raise

    async def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes; a
        refusal raises ``ConnectionError`` (never with the password)."""
        handshake, make = exchange_requests(security)
        response = await self.request(17, 1, handshake)
        if int(response.error_code) != 0:
            raise ConnectionError(
                f"{self.host}:{self.port} refused SASL mechanism {security.mechanism} "
                f"(enabled: {', '.join(response.mechanisms)})"
            )
        assert security.mechanism and security.username is not None
        client = make_client(security.mechanism, security.username, security.password or "")
        token: bytes | None = client.first()
        while token is not None and not client.complete:
            reply = await self.request(36, 2, make(token))
            if int(reply.error_code) != 0:
                raise ConnectionError(
                    f"SASL authentication to {self.host}:{self.port} as {security.username} "
                    f"failed: {reply.error_message}"
                )
            try:
                token = client.respond(bytes(reply.auth_bytes))
            except SaslAuthenticationError as exc:
                raise ConnectionError(f"{self.host}:{self.port}: {exc}") from None

    async def request(
        self, api_key: int, api_version: int, body: Any, *, timeout_s: float | None = None
    ) -> Any:
        """Send ``body`` (a kio request entity) and return the decoded response entity.

        Raises ``ConnectionError`` if the connection is not open or is lost before the
        response arrives, ``TimeoutError`` after ``timeout_s`` (default
        ``request_timeout_s``), which also closes the connection.
        """
        writer = self._writer
        if not self._connected or writer is None:
            raise ConnectionError(f"not connected to {self.host}:{self.port}")
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        flexible = _request_is_flexible(api_key, api_version, body)
        payload = registry.encode(body)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        header = encode_request_header(
            api_key, api_version, correlation_id, self.client_id, flexible
        )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, api_key, api_version)
        try:
            async with asyncio.timeout(timeout):
                async with self._write_lock:
                    if not self._connected:
                        raise ConnectionError(f"connection to {self.host}:{self.port} lost")
                    try:
                        writer.write(size_prefix(len(header) + len(payload)) + header + payload)
                        await writer.drain()
                    except (ConnectionError, OSError) as exc:
                        self._pending.pop(correlation_id, None)
                        self._fail(ConnectionError(f"write to {self.host}:{self.port}: {exc}"))
                        raise ConnectionError(
                            f"write to {self.host}:{self.port} failed: {exc}"
                        ) from exc
                return await future
        except TimeoutError:
            self._pending.pop(correlation_id, None)
            self._fail(
                ConnectionError(
                    f"connection to {self.host}:{self.port} closed after a request timed out"
                )
            )
            raise TimeoutError(
                f"request api_key={api_key} v{api_version} to {self.host}:{self.port} "
                f"timed out after {timeout}s"
            ) from None
        finally:
            self._pending.pop(correlation_id, None)

    async def close(self) -> None:
        """Close the connection; in-flight requests fail with ``ConnectionError``."""
        self._fail(ConnectionError(f"connection to {self.host}:{self.port} closed"))
        await self._reap_reader()

    def _fail(self, exc: ConnectionError) -> None:
        """Drop the connection and fail every in-flight request (synchronous, idempotent)."""
        self._connected = False
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.transport.abort()
        pending, self._pending = self._pending, {}
        for future, _key, _version in pending.values():
            if not future.done():
                future.set_exception(exc)
        task = self._reader_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()

    async def _reap_reader(self) -> None:
        task, self._reader_task = self._reader_task, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                prefix = await reader.readexactly(4)
                (size,) = _I32.unpack(prefix)
                if size < 4 or size > _MAX_RESPONSE_BYTES:
                    raise ConnectionError(f"invalid response size {size}")
                frame = await reader.readexactly(size)
                (correlation_id,) = _I32.unpack_from(frame, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    log.debug(
                        "%s:%d: response for unknown correlation id %d (request abandoned)",
                        self.host,
                        self.port,
                        correlation_id,
                    )
                    continue
                future, api_key, api_version = entry
                if future.done():
                    continue
                try:
                    pos = 4
                    if registry.response_uses_flexible_header(api_key, api_version):
                        pos = skip_tagged_fields(frame, pos)
                    value, _size = _response_reader(api_key, api_version)(frame, pos)
                except Exception as exc:  # noqa: BLE001 - a bad body fails only its request
                    future.set_exception(exc)
                else:
                    future.set_result(value)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            log.debug("connection to %s:%d lost: %r", self.host, self.port, exc)
            self._fail(ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))
        except Exception as exc:
            log.exception("reader for %s:%d failed", self.host, self.port)
            self._fail(ConnectionError(f"connection to {self.host}:{self.port} failed: {exc!r}"))


def request_sync(
    host: str,
    port: int,
    api_key: int,
    api_version: int,
    body: Any,
    *,
    client_id: str = "millrace-cli",
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> Any:
    """Connect (with ``security``'s TLS and SASL, if any), send one request, return its
    response and close (for CLI tools; runs its own event loop, so it must not be called
    from a running loop)."""

    async def once() -> Any:
        conn = BrokerConnection(
            host,
            port,
            client_id=client_id,
            connect_timeout_s=timeout_s,
            request_timeout_s=timeout_s,
            security=security,
        )
        try:
            await conn.connect()
            return await conn.request(api_key, api_version, body)
        finally:
            await conn.close()

    return asyncio.run(once())
