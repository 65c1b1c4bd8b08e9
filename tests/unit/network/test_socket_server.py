"""The asyncio server: in-order responses, frame limits, idle timeout, isolation of a bad
connection (broker/network/socket_server.py), with a stand-in request handler."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest

from broker.network.socket_server import CloseConnection, ConnectionInfo, Response, SocketServer

pytestmark = pytest.mark.unit


async def _echo_after(conn: ConnectionInfo, frame: bytes) -> Response | None:
    """Frame = delay_ms (int32) + payload; answers payload after the delay; b'close' closes,
    b'none' sends no response."""
    (delay,) = struct.unpack_from(">i", frame)
    payload = frame[4:]
    await asyncio.sleep(delay / 1000)
    if payload == b"close":
        raise CloseConnection("asked to")
    if payload == b"none":
        return None
    return Response([payload[:2], payload[2:]], len(payload))


def _frame(delay_ms: int, payload: bytes) -> bytes:
    body = struct.pack(">i", delay_ms) + payload
    return struct.pack(">i", len(body)) + body


async def _read(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def _with_server(fn, **kw):  # type: ignore[no-untyped-def]
    server = SocketServer("127.0.0.1", 0, _echo_after, **kw)
    await server.start()
    try:
        return await fn(server.port)
    finally:
        await server.stop()


def test_responses_come_back_in_request_order() -> None:
    async def run(port: int) -> list[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_frame(200, b"first") + _frame(0, b"none") + _frame(0, b"second"))
        got = [await _read(reader), await _read(reader)]
        writer.close()
        return got

    assert asyncio.run(_with_server(run)) == [b"first", b"second"]


def test_oversized_frame_closes_only_that_connection() -> None:
    async def run(port: int) -> tuple[bytes, bytes]:
        bad_r, bad_w = await asyncio.open_connection("127.0.0.1", port)
        good_r, good_w = await asyncio.open_connection("127.0.0.1", port)
        bad_w.write(struct.pack(">i", 200 * 2**20))  # announce 200 MB, send nothing more
        await bad_w.drain()
        closed = await asyncio.wait_for(bad_r.read(), 5)
        good_w.write(_frame(0, b"still-served"))
        answer = await _read(good_r)
        good_w.close()
        return closed, answer

    closed, answer = asyncio.run(_with_server(run, max_request_bytes=1024))
    assert closed == b""
    assert answer == b"still-served"


def test_negative_size_closes_the_connection() -> None:
    async def run(port: int) -> bytes:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(struct.pack(">i", -5))
        return await asyncio.wait_for(r.read(), 5)

    assert asyncio.run(_with_server(run)) == b""


def test_handler_close_drops_connection_after_earlier_responses() -> None:
    async def run(port: int) -> tuple[bytes, bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_frame(0, b"ok") + _frame(0, b"close") + _frame(0, b"never"))
        first = await _read(r)
        rest = await asyncio.wait_for(r.read(), 5)
        return first, rest

    assert asyncio.run(_with_server(run)) == (b"ok", b"")


def test_idle_connections_are_closed() -> None:
    async def run(port: int) -> bytes:
        r, _w = await asyncio.open_connection("127.0.0.1", port)
        return await asyncio.wait_for(r.read(), 5)

    assert asyncio.run(_with_server(run, idle_timeout_s=0.2)) == b""


def test_connection_that_sent_requests_is_closed_when_idle() -> None:
    async def run(port: int) -> tuple[bytes, bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_frame(0, b"one"))
        first = await _read(r)
        return first, await asyncio.wait_for(r.read(), 5)

    assert asyncio.run(_with_server(run, idle_timeout_s=0.2)) == (b"one", b"")


def test_slow_request_in_flight_is_not_idle() -> None:
    async def run(port: int) -> bytes:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_frame(600, b"slow"))  # handler takes longer than the idle timeout
        return await asyncio.wait_for(_read(r), 5)

    assert asyncio.run(_with_server(run, idle_timeout_s=0.2)) == b"slow"


def test_sendfile_now_sends_what_the_socket_takes_without_moving_the_file(
    tmp_path: Path,
) -> None:
    """The write loop's fast path: ``os.sendfile`` at the region's offset until the socket
    would block; the bytes that arrive are the region's, in order, and the shared file's own
    position never moves (appends and other readers use it)."""
    import socket as socket_mod

    from broker.network.socket_server import sendfile_now as _sendfile_now

    data = os.urandom(8 << 20)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    a, b = socket_mod.socketpair()
    a.setblocking(False)
    with a, b, path.open("rb") as f:
        f.seek(123)

        class Region:
            file = f
            position = 1000
            size = len(data) - 1000

        sent = _sendfile_now(a.fileno(), Region())
        assert 0 < sent < Region.size  # the socket buffer filled: the rest is the caller's
        assert f.tell() == 123
        got = bytearray()
        while len(got) < sent:
            got += b.recv(1 << 20)
        assert bytes(got) == data[1000 : 1000 + sent]
        small = Region()
        small.size = 4096  # type: ignore[misc]
        assert _sendfile_now(a.fileno(), small) == 4096
        assert b.recv(8192) == data[1000:5096]


def test_eager_and_deferred_requests_take_effect_in_arrival_order() -> None:
    """A request whose handler first yields a bare None (the dispatcher defers requests
    that must run in a task) is not overtaken by a later request of the same read that
    could have run eagerly: side effects happen in arrival order, responses in order."""
    effects: list[bytes] = []

    async def handler(conn: ConnectionInfo, frame: bytes) -> Response | None:
        if frame.startswith(b"defer") and asyncio.current_task() is None:
            await asyncio.sleep(0)  # the bare yield, as the dispatcher's
        effects.append(frame)  # the order-sensitive synchronous work
        if frame.endswith(b"wait"):
            await asyncio.sleep(0.05)  # a real suspension after the work
        return Response([frame], len(frame))

    async def run() -> list[bytes]:
        server = SocketServer("127.0.0.1", 0, handler)
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            frames = [b"eager-1", b"defer-2", b"eager-3-wait", b"eager-4", b"defer-5", b"e6"]
            w.write(b"".join(struct.pack(">i", len(f)) + f for f in frames))
            got = [await asyncio.wait_for(_read(r), 5) for _ in frames]
            w.close()
            return got
        finally:
            await server.stop()

    got = asyncio.run(run())
    order = [b"eager-1", b"defer-2", b"eager-3-wait", b"eager-4", b"defer-5", b"e6"]
    assert effects == order
    assert got == order


def test_handler_exception_from_an_awaited_future_closes_only_after_earlier_answers() -> None:
    async def handler(conn: ConnectionInfo, frame: bytes) -> Response | None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if frame == b"boom":
            asyncio.get_running_loop().call_later(0.01, fut.set_exception, RuntimeError("x"))
        else:
            asyncio.get_running_loop().call_later(0.01, fut.set_result, None)
        await fut  # suspends: continued by the connection's task
        return Response([frame], len(frame))

    async def run() -> tuple[bytes, bytes]:
        server = SocketServer("127.0.0.1", 0, handler)
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(b"".join(struct.pack(">i", len(f)) + f for f in (b"ok", b"boom", b"no")))
            first = await asyncio.wait_for(_read(r), 5)
            rest = await asyncio.wait_for(r.read(), 5)
            return first, rest
        finally:
            await server.stop()

    assert asyncio.run(run()) == (b"ok", b"")


def test_many_pipelined_requests_past_the_queue_limit_are_all_answered_in_order() -> None:
    """At ``max_queued`` pending requests the connection stops reading (backpressure) and
    resumes as responses leave; nothing is lost or reordered."""

    async def run() -> list[bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", port_box[0])
        payloads = [f"r{i:04d}".encode() for i in range(300)]
        w.write(b"".join(_frame(i % 3, p) for i, p in enumerate(payloads)))
        got = [await asyncio.wait_for(_read(r), 10) for _ in payloads]
        w.close()
        return got

    port_box: list[int] = []

    async def with_port(port: int) -> list[bytes]:
        port_box.append(port)
        return await run()

    got = asyncio.run(_with_server(with_port, max_queued_requests=4))
    assert got == [f"r{i:04d}".encode() for i in range(300)]


def test_requests_sent_before_the_client_half_closes_are_answered() -> None:
    async def run(port: int) -> list[bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_frame(50, b"slow") + _frame(0, b"fast"))
        w.write_eof()
        got = [await asyncio.wait_for(_read(r), 5), await asyncio.wait_for(_read(r), 5)]
        assert await asyncio.wait_for(r.read(), 5) == b""  # then the broker closes
        return got

    assert asyncio.run(_with_server(run)) == [b"slow", b"fast"]


def test_resume_throws_a_cancellation_into_the_handler() -> None:
    """Cancelling the task that continues an eagerly started handler (the connection went
    away) cancels the handler where it waits, so its clean-up runs."""
    from broker.network.connection import _resume

    cleaned: list[str] = []

    async def handler() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise
        return "done"

    async def run() -> None:
        coro = handler()
        yielded = coro.send(None)  # the eager first step: waits on sleep's future
        task = asyncio.get_running_loop().create_task(_resume(coro, yielded))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert cleaned == ["cancelled"]


def test_a_response_whose_segment_file_was_closed_drops_only_that_connection(
    tmp_path: Path,
) -> None:
    """A fetch response still holds a segment's file when the log is closed under it (its
    log directory failed, or the topic was deleted): that connection is closed, not left
    with a dead writer, and the server keeps serving."""
    from dataclasses import dataclass

    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * 1000)
    closed = path.open("rb")
    closed.close()

    @dataclass
    class Region:
        file: object
        position: int
        size: int

    async def handler(conn: ConnectionInfo, frame: bytes) -> Response | None:
        if frame == b"file":
            return Response([b"head", Region(closed, 0, 100)], 104)
        return Response([frame], len(frame))

    async def run() -> tuple[bytes, bytes]:
        server = SocketServer("127.0.0.1", 0, handler)
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(struct.pack(">i", 4) + b"file")
            await w.drain()
            dropped = await asyncio.wait_for(r.read(), 5)  # EOF: the connection was closed
            w.close()
            r2, w2 = await asyncio.open_connection("127.0.0.1", server.port)
            w2.write(struct.pack(">i", 2) + b"ok")
            await w2.drain()
            answer = await asyncio.wait_for(_read(r2), 5)
            w2.close()
            return dropped, answer
        finally:
            await server.stop()

    dropped, answer = asyncio.run(run())
    assert b"x" not in dropped  # no file bytes were sent
    assert answer == b"ok"


def test_a_bad_frame_after_a_slow_request_still_lets_that_request_answer() -> None:
    """As Kafka, which reads one request at a time per connection: a request the
    connection cannot take (an oversized frame, a malformed request) closes it only after
    the earlier requests are answered, and nothing after it is read."""

    async def run(port: int) -> tuple[bytes, bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_frame(100, b"slow") + struct.pack(">i", 5 * 2**20) + _frame(0, b"after"))
        first = await asyncio.wait_for(_read(r), 5)
        rest = await asyncio.wait_for(r.read(), 5)
        return first, rest

    assert asyncio.run(_with_server(run, max_request_bytes=1024)) == (b"slow", b"")


def test_requests_after_a_malformed_one_are_not_run() -> None:
    ran: list[bytes] = []

    async def handler(conn: ConnectionInfo, frame: bytes) -> Response | None:
        if frame == b"bad":
            raise CloseConnection("malformed")
        ran.append(frame)
        return Response([frame], len(frame))

    async def run() -> tuple[bytes, bytes]:
        server = SocketServer("127.0.0.1", 0, handler)
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(b"".join(struct.pack(">i", len(f)) + f for f in (b"one", b"bad", b"two")))
            first = await asyncio.wait_for(_read(r), 5)
            return first, await asyncio.wait_for(r.read(), 5)
        finally:
            await server.stop()

    assert asyncio.run(run()) == (b"one", b"")
    assert ran == [b"one"]


def test_a_close_decided_when_writing_resumes_loses_the_connection_once() -> None:
    """Found by the long fuzz run (run 6 in RELIABILITY.md): a response big enough to
    pause writing, then a request whose handler closes the connection. When the client read
    and the transport's buffer drained, resume_writing wrote on and aborted from inside the
    transport's write-ready callback, which then lost the connection itself too: asyncio
    logged "Exception in callback _call_connection_lost" (AttributeError)."""
    errors: list[dict[str, object]] = []

    async def run(port: int) -> tuple[int, bytes]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_frame(0, b"x" * (8 << 20)) + _frame(0, b"close"))
        await asyncio.sleep(0.3)  # the server's buffer fills: writing pauses
        first = await _read(r)
        rest = await asyncio.wait_for(r.read(), 5)
        await asyncio.sleep(0.2)  # a second connection_lost would run now
        w.close()
        return len(first), rest

    assert asyncio.run(_with_server(run)) == (8 << 20, b"")
    assert errors == []
