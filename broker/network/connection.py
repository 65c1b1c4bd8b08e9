"""One client connection of the broker: an ``asyncio.Protocol`` that cuts frames out of the
bytes it receives, runs each request's handler, and writes the responses in request order.

Theory of operation. ``data_received`` cuts size-prefixed frames out of the stream and
starts each request's handler at once, in arrival order, by stepping its coroutine inside
the callback ("eager start", what Python 3.12's eager task factory does): a handler that
finishes without suspending (ApiVersions, ListOffsets, a Fetch with data, an acks=1 Produce)
costs no task, no queue and no extra event-loop wake-up, and its response is written before
the callback returns. A handler that suspends is continued by a task (:func:`_resume`) from
where it stopped. Handlers do their order-sensitive synchronous work before their first
suspension, so requests on one connection take effect in arrival order; a handler that must
not run eagerly (the dispatcher decides: one that may use ``asyncio.timeout`` or the
inter-broker client before suspending) yields a bare ``None`` first, and then every later
request of the same ``data_received`` call is started as a task too, so the ``call_soon``
order keeps the arrival order.

Responses leave strictly in request order (Kafka's contract), whatever order handlers finish
in: finished responses wait in ``_pending`` behind the oldest unfinished one. A response is
a list of chunks: ``bytes`` (runs of them are joined into one write: one syscall and, with
TCP_NODELAY, one segment) or a file region (an object with ``file``, ``position``, ``size``)
sent with ``os.sendfile`` straight from the page cache, directly while the socket takes it
and with ``loop.sendfile`` for what is left.

Flow control: at most ``max_queued`` requests are pending per connection; at that many the
transport stops reading (TCP then pushes back on the client). While the transport's write
buffer is above its high-water mark (``pause_writing``) no further response is written.

Quota throttling (KIP-219): a handler that throttles its client sets
``ConnectionInfo.throttle_ms``; once that response is written (or, for a request owed no
response, once it is done) the transport stops reading for that long (the channel is
"muted"), as Kafka's processor mutes a throttled channel until its delay ends. Requests
already received behind the throttled one are not started before the mute ends either
(Kafka reads one request at a time, so a pipelining client cannot slip more in).

Limits: a frame larger than ``max_request_bytes`` (or with a negative size) is refused as
soon as its size prefix arrives, before anything is allocated for it; a connection with no
request pending and no bytes received or sent for ``idle_timeout_s`` is closed. A refused
frame, or a handler that raises (the dispatcher raises ``CloseConnection`` for a malformed
request), closes only this connection: nothing after it is read, the requests before it are
answered, then the connection closes (Kafka reads one request at a time per connection, so
its clients see the same).

Concurrency: everything runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, cast

from broker.protocol.framing import size_prefix
from broker.protocol.response import CloseConnection, ConnectionInfo, FileRegion, Response

log = logging.getLogger("broker.network.socket_server")

# A request handler takes the connection and the whole request frame and returns the
# response, or None when no response is owed (Produce with acks=0). A frame of
# WRITABLE_FRAME_BYTES or more is a bytearray the handler may change in place (the produce
# path patches offsets into its record batches instead of copying them), a smaller one bytes.
RequestHandler = Callable[[ConnectionInfo, bytes | bytearray], Coroutine[Any, Any, Response | None]]

WRITABLE_FRAME_BYTES = 64 * 1024
"""Frames at least this large are handed over as a (writable) bytearray."""

_BYTES = (bytes, bytearray, memoryview)


def _fileno(file: Any) -> int:
    """The descriptor of a segment file a response holds; ``OSError`` (EBADF), which closes
    the connection, if the log was closed meanwhile (its directory failed, or its topic was
    deleted) instead of the ``ValueError`` a closed Python file raises."""
    if file.closed:
        raise OSError(errno.EBADF, "the segment file was closed")
    return int(file.fileno())


def sendfile_now(sock_fd: int, region: FileRegion) -> int:
    """Send as much of ``region`` as the socket takes right now (``os.sendfile`` with an
    explicit offset: the shared file's position never moves); returns the bytes sent.

    The common case, a fetch response that fits in the socket's send buffer, then costs one
    system call. Only called when the transport holds no unsent bytes, so nothing is
    reordered."""
    fd = _fileno(region.file)
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


class RegionFile:
    """A view of an open file for ``loop.sendfile`` that never moves the real file's
    position: asyncio seeks the file it is given, and the segment's file is shared."""

    mode = "rb"

    def __init__(self, file: Any) -> None:
        self._fd = _fileno(file)
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


async def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive ``coro`` on from where its eager first step stopped, as a task would: it
    yielded ``yielded`` (a future it waits for, or None for a bare yield: one loop
    iteration). A future's outcome reaches the coroutine when it is resumed (its
    ``__await__`` returns the result or raises); a cancellation of this task is thrown in."""
    first = True
    while True:
        error: BaseException | None = None
        if yielded is None:
            if not first:  # a task's first step already runs on a later iteration
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError as exc:
                    error = exc
        else:
            fut = cast("asyncio.Future[Any]", yielded)
            fut._asyncio_future_blocking = False  # taken over from the coroutine, as a task does
            try:
                await fut
            except BaseException as exc:  # noqa: BLE001 - the coroutine takes the outcome
                # the future's own result or exception reaches the coroutine when it is
                # resumed; only a cancellation of this task that did not cancel the future
                # (it had finished already) is thrown in
                if isinstance(exc, asyncio.CancelledError) and not fut.cancelled():
                    error = exc
        first = False
        try:
            yielded = coro.send(None) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value


class _Pending:
    """A request whose response has not been written: finished (``value`` or ``error``
    set, ``task`` None) or still running in ``task``."""

    __slots__ = ("error", "task", "value")

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.value: Response | None = None
        self.error: BaseException | None = None


class Connection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(
        self,
        handler: RequestHandler,
        info: ConnectionInfo,
        *,
        max_request_bytes: int,
        max_queued: int,
        idle_timeout_s: float,
        on_close: Callable[[Connection], None],
        on_open: Callable[[Connection, asyncio.BaseTransport], None] | None = None,
    ) -> None:
        self.info = info
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        self._max_queued = max_queued
        self._idle_timeout_s = idle_timeout_s
        self._on_close = on_close
        self._on_open = on_open
        self._tls = False  # log bytes are copied, not sent with sendfile, under TLS
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._buf = bytearray()
        self._need = 0  # bytes of the frame being received (0: waiting for a size prefix)
        self._pending: deque[_Pending] = deque()
        self._write_paused = False
        self._read_paused = False
        self._sending: asyncio.Task[None] | None = None  # finishing a response's sendfile
        self._eof = False
        self._closed = False
        self._refusing = False  # a bad request was read: nothing more is
        self._last_activity = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._throttle_timer: asyncio.TimerHandle | None = None  # muted until it fires
        self._throttle_until = 0.0

    # -- asyncio.Protocol --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.info.peer = f"{peer[0]}:{peer[1]}"
        sock = transport.get_extra_info("socket")
        self._tls = transport.get_extra_info("ssl_object") is not None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._tls:
                self._fd = sock.fileno()
        self._idle_timer = self._loop.call_later(self._idle_timeout_s, self._check_idle)
        if self._on_open is not None:
            try:
                self._on_open(self, transport)
            except Exception as exc:  # noqa: BLE001 - e.g. a certificate no rule maps
                log.info("refusing connection %s: %s", self.info.peer, exc)
                self._abort()

    def data_received(self, data: bytes) -> None:
        if self._closed or self._refusing:
            return
        self._last_activity = self._loop.time()
        self._consume(data)

    def _consume(self, data: bytes) -> None:
        """Start the requests whose frames are complete (after ``data``, the buffered bytes);
        keep the rest buffered."""
        buf = self._buf
        if buf:
            buf += data
            view: bytes | bytearray = buf
        else:
            view = data
        pos = 0
        end = len(view)
        eager = True
        while not self._refusing:
            if self._throttle_timer is not None or self.info.throttle_ms:
                break  # throttled: the requests behind wait for the mute to end (KIP-219)
            if self._need == 0:
                if end - pos < 4:
                    break
                size = int.from_bytes(view[pos : pos + 4], "big", signed=True)
                if size < 0 or size > self._max_request_bytes:
                    self._refuse(
                        CloseConnection(
                            f"request of {size} bytes exceeds socket.request.max.bytes "
                            f"{self._max_request_bytes}"
                        )
                    )
                    break
                pos += 4
                self._need = size
            if end - pos < self._need:
                break
            frame = _frame_of(view, pos, pos + self._need)
            pos += self._need
            self._need = 0
            eager = self._start(frame, eager)
        self._keep_rest(buf, view, pos)
        if len(self._pending) >= self._max_queued and not self._read_paused:
            self._read_paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        self._flush()

    def _keep_rest(self, buf: bytearray, view: bytes | bytearray, pos: int) -> None:
        """Keep the bytes of ``view`` after ``pos`` (a frame not yet complete) buffered
        (``buf``, the buffer ``view`` is, when not empty); none once refusing."""
        if self._refusing:
            self._buf = bytearray()
        elif buf:
            del buf[:pos]
        elif pos < len(view):
            self._buf = bytearray(view[pos:])

    def _refuse(self, error: BaseException) -> None:
        """A request this connection cannot take (a bad frame; a malformed request): read
        nothing more; the requests before it are answered, then the connection closes (as
        Kafka, which reads one request at a time per connection, behaves)."""
        entry = _Pending()
        entry.error = error
        self._pending.append(entry)
        self._refusing = True
        if self._transport is not None and not self._read_paused:
            self._read_paused = True
            self._transport.pause_reading()

    def eof_received(self) -> bool:
        # the client will send nothing more: answer what it asked, then close
        self._eof = True
        # under TLS the transport closes on EOF whatever is returned (asyncio warns)
        return not self._tls and (bool(self._pending) or self._sending is not None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        for entry in self._pending:
            if entry.task is not None:
                entry.task.cancel()
        self._pending.clear()
        if self._sending is not None:
            self._sending.cancel()
        self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        # Not from here: this runs inside the transport's write-ready callback, which loses
        # the connection itself when it is closing and its buffer is empty; a close or an
        # abort decided by a flush from here would lose it twice (CPython 3.11).
        self._loop.call_soon(self._flush)

    # -- requests --

    def _start(self, frame: bytes | bytearray, eager: bool) -> bool:
        """Start the handler of one request; returns whether the next request of this batch
        may start eagerly."""
        entry = _Pending()
        self._pending.append(entry)
        coro = self._handler(self.info, frame)
        if not eager:
            entry.task = self._loop.create_task(self._run(entry, coro, None, started=False))
            return False
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            entry.value = stop.value
            return True
        except BaseException as exc:  # noqa: BLE001 - becomes this connection's close
            self._pending.pop()
            self._refuse(exc)
            return True
        entry.task = self._loop.create_task(self._run(entry, coro, yielded, started=True))
        # a bare yield before doing anything (the dispatcher defers a request that must
        # not run eagerly): later requests of this batch must not overtake it
        return yielded is not None

    async def _run(
        self,
        entry: _Pending,
        coro: Coroutine[Any, Any, Response | None],
        yielded: Any,
        *,
        started: bool,
    ) -> None:
        """The task of a request that did not finish eagerly: run it to its end, then write
        what can be written (in this step, not in a later done-callback)."""
        try:
            entry.value = await (_resume(coro, yielded) if started else coro)
        except asyncio.CancelledError:
            entry.error = CloseConnection("request cancelled")
            entry.task = None
            raise
        except BaseException as exc:  # noqa: BLE001 - becomes this connection's close
            entry.error = exc
        entry.task = None
        self._flush()

    def _flush(self) -> None:
        """Write the finished responses at the head of ``_pending``, in order."""
        pending = self._pending
        while pending and not self._write_paused and self._sending is None and not self._closed:
            entry = pending[0]
            if entry.task is not None:
                break
            pending.popleft()
            if entry.error is not None:
                if isinstance(entry.error, CloseConnection):
                    log.info("closing connection %s: %s", self.info.peer, entry.error)
                else:
                    log.error("request handler failed on %s", self.info.peer, exc_info=entry.error)
                self._abort()
                return
            if entry.value is not None:
                self._last_activity = self._loop.time()
                try:
                    self._write(entry.value)
                except OSError as exc:  # a segment file closed under the response
                    log.info("closing connection %s: %s", self.info.peer, exc)
                    self._abort()
                    return
            if self.info.close_after_ms is not None:
                self._close_later(self.info.close_after_ms)
                return
            if self.info.throttle_ms:
                self._mute(self.info.throttle_ms)
        if (
            self._read_paused
            and len(pending) < self._max_queued
            and not self._closed
            and not self._refusing
            and self._throttle_timer is None
        ):
            self._read_paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        if self._eof and not pending and self._sending is None and not self._closed:
            assert self._transport is not None
            self._transport.close()

    def _write(self, response: Response) -> None:
        """Write one response; a file region the socket does not take at once is finished
        by a task, and nothing else is written until it is."""
        transport = self._transport
        assert transport is not None
        out: list[bytes | bytearray | memoryview] = [size_prefix(response.size)]
        chunks = response.chunks
        for i, chunk in enumerate(chunks):
            if isinstance(chunk, _BYTES):
                out.append(chunk)
                continue
            if self._tls:  # no zero-copy under TLS: the bytes pass through the SSL object
                out.append(os.pread(_fileno(chunk.file), chunk.size, chunk.position))
                continue
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            out = []
            sent = 0
            if self._fd >= 0 and not transport.get_write_buffer_size():
                sent = sendfile_now(self._fd, chunk)
            if sent < chunk.size:
                self._sending = self._loop.create_task(self._finish(chunks, i, sent))
                self._sending.add_done_callback(self._sent)
                return
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def _finish(self, chunks: list[Any], index: int, sent: int) -> None:
        """Send the rest of ``chunks[index]`` (``sent`` bytes of it went) and the chunks
        after it, waiting for the socket as needed."""
        transport = self._transport
        assert transport is not None
        for chunk in chunks[index:]:
            if isinstance(chunk, _BYTES):
                transport.write(chunk)
                continue
            if sent == 0 and self._fd >= 0 and not transport.get_write_buffer_size():
                sent = sendfile_now(self._fd, chunk)
            if sent < chunk.size:
                await self._loop.sendfile(
                    transport,
                    cast(Any, RegionFile(chunk.file)),
                    chunk.position + sent,
                    chunk.size - sent,
                )
            sent = 0

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.debug("connection %s write failed: %s", self.info.peer, exc)
            self._abort()
            return
        self._last_activity = self._loop.time()
        self._flush()

    # -- quota throttling --

    def _mute(self, ms: int) -> None:
        """Read nothing for ``ms`` milliseconds (a throttled client's response went out)."""
        self.info.throttle_ms = 0
        until = self._loop.time() + ms / 1000.0
        if self._throttle_timer is not None:
            if until <= self._throttle_until:
                return
            self._throttle_timer.cancel()
        self._throttle_until = until
        self._throttle_timer = self._loop.call_at(until, self._unmute)
        if self._transport is not None and not self._read_paused:
            self._read_paused = True
            self._transport.pause_reading()

    def _unmute(self) -> None:
        self._throttle_timer = None
        self._last_activity = self._loop.time()
        if self._buf and not self._closed and not self._refusing:
            self._consume(b"")  # the requests that arrived behind the throttled one
        else:
            self._flush()  # reads again unless something else holds reading paused

    # -- closing --

    def _check_idle(self) -> None:
        if self._closed:
            return
        now = self._loop.time()
        quiet_since = self._last_activity
        if self._pending or self._sending is not None or self._throttle_timer is not None:
            quiet_since = now  # a request in flight, or muted by a quota: not idle
        if now - quiet_since >= self._idle_timeout_s:
            log.info("closing idle connection %s", self.info.peer)
            self._abort()
            return
        self._idle_timer = self._loop.call_at(quiet_since + self._idle_timeout_s, self._check_idle)

    def _close_later(self, delay_ms: int) -> None:
        """The response just written was the last (a failed authentication): read nothing
        more, drop what was pipelined behind it, close after ``delay_ms``."""
        self._refusing = True
        for entry in self._pending:
            if entry.task is not None:
                entry.task.cancel()
        self._pending.clear()
        if self._transport is not None and not self._read_paused:
            self._read_paused = True
            self._transport.pause_reading()
        self._loop.call_later(delay_ms / 1000.0, self._abort)

    def _abort(self) -> None:
        if self._transport is not None and not self._closed:
            self._closed = True
            self._transport.abort()

    def close(self) -> None:
        """Close the connection now, dropping unanswered requests (broker shutdown)."""
        self._abort()


def _frame_of(view: bytes | bytearray, start: int, end: int) -> bytes | bytearray:
    """One copy of the frame ``view[start:end]``, through a view (slicing the bytearray and
    then bytes() would copy twice, a megabyte each for a 1 MB produce); a large frame stays
    a bytearray, so the produce path need not copy its records again to patch them."""
    if end - start >= WRITABLE_FRAME_BYTES:
        return bytearray(memoryview(view)[start:end])
    if type(view) is bytes:
        return view[start:end]
    return bytes(memoryview(view)[start:end])
