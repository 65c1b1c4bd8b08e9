"""Client quotas (broker/quota): Kafka's sampled rate and throttle-time formula, the
precedence of quota entities, what a request records, handler timing, and the connection
muting of a throttled client (KIP-219). Time is injected (a ManualClock) except where the
event loop's own timers are the subject."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from broker.clock import ManualClock
from broker.network.socket_server import ConnectionInfo, Response, SocketServer
from broker.quota.entities import (
    DEFAULT,
    QuotaEntity,
    desanitize,
    format_value,
    java_double,
    quota_values,
    sanitize,
)
from broker.quota.manager import ClientQuotaManager, ClientQuotas, QuotaSettings, QuotaType
from broker.quota.rate import SampledRate, throttle_time_ms
from broker.quota.request_usage import RequestUsage

pytestmark = pytest.mark.unit

T0 = 1_000_000  # ms


# ------------------------------------------------------------------ rate and formula


def test_a_first_value_is_measured_over_all_but_one_window() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(2000, T0)
    assert rate.window_ms(T0) == 10_000  # (samples - 1) whole windows assumed
    assert rate.measure(T0) == pytest.approx(200.0)
    rate.record(1000, T0 + 500)
    assert rate.window_ms(T0 + 500) == 10_500  # the current window's elapsed part added
    assert rate.measure(T0 + 500) == pytest.approx(3000 / 10.5)


def test_the_window_grows_to_the_real_span_once_enough_samples_exist() -> None:
    rate = SampledRate(samples=3, window_ms=1000)
    for i in range(6):
        rate.record(100, T0 + i * 1000)
    # samples + 1 windows are kept, but the one whose last event is samples * window old
    # (T0+2000) is obsolete: the rate spans T0+3000..T0+5000
    assert rate.window_ms(T0 + 5000) == 2000
    assert rate.measure(T0 + 5000) == pytest.approx(300 / 2.0)
    assert rate.window_ms(T0 + 5999) == 2999


def test_samples_without_events_for_the_whole_span_are_forgotten() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(10_000, T0)
    assert rate.measure(T0 + 10_999) > 0
    assert rate.measure(T0 + 11_000) == 0.0  # samples * window since the last event


def test_throttle_time_is_the_delay_that_brings_the_rate_back_to_the_quota() -> None:
    # O * W / (W + X) = T  =>  X = (O - T) / T * W
    assert throttle_time_ms(200.0, 100.0, 10_000) == 10_000
    assert throttle_time_ms(150.0, 100.0, 10_500) == 5250
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0  # at the quota: acceptable
    assert throttle_time_ms(100.0000001, 100.0, 1000) == 0  # rounds to nothing
    o, t, w = 1234.5, 1000.0, 10_000
    x = throttle_time_ms(o, t, w)
    assert o * w / (w + x) == pytest.approx(t, rel=1e-3)


def test_a_zero_quota_holds_the_client_a_full_window() -> None:
    assert throttle_time_ms(1.0, 0.0, 10_000) == 10_000


# ------------------------------------------------------------------ precedence


def _manager(static: float | None = None) -> ClientQuotaManager:
    return ClientQuotaManager(QuotaType.PRODUCE, QuotaSettings(), static)


LEVELS = [
    (QuotaEntity("alice", "app"), 1.0),  # /config/users/alice/clients/app
    (QuotaEntity("alice", DEFAULT), 2.0),  # /config/users/alice/clients/<default>
    (QuotaEntity("alice", None), 3.0),  # /config/users/alice
    (QuotaEntity(DEFAULT, "app"), 4.0),  # /config/users/<default>/clients/app
    (QuotaEntity(DEFAULT, DEFAULT), 5.0),  # /config/users/<default>/clients/<default>
    (QuotaEntity(DEFAULT, None), 6.0),  # /config/users/<default>
    (QuotaEntity(None, "app"), 7.0),  # /config/clients/app
    (QuotaEntity(None, DEFAULT), 8.0),  # /config/clients/<default>
]


def test_precedence_follows_kafkas_order_level_by_level() -> None:
    m = _manager(static=9.0)
    for entity, value in LEVELS:
        m.update_quota(entity, value)
    for entity, value in LEVELS:
        assert m.quota("alice", "app") == value, entity
        m.update_quota(entity, None)  # remove the most specific: the next one applies
    assert m.quota("alice", "app") == 9.0  # quota.producer.default
    m2 = _manager()
    assert m2.quota("alice", "app") is None
    assert not m2.enabled


def test_metric_tags_decide_who_shares_a_rate() -> None:
    m = _manager()
    m.update_quota(QuotaEntity("alice", None), 100.0)
    # a user quota: one rate for all of alice's client ids
    assert m.metric_tags("alice", "a") == m.metric_tags("alice", "b") == ("alice", "")
    # a default user quota: each user on its own
    m.update_quota(QuotaEntity(DEFAULT, None), 50.0)
    assert m.metric_tags("bob", "a") == ("bob", "")
    assert m.quota("bob", "a") == 50.0
    # client-id level: per client id, whatever the user
    m2 = _manager()
    m2.update_quota(QuotaEntity(None, DEFAULT), 10.0)
    assert m2.metric_tags("alice", "a") == m2.metric_tags("bob", "a") == ("", "a")
    assert m2.quota("carol", "zzz") == 10.0


def test_a_shared_user_quota_throttles_all_its_clients_together() -> None:
    m = _manager()
    m.update_quota(QuotaEntity("alice", None), 100.0)  # 1000 bytes per 10 s
    assert m.record("alice", "a", 600, T0) == 0
    assert m.record("alice", "b", 600, T0) > 0  # a different client id, the same rate
    assert m.record("bob", "b", 600, T0) == 0  # bob has no quota


def test_user_client_levels_with_an_empty_client_id_fall_back_to_the_user() -> None:
    m = _manager()
    m.update_quota(QuotaEntity(DEFAULT, DEFAULT), 5.0)
    m.update_quota(QuotaEntity("alice", None), 3.0)
    assert m.quota("alice", "") == 3.0
    m.update_quota(QuotaEntity(None, DEFAULT), 8.0)
    assert m.quota("bob", "x") == 5.0


def test_quota_types_resolve_independently() -> None:
    quotas = ClientQuotas()
    quotas.apply(QuotaEntity("alice", None), {"consumer_byte_rate": "2048"})
    quotas.apply(QuotaEntity(None, "app"), {"producer_byte_rate": "1024"})
    assert quotas.produce.quota("alice", "app") == 1024.0
    assert quotas.fetch.quota("alice", "app") == 2048.0
    assert quotas.request.quota("alice", "app") is None


def test_changing_a_quota_applies_to_existing_rates() -> None:
    m = _manager()
    m.update_quota(QuotaEntity(None, "app"), 100.0)
    assert m.record("", "app", 1500, T0) > 0
    m.update_quota(QuotaEntity(None, "app"), 1000.0)
    assert m.record("", "app", 1, T0) == 0
    m.update_quota(QuotaEntity(None, "app"), None)
    assert not m.enabled
    assert m.record("", "app", 10**9, T0) == 0


def test_request_time_throttles_are_capped_at_one_window() -> None:
    quotas = ClientQuotas()
    quotas.apply(QuotaEntity(None, "app"), {"request_percentage": "1"})
    # 5 s of handler time = 500 percent-seconds: far over 1 %, capped at the 1 s window
    assert quotas.request.record("", "app", 500.0, T0) == 1000
    quotas.apply(QuotaEntity(None, "app"), {"producer_byte_rate": "1"})
    assert quotas.produce.record("", "app", 500.0, T0) > 1000  # bandwidth: not capped


def test_max_value_in_a_quota_window() -> None:
    quotas = ClientQuotas(QuotaSettings(samples=11, window_seconds=1))
    quotas.apply(QuotaEntity(None, DEFAULT), {"consumer_byte_rate": "1000"})
    assert quotas.fetch.max_value_in_window("", "c") == 10_000.0
    assert quotas.produce.max_value_in_window("", "c") is None


def test_a_config_holds_quota_keys_beside_scram_credentials() -> None:
    quotas = ClientQuotas()
    assert not quotas.enabled
    config = {
        "SCRAM-SHA-512": "salt=abc,stored_key=def,server_key=ghi,iterations=4096",
        "producer_byte_rate": "1024",
        "request_percentage": "200.0",
    }
    quotas.apply(QuotaEntity("alice", None), config)
    assert quotas.enabled
    assert quotas.configs() == {
        QuotaEntity("alice", None): {"producer_byte_rate": 1024.0, "request_percentage": 200.0}
    }
    quotas.apply(QuotaEntity("alice", None), {"SCRAM-SHA-512": config["SCRAM-SHA-512"]})
    assert not quotas.enabled
    assert quotas.configs() == {}


def test_reload_forgets_entities_gone_from_zookeeper() -> None:
    quotas = ClientQuotas()
    quotas.apply(QuotaEntity(None, "a"), {"producer_byte_rate": "1"})
    quotas.apply(QuotaEntity(None, "b"), {"producer_byte_rate": "1"})
    quotas.remove_missing({QuotaEntity(None, "b")})
    assert set(quotas.configs()) == {QuotaEntity(None, "b")}


def test_static_default_only_applies_to_the_client_id_level() -> None:
    quotas = ClientQuotas(QuotaSettings(producer_default=500.0))
    assert quotas.enabled
    assert quotas.produce.quota("anyone", "any") == 500.0
    assert quotas.fetch.quota("anyone", "any") is None
    quotas.apply(QuotaEntity(DEFAULT, None), {"producer_byte_rate": "700"})
    assert quotas.produce.quota("anyone", "any") == 700.0


# ------------------------------------------------------------------ entities and values


def test_names_are_sanitized_as_kafkas_sanitizer_does() -> None:
    assert sanitize("alice") == "alice"
    assert sanitize("a b*c+d/é") == "a%20b%2Ac%2Bd%2F%C3%A9"
    assert sanitize("x.y-z_1") == "x.y-z_1"
    assert sanitize("<default>") == "%3Cdefault%3E"  # never the default entity
    for name in ("a b*c+d/é", "User:x@y", "~!"):
        assert desanitize(sanitize(name)) == name


def test_entity_paths() -> None:
    assert QuotaEntity("alice", None).entity_path == "users/alice"
    assert QuotaEntity("alice", "c1").config_path() == ("users", "alice/clients/c1")
    assert QuotaEntity(None, DEFAULT).config_path() == ("clients", "<default>")
    for path in ("users/alice", "clients/c1", "users/<default>/clients/<default>"):
        entity = QuotaEntity.from_entity_path(path)
        assert entity is not None and entity.entity_path == path
    assert QuotaEntity.from_entity_path("topics/t") is None
    assert QuotaEntity.from_entity_path("users/a/clients") is None
    assert QuotaEntity(DEFAULT, "c%201").describe() == {"user": None, "client-id": "c 1"}
    with pytest.raises(ValueError):
        QuotaEntity(None, None)


def test_values_are_stored_as_kafka_prints_them() -> None:
    assert format_value("producer_byte_rate", 1024.0) == "1024"
    assert format_value("request_percentage", 200.0) == "200.0"
    assert java_double(0.5) == "0.5"
    assert java_double(1e7) == "1.0E7"
    assert java_double(12345678.5) == "1.23456785E7"
    assert java_double(1e-4) == "1.0E-4"
    assert quota_values({"producer_byte_rate": "oops", "consumer_byte_rate": "1.0E7"}) == {
        "consumer_byte_rate": 1e7
    }


# ------------------------------------------------------------------ what a request records


def _usage(
    quotas: ClientQuotas, clock: ManualClock, client: str = "app", size: int = 0
) -> tuple[RequestUsage, ConnectionInfo]:
    conn = ConnectionInfo(peer="p", listener="L", connection_id=1, principal="User:alice")
    return RequestUsage(quotas, clock, conn, client, size), conn


def test_a_produce_over_its_quota_is_throttled_and_mutes_the_connection() -> None:
    clock = ManualClock()
    quotas = ClientQuotas()
    quotas.apply(QuotaEntity("alice", None), {"producer_byte_rate": "1000"})
    usage, conn = _usage(quotas, clock, size=5000)
    assert usage.record_produce() == 0  # 5000 / 10 s = 500 B/s
    assert conn.throttle_ms == 0
    usage, conn = _usage(quotas, clock, size=15_000)
    # 20000 / 10 s = 2000 B/s: (2000 - 1000) / 1000 * 10 s
    assert usage.record_produce() == 10_000
    assert conn.throttle_ms == 10_000
    assert usage.recorded


def test_a_throttled_fetch_takes_its_bytes_back() -> None:
    clock = ManualClock()
    quotas = ClientQuotas()
    quotas.apply(QuotaEntity(None, "app"), {"consumer_byte_rate": "100"})
    usage, _ = _usage(quotas, clock)
    assert usage.fetch_window_bytes() == 1000
    assert usage.record_fetch(2000) > 0
    # the bytes were not sent, so they do not count: a fetch within quota passes
    usage, conn = _usage(quotas, clock)
    assert usage.record_fetch(900) == 0
    assert conn.throttle_ms == 0


def test_request_percentage_counts_handler_time() -> None:
    clock = ManualClock()
    quotas = ClientQuotas()
    quotas.apply(QuotaEntity(DEFAULT, None), {"request_percentage": "1"})
    usage, conn = _usage(quotas, clock)
    usage.handler_ns = 200_000_000  # 200 ms: 20 % of one second over a 10 s window = 2 %
    throttle = usage.record_request()
    assert throttle == 1000  # (2 - 1) / 1 * 10 s, capped at the 1 s window
    assert conn.throttle_ms == 1000


def test_the_handler_timer_counts_running_steps_not_waits() -> None:
    quotas = ClientQuotas()
    clock = ManualClock()

    async def handler() -> str:
        _busy(0.03)
        await asyncio.sleep(0.15)  # waiting: not the broker's work
        await asyncio.sleep(0)
        _busy(0.03)
        return "done"

    async def run() -> tuple[str, int]:
        usage, _ = _usage(quotas, clock)
        result = await usage.timed(handler())
        return result, usage.handler_ns

    result, ns = asyncio.run(run())
    assert result == "done"
    assert 0.055 <= ns / 1e9 < 0.14


def test_the_handler_timer_passes_cancellation_and_errors_through() -> None:
    quotas = ClientQuotas()

    async def failing() -> None:
        await asyncio.sleep(0)
        raise KeyError("boom")

    async def forever() -> None:
        await asyncio.sleep(60)

    async def run() -> tuple[bool, bool]:
        usage, _ = _usage(quotas, ManualClock())
        with pytest.raises(KeyError):
            await usage.timed(failing())
        task = asyncio.ensure_future(usage.timed(forever()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled(), usage._step_start_ns == 0

    assert asyncio.run(run()) == (True, True)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# ------------------------------------------------------------------ connection muting


async def _throttling_handler(conn: ConnectionInfo, frame: bytes) -> Response | None:
    """Frame = throttle_ms (int32) + payload: answers the payload, throttling the
    connection that long (the eager path: no suspension)."""
    (throttle,) = struct.unpack_from(">i", frame)
    if throttle:
        conn.throttle(throttle)
    payload = frame[4:]
    if payload == b"none":
        return None
    return Response([payload], len(payload))


def _frame(throttle_ms: int, payload: bytes) -> bytes:
    body = struct.pack(">i", throttle_ms) + payload
    return struct.pack(">i", len(body)) + body


async def _read(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def test_a_throttled_connection_answers_at_once_then_reads_nothing_for_the_throttle() -> None:
    async def run() -> tuple[float, float, float]:
        server = SocketServer("127.0.0.1", 0, _throttling_handler)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            other_r, other_w = await asyncio.open_connection("127.0.0.1", server.port)
            start = time.monotonic()
            writer.write(_frame(400, b"throttled"))
            assert await _read(reader) == b"throttled"
            first = time.monotonic() - start  # KIP-219: the response is not delayed
            writer.write(_frame(0, b"next"))
            other_w.write(_frame(0, b"other"))
            assert await _read(other_r) == b"other"  # other connections are not muted
            other = time.monotonic() - start
            assert await _read(reader) == b"next"
            second = time.monotonic() - start
            writer.close()
            other_w.close()
            return first, other, second
        finally:
            await server.stop()

    first, other, second = asyncio.run(run())
    assert first < 0.3
    assert other < 0.3
    assert second >= 0.38


def test_a_request_owed_no_response_still_mutes_its_connection() -> None:
    async def run() -> float:
        server = SocketServer("127.0.0.1", 0, _throttling_handler)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            start = time.monotonic()
            writer.write(_frame(300, b"none"))  # like a produce with acks=0
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(_frame(0, b"after"))
            assert await _read(reader) == b"after"
            writer.close()
            return time.monotonic() - start
        finally:
            await server.stop()

    assert asyncio.run(run()) >= 0.28


def test_requests_pipelined_behind_a_throttled_one_wait_for_the_mute() -> None:
    async def run() -> tuple[float, float]:
        server = SocketServer("127.0.0.1", 0, _throttling_handler)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            start = time.monotonic()
            # one write: the server receives all three frames in one read
            writer.write(_frame(300, b"first") + _frame(0, b"second") + _frame(0, b"third"))
            assert await _read(reader) == b"first"
            first = time.monotonic() - start
            assert await _read(reader) == b"second"
            assert await _read(reader) == b"third"
            writer.close()
            return first, time.monotonic() - start
        finally:
            await server.stop()

    first, rest = asyncio.run(run())
    assert first < 0.25
    assert rest >= 0.28
