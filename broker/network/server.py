"""The asyncio socket server: accept loop and one task pair per connection.

Theory of operation. For each connection a reader task reads size-prefixed frames and
starts a handler task for each request *in arrival order*; handlers do their synchronous
work (e.g. the log append of a produce) before their first ``await``, so requests on one
connection take effect in order. The handler tasks go into a bounded queue
(``queued.max.requests``): when it is full the reader stops reading, which is the
backpressure (TCP pushes back on the client). A writer task takes tasks from the queue in
order and writes each response, so responses always leave in request order even when a
later request finished first (Kafka's contract). A response is a list of chunks: ``bytes``
written to the transport, or a file region (an object with ``file``, ``position``, ``size``)
sent with ``os.sendfile`` (directly while the socket takes it, then ``loop.sendfile`` for
what is left) so fetched log bytes never pass through Python.

Limits: a frame larger than ``socket.request.max.bytes`` (or negative) closes the
connection before anything is allocated; a connection with no request in flight and no
bytes received for ``connections.max.idle.ms`` is closed. A handler that raises for a
malformed request closes only that connection; every other client is unaffected.

Concurrency: everything runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any, cast

from broker.protocol.framing import size_prefix
from broker.protocol.response import Chunk, CloseConnection, ConnectionInfo, FileRegion, Response

__all__ = ["Chunk", "CloseConnection", "ConnectionInfo", "FileRegion", "KafkaServer", "Response"]

log = logging.getLogger(__name__)


def _sendfile_now(sock_fd: int, region: FileRegion) -> int:
    """Send as much of ``region`` as the socket takes right now (``os.sendfile`` with an
    explicit offset: the shared file's position never moves); returns the bytes sent.

    The common case, a fetch response that fits in the socket's send buffer, then costs one
    system call. ``loop.sendfile`` (the rest, when the buffer fills) pauses reading, waits for
    the transport to drain, registers a writer callback and waits for one more event-loop
    wake-up even when everything went out at once. Only called when the transport holds no
    unsent bytes, so nothing is reordered."""
    fd = region.file.fileno()
    sent = 0
    try:
        while sent < region.size:
            n = os.sendfile(sock_fd, fd, region.position + sent, region.size - sent)
            if n == 0:
                break
            sent += n
    except (BlockingIOError, InterruptedError):
        pass
    return sent


class _RegionFile:
    """A view of an open file for ``loop.sendfile`` that never moves the real file's
    position: asyncio seeks the file it is given, and the segment's file is shared."""

    mode = "rb"

    def __init__(self, file: Any) -> None:
        self._fd = file.fileno()
        self._pos = 0

    def fileno(self) -> int:
        return int(self._fd)

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buf: Any) -> int:
        data = os.pread(self._fd, len(buf), self._pos)
        buf[: len(data)] = data
        self._pos += len(data)
        return len(data)


