"""The inter-broker client (broker/network/client.py) and the controller channel
(broker/controller/channel.py) against real asyncio servers on 127.0.0.1.

The stand-in broker answers ApiVersions from the registry and Metadata by echoing the
requested topic names; a topic name steers it: ``sleep-<ms>`` answers after a delay,
``hang`` never answers, ``close`` closes the connection.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from collections.abc import Awaitable
from typing import Any

import pytest

from broker.controller.channel import ControllerChannel
from broker.network.client import BrokerConnection, request_sync
from broker.network.socket_server import CloseConnection, ConnectionInfo, Response, SocketServer
from broker.protocol import registry
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import parse_request_header, response_header, skip_tagged_fields
from tests.harness.ports import free_port
from tests.harness.waiting import wait_for_async

pytestmark = pytest.mark.unit

HOST = "127.0.0.1"


def _metadata_request(*names: str, version: int = 12) -> Any:
    cls = registry.request_class(3, version)
    topic_cls = registry.nested(cls, "MetadataRequestTopic")
    topics = tuple(registry.build(topic_cls, topic_id=None, name=n) for n in names)
    return registry.build(
        cls,
        topics=topics,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )


def _metadata_response(version: int, names: list[str]) -> Any:
    cls = registry.response_class(3, version)
    broker_cls = registry.nested(cls, "MetadataResponseBroker")
    topic_cls = registry.nested(cls, "MetadataResponseTopic")
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        brokers=(broker_cls(node_id=1, host="h1", port=9092, rack=None),),
        cluster_id="test-cluster",
        controller_id=1,
        topics=tuple(
            registry.build(
                topic_cls, error_code=ErrorCode.none, name=n, topic_id=None, partitions=()
            )
            for n in names
        ),
    )


def _api_versions_request() -> Any:
    return registry.request_class(18, 3)(
        client_software_name="millrace-test", client_software_version="0"
    )


def _topic_names(response: Any) -> list[str]:
    return [t.name for t in response.topics]


class StandIn:
    """A SocketServer with a tiny dispatcher that records what it receives."""

    def __init__(self, port: int = 0) -> None:
        self.server = SocketServer(HOST, port, self._handle)
        self.received: list[tuple[int, int, str | None, Any]] = []
        self.active = 0
        self.max_active = 0
        self.slow = True  # False: ``sleep-<ms>`` answers at once
        self._never = asyncio.Event()

    @property
    def port(self) -> int:
        return self.server.port

    async def __aenter__(self) -> StandIn:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # release hung handlers first: SocketServer.stop waits (up to 30 s) for the response
        # writer of a connection whose handler is still running
        self._never.set()
        await self.server.stop()

    async def _handle(self, conn: ConnectionInfo, frame: bytes) -> Response | None:
        header, pos = parse_request_header(frame)
        key, version = header.api_key, header.api_version
        if registry.is_flexible(key, version):
            pos = skip_tagged_fields(frame, pos)
        request = registry.decode_request(key, version, frame, pos)
        self.received.append((key, version, header.client_id, request))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if key == 18:
                cls = registry.response_class(18, version)
                api_cls = registry.nested(cls, "ApiVersion")
                body: Any = registry.build(
                    cls,
                    error_code=ErrorCode.none,
                    api_keys=tuple(
                        api_cls(api_key=k, min_version=lo, max_version=hi)
                        for k, (_n, lo, hi) in sorted(registry.SUPPORTED_APIS.items())
                    ),
                    throttle_time=datetime.timedelta(0),
                )
            else:
                names = [t.name for t in request.topics]
                for name in names:
                    if name.startswith("sleep-") and self.slow:
                        await asyncio.sleep(int(name[6:]) / 1000)
                    elif name == "hang":
                        await self._never.wait()
                    elif name == "close":
                        raise CloseConnection("asked to")
                body = _metadata_response(version, names)
        finally:
            self.active -= 1
        hdr = response_header(
            header.correlation_id, registry.response_uses_flexible_header(key, version)
        )
        payload = hdr + registry.encode(body)
        return Response([payload], len(payload))


def _run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert leftover == [], leftover

    return asyncio.run(main())


def _ours(task: asyncio.Task[Any]) -> bool:
    return task.get_name().startswith(("controller-channel", "broker-client"))


# -- BrokerConnection -------------------------------------------------------------------


def test_api_versions_v3_round_trip() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            conn = BrokerConnection(HOST, srv.port, client_id="it-me")
            await conn.connect()
            assert conn.connected
            response = await conn.request(18, 3, _api_versions_request())
            await conn.close()
            assert not conn.connected
        assert response.error_code == ErrorCode.none
        keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert keys[3] == registry.SUPPORTED_APIS[3][1:]
        ((key, version, client_id, request),) = srv.received
        assert (key, version, client_id) == (18, 3, "it-me")
        assert request.client_software_name == "millrace-test"

    _run(run())


def test_metadata_v12_round_trip_and_non_flexible_version() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            conn = BrokerConnection(HOST, srv.port, client_id="c")
            await conn.connect()
            v12 = await conn.request(3, 12, _metadata_request("a", "b"))
            v8 = await conn.request(3, 8, _metadata_request("x", version=8))  # header v1
            await conn.close()
        assert _topic_names(v12) == ["a", "b"]
        assert v12.cluster_id == "test-cluster"
        assert [(b.node_id, b.host, b.port) for b in v12.brokers] == [(1, "h1", 9092)]
        assert _topic_names(v8) == ["x"]

    _run(run())


def test_request_sync_from_a_cli_thread() -> None:
    async def run() -> Any:
        async with StandIn() as srv:
            return await asyncio.to_thread(
                request_sync, HOST, srv.port, 3, 12, _metadata_request("t"), timeout_s=5
            )

    assert _topic_names(_run(run())) == ["t"]


def test_pipelined_requests_are_in_flight_together() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            conn = BrokerConnection(HOST, srv.port, client_id="c")
            await conn.connect()
            names = [f"sleep-{50 - 10 * i}" for i in range(5)]
            responses = await asyncio.gather(
                *(conn.request(3, 12, _metadata_request(n)) for n in names)
            )
            assert conn.in_flight == 0
            await conn.close()
        assert [_topic_names(r) for r in responses] == [[n] for n in names]
        assert srv.max_active == 5  # all five were being handled at once

    _run(run())


def test_responses_are_matched_by_correlation_id() -> None:
    """A hand-written server that answers three requests in reverse order."""

    served = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = []
        for _ in range(3):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
            header, pos = parse_request_header(frame)
            request = registry.decode_request(3, 12, frame, skip_tagged_fields(frame, pos))
            got.append((header.correlation_id, [t.name for t in request.topics]))
        for correlation_id, names in reversed(got):
            payload = response_header(correlation_id, True) + registry.encode(
                _metadata_response(12, names)
            )
            writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()
        served.set()

    async def run() -> None:
        server = await asyncio.start_server(serve, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection(HOST, port, client_id="c")
        await conn.connect()
        responses = await asyncio.gather(
            *(conn.request(3, 12, _metadata_request(n)) for n in ("one", "two", "three"))
        )
        await conn.close()
        await asyncio.wait_for(served.wait(), 5)
        server.close()
        await server.wait_closed()
        assert [_topic_names(r) for r in responses] == [["one"], ["two"], ["three"]]

    _run(run())


def test_connection_loss_fails_in_flight_requests() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            conn = BrokerConnection(HOST, srv.port, client_id="c")
            await conn.connect()
            results = await asyncio.gather(
                conn.request(3, 12, _metadata_request("ok")),
                conn.request(3, 12, _metadata_request("close")),
                conn.request(3, 12, _metadata_request("sleep-1")),
                return_exceptions=True,
            )
            assert _topic_names(results[0]) == ["ok"]
            assert isinstance(results[1], ConnectionError)
            assert isinstance(results[2], ConnectionError)
            assert not conn.connected
            with pytest.raises(ConnectionError):
                await conn.request(3, 12, _metadata_request("later"))
            # the connection can be opened again
            await conn.connect()
            assert _topic_names(await conn.request(3, 12, _metadata_request("again"))) == ["again"]
            await conn.close()

    _run(run())


def test_server_going_away_fails_in_flight_requests() -> None:
    """A hand-written server that reads three requests and drops the connection."""
    dropped = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(3):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
        writer.transport.abort()
        dropped.set()

    async def run() -> None:
        server = await asyncio.start_server(serve, HOST, 0)
        conn = BrokerConnection(HOST, server.sockets[0].getsockname()[1], client_id="c")
        await conn.connect()
        results = await asyncio.gather(
            *(conn.request(3, 12, _metadata_request("t"), timeout_s=5) for _ in range(3)),
            return_exceptions=True,
        )
        assert all(isinstance(r, ConnectionError) for r in results), results
        assert not conn.connected
        assert conn.in_flight == 0
        await conn.close()
        await asyncio.wait_for(dropped.wait(), 5)
        server.close()
        await server.wait_closed()

    _run(run())


def test_connect_refused_is_a_connection_error() -> None:
    async def run() -> None:
        conn = BrokerConnection(HOST, free_port(), client_id="c")
        with pytest.raises(ConnectionError):
            await conn.connect()
        await conn.close()

    _run(run())


def test_timeout_closes_the_connection() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            conn = BrokerConnection(HOST, srv.port, client_id="c", request_timeout_s=0.1)
            await conn.connect()
            other = asyncio.create_task(conn.request(3, 12, _metadata_request("hang"), timeout_s=5))
            await wait_for_async(lambda: len(srv.received) == 1)
            with pytest.raises(TimeoutError):
                await conn.request(3, 12, _metadata_request("hang"))
            assert not conn.connected
            with pytest.raises(ConnectionError):
                await other
            await conn.connect()
            assert _topic_names(await conn.request(3, 12, _metadata_request("x"))) == ["x"]
            await conn.close()

    _run(run())


# -- ControllerChannel ------------------------------------------------------------------


async def _no_local(api_key: int, api_version: int, request: Any) -> Any:
    raise AssertionError("local handler must not be called")


def test_channel_delivers_in_order_one_at_a_time() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            channel = ControllerChannel(0, _no_local)
            channel.add_broker(1, HOST, srv.port)
            channel.add_broker(1, HOST, srv.port)  # idempotent
            got: list[list[str]] = []
            names = [f"sleep-{(i * 7) % 5}" for i in range(10)]
            for n in names:
                channel.send(1, 3, 12, _metadata_request(n), lambda r: got.append(_topic_names(r)))
            assert channel.queue_size(1) == 10
            await wait_for_async(lambda: len(got) == 10)
            assert channel.queue_size(1) == 0
            await channel.close()
        assert got == [[n] for n in names]
        assert [r[3].topics[0].name for r in srv.received] == names
        assert {r[2] for r in srv.received} == {"millrace-controller"}
        assert srv.max_active == 1

    _run(run())


def test_channel_send_to_unknown_broker_is_a_no_op() -> None:
    async def run() -> None:
        channel = ControllerChannel(0, _no_local)
        channel.send(7, 3, 12, _metadata_request("x"), lambda r: None)
        assert channel.queue_size(7) == 0
        await channel.close()

    _run(run())


def test_channel_retries_until_the_broker_comes_up() -> None:
    async def run() -> None:
        port = free_port()
        channel = ControllerChannel(0, _no_local, retry_backoff_s=0.01)
        channel.add_broker(1, HOST, port)
        got: list[list[str]] = []
        for n in ("a", "b", "c"):
            channel.send(1, 3, 12, _metadata_request(n), lambda r: got.append(_topic_names(r)))
        await asyncio.sleep(0.1)  # several refused connection attempts
        assert got == []
        assert channel.queue_size(1) == 3
        async with StandIn(port) as srv:
            await wait_for_async(lambda: len(got) == 3)
            await channel.close()
        assert got == [["a"], ["b"], ["c"]]
        assert [r[3].topics[0].name for r in srv.received] == ["a", "b", "c"]

    _run(run())


def test_channel_retries_after_a_timeout_on_a_new_connection() -> None:
    async def run() -> None:
        async with StandIn() as srv:
            channel = ControllerChannel(0, _no_local, retry_backoff_s=0.01, request_timeout_s=0.05)
            channel.add_broker(1, HOST, srv.port)
            got: list[list[str]] = []
            # the first attempt times out (the handler sleeps longer than the timeout),
            # then the stand-in is made fast and the retry succeeds
            channel.send(1, 3, 12, _metadata_request("sleep-200"), lambda r: None)
            await wait_for_async(lambda: len(srv.received) == 1)
            srv.slow = False
            channel.send(
                1, 3, 12, _metadata_request("after"), lambda r: got.append(_topic_names(r))
            )
            await wait_for_async(lambda: len(got) == 1)
            await channel.close()
        names = [r[3].topics[0].name for r in srv.received]
        assert names == ["sleep-200", "sleep-200", "after"]  # retried once, then in order

    _run(run())


def test_channel_local_handler_short_cut_keeps_order() -> None:
    async def run() -> None:
        calls: list[tuple[int, int, str]] = []
        active = 0
        overlapped = False

        async def local(api_key: int, api_version: int, request: Any) -> Any:
            nonlocal active, overlapped
            active += 1
            overlapped = overlapped or active > 1
            name = request.topics[0].name
            calls.append((api_key, api_version, name))
            await asyncio.sleep(0.01 if name == "slow" else 0)
            active -= 1
            return f"answer-{name}"

        channel = ControllerChannel(5, local)
        channel.add_broker(5, "not-a-real-host.invalid", 1)  # address unused for itself
        got: list[Any] = []
        for n in ("slow", "fast", "last"):
            channel.send(5, 3, 12, _metadata_request(n), got.append)
        await wait_for_async(lambda: len(got) == 3)
        await channel.close()
        assert got == ["answer-slow", "answer-fast", "answer-last"]
        assert calls == [(3, 12, "slow"), (3, 12, "fast"), (3, 12, "last")]
        assert not overlapped

    _run(run())


def test_channel_remove_broker_stops_retries() -> None:
    async def run() -> None:
        port = free_port()
        channel = ControllerChannel(0, _no_local, retry_backoff_s=0.01)
        channel.add_broker(1, HOST, port)
        got: list[Any] = []
        channel.send(1, 3, 12, _metadata_request("never"), got.append)
        await asyncio.sleep(0.05)
        channel.remove_broker(1)
        assert channel.queue_size(1) == 0
        assert 1 not in channel.broker_ids
        await asyncio.sleep(0)  # the cancelled sender finishes
        async with StandIn(port) as srv:
            await asyncio.sleep(0.1)  # a retry would connect now
            assert srv.received == []
        assert got == []
        channel.send(1, 3, 12, _metadata_request("dropped"), got.append)  # unknown again
        assert channel.queue_size(1) == 0
        await channel.close()

    _run(run())


def test_channel_close_leaves_no_tasks() -> None:
    async def run() -> None:
        dead = free_port()

        async def local(api_key: int, api_version: int, request: Any) -> Any:
            await asyncio.sleep(10)

        async with StandIn() as srv:
            channel = ControllerChannel(0, local, retry_backoff_s=0.01)
            channel.add_broker(0, HOST, 1)
            channel.add_broker(1, HOST, srv.port)
            channel.add_broker(2, HOST, dead)
            channel.add_broker(3, HOST, srv.port)
            for broker_id in (0, 1, 2):
                channel.send(broker_id, 3, 12, _metadata_request("hang"))
            channel.remove_broker(3)  # a retiring task is awaited by close too
            await wait_for_async(lambda: len(srv.received) == 1)
            assert any(_ours(t) for t in asyncio.all_tasks())
            await channel.close()
            assert [t for t in asyncio.all_tasks() if _ours(t)] == []
            assert channel.broker_ids == frozenset()
            channel.add_broker(4, HOST, srv.port)  # ignored after close
            assert [t for t in asyncio.all_tasks() if _ours(t)] == []

    _run(run())