class _Inflight:
    """Requests read from a connection whose response has not been written yet."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


# A request handler takes the connection and the whole request frame and returns the
# response, or None when no response is owed (Produce with acks=0).
RequestHandler = Callable[[ConnectionInfo, bytes], Coroutine[Any, Any, Response | None]]


class KafkaServer:
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
    ) -> None:
        self.host = host
        self.port = port
        self._handler = handler
        self._listener = listener_name
        self._stopping = False
        self._max_request_bytes = max_request_bytes
        self._max_queued = max_queued_requests
        self._idle_timeout_s = idle_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._next_id = 0

    async def start(self) -> None:
        self._stopping = False
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, limit=2**20
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        log.info("listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop accepting, then close every connection."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for _ in range(10):
            # a connection task may miss one cancellation; cancel again until all are gone
            pending = [t for t in self._connections if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending, timeout=0.5)
            for task in pending:
                if not task.done():
                    task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._next_id += 1
        peer = writer.get_extra_info("peername")
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        info = ConnectionInfo(
            f"{peer[0]}:{peer[1]}" if peer else "?", self._listener, self._next_id
        )
        queue: asyncio.Queue[asyncio.Task[Response | None] | None] = asyncio.Queue(self._max_queued)
        inflight = _Inflight()
        writer_task = asyncio.create_task(self._write_loop(queue, writer, info, inflight))
        try:
            await self._read_loop(reader, queue, info, writer_task, inflight)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except CloseConnection as exc:
            log.info("closing connection %s: %s", info.peer, exc)
        except asyncio.CancelledError:
            # stop() cancels connections; end normally (Python 3.11's stream callback
            # would otherwise log every cancelled connection task as an error)
            if not self._stopping:
                raise
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)
            if self._stopping:
                writer_task.cancel()
            if not writer_task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(writer_task), 30)
                except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                    writer_task.cancel()
            with contextlib.suppress(Exception):
                writer.close()
            self._connections.discard(task)

    async def _read_loop(
        self,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[asyncio.Task[Response | None] | None],
        info: ConnectionInfo,
        writer_task: asyncio.Task[None],
        inflight: _Inflight,
    ) -> None:
        while not writer_task.done() and not self._stopping:
            # readexactly consumes nothing until all 4 bytes are there, so a timeout never
            # loses part of a frame; a connection is idle only with no request in flight.
            # (asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow the
            # cancellation stop() sends when the read completes at the same moment.)
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    prefix = await reader.readexactly(4)
            except TimeoutError:
                if inflight.count:
                    continue
                log.info("closing idle connection %s", info.peer)
                return
            size = int.from_bytes(prefix, "big", signed=True)
            if size < 0 or size > self._max_request_bytes:
                raise CloseConnection(
                    f"request of {size} bytes exceeds socket.request.max.bytes "
                    f"{self._max_request_bytes}"
                )
            frame = await reader.readexactly(size)
            handler_task = asyncio.create_task(self._handler(info, frame))
            inflight.count += 1
            await queue.put(handler_task)

    async def _write_loop(
        self,
        queue: asyncio.Queue[asyncio.Task[Response | None] | None],
        writer: asyncio.StreamWriter,
        info: ConnectionInfo,
        inflight: _Inflight,
    ) -> None:
        loop = asyncio.get_running_loop()
        transport = writer.transport
        sock = transport.get_extra_info("socket")
        sock_fd = sock.fileno() if sock is not None else -1
        try:
            while True:
                task = await queue.get()
                if task is None:
                    return
                try:
                    response = await task
                except CloseConnection as exc:
                    log.info("closing connection %s: %s", info.peer, exc)
                    transport.abort()
                    return
                except Exception:
                    # a handler bug: close this connection only, and say so once
                    log.exception("request handler failed; closing connection %s", info.peer)
                    transport.abort()
                    return
                if response is None:
                    inflight.count -= 1
                    continue
                # Bytes go out joined, one write per run of them (the size prefix with the
                # response head, or a whole in-memory response): one syscall and, with
                # TCP_NODELAY, one segment instead of one per chunk.
                out: list[bytes | bytearray | memoryview] = [size_prefix(response.size)]
                for chunk in response.chunks:
                    if isinstance(chunk, bytes | bytearray | memoryview):
                        out.append(chunk)
                        continue
                    writer.write(b"".join(out))
                    out = []
                    sent = 0
                    if sock_fd >= 0 and not transport.get_write_buffer_size():
                        sent = _sendfile_now(sock_fd, chunk)
                    if sent < chunk.size:
                        await writer.drain()
                        await loop.sendfile(
                            transport,
                            cast(Any, _RegionFile(chunk.file)),
                            chunk.position + sent,
                            chunk.size - sent,
                        )
                if out:
                    writer.write(out[0] if len(out) == 1 else b"".join(out))
                await writer.drain()
                inflight.count -= 1
        except (ConnectionError, OSError, ValueError) as exc:
            # ValueError: a file region whose file was closed under it
            log.debug("connection %s write failed: %s", info.peer, exc)
            transport.abort()
        finally:
            while not queue.empty():
                pending = queue.get_nowait()
                if pending is not None:
                    pending.cancel()
