"""The wire-level latency anatomy (bench/latency_capture.py) on a capture built here: the pcap
reader, the Produce requests' batches found by CRC in the Fetch responses, and which batches
found a Fetch waiting. A mismatched port or a parked batch counted as not parked would
publish a wrong explanation of the p50."""

from __future__ import annotations

import datetime
import struct

import pytest

from bench import latency_capture
from bench.latency_capture import Packet, analyze, produce_crcs, read_pcap
from bench.plain_produce import produce_request, request_frame
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.records import SimpleRecord, encode_batch

pytestmark = pytest.mark.unit

BROKER, CONSUMER, PRODUCER = 9092, 50001, 50002


def _batch(value: bytes) -> bytes:
    return encode_batch([SimpleRecord(value, None, 1_700_000_000_000)])


def _produce_v9(correlation_id: int, batch: bytes) -> bytes:
    """A flexible (v9) Produce, as librdkafka sends: request header v2 (tagged fields)."""
    cls = registry.request_class(ApiKey.PRODUCE, 9)
    part = registry.build(registry.nested(cls, "PartitionProduceData"), index=0, records=batch)
    topic = registry.build(
        registry.nested(cls, "TopicProduceData"), name="t", partition_data=(part,)
    )
    body = registry.encode(
        registry.build(
            cls,
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(topic,),
        )
    )
    header = struct.pack(">hhih", 0, 9, correlation_id, 3) + b"abc" + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _fetch_request(correlation_id: int) -> bytes:
    return request_frame(1, 12, correlation_id, b"\x00" * 40, b"abc")


def _response(correlation_id: int, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def _pcap(packets: list[tuple[float, int, int, bytes]]) -> bytes:
    """A microsecond pcap of Ethernet/IPv4/TCP packets, as tcpdump writes for ``lo``."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for t, src, dst, payload in packets:
        ip = (
            bytes([0x45, 0]) + struct.pack(">H", 40 + len(payload)) + bytes(5) + b"\x06" + bytes(10)
        )
        tcp = struct.pack(">HHIIBBHHH", src, dst, 0, 0, 5 << 4, 0x18, 65535, 0, 0)
        frame = bytes(12) + b"\x08\x00" + ip + tcp + payload
        sec = int(t)
        out += struct.pack("<IIII", sec, round((t - sec) * 1e6), len(frame), len(frame)) + frame
    return bytes(out)


def test_a_produce_request_gives_its_batches_crcs_in_every_version_librdkafka_and_java_send() -> (
    None
):
    first, second = _batch(b"one"), _batch(b"two")
    v7 = request_frame(0, 7, 41, produce_request("t", first + second, acks=1), b"abc")
    assert produce_crcs(v7) == (41, [first[17:21], second[17:21]])
    assert produce_crcs(_produce_v9(42, first)) == (42, [first[17:21]])


def test_what_is_not_a_whole_produce_request_gives_nothing() -> None:
    whole = _produce_v9(1, _batch(b"x"))
    assert produce_crcs(_fetch_request(1)) is None
    assert produce_crcs(whole[:30]) is None  # a request cut by the packet's end
    assert produce_crcs(b"\x00\x00") is None


def test_the_reader_refuses_what_is_not_a_pcap_file() -> None:
    with pytest.raises(ValueError, match="pcap"):
        list(read_pcap(b"\x00" * 40))
    with pytest.raises(ValueError, match="pcap"):
        list(read_pcap(b"abc"))


def test_the_reader_gives_the_tcp_payloads_with_their_times_and_ports() -> None:
    data = _pcap([(1.5, CONSUMER, BROKER, b"hello"), (1.75, BROKER, CONSUMER, b"")])
    assert list(read_pcap(data)) == [Packet(1.5, CONSUMER, BROKER, b"hello")]


def test_parked_and_not_parked_batches_the_produce_answer_and_the_consumers_turnaround() -> None:
    parked, late = _batch(b"parked"), _batch(b"late")
    capture = _pcap(
        [
            (10.0000, CONSUMER, BROKER, _fetch_request(1)),  # a fetch waits
            (10.0010, PRODUCER, BROKER, _produce_v9(7, parked)),
            (10.0012, BROKER, PRODUCER, _response(7)),
            (10.0013, BROKER, CONSUMER, _response(1)),  # the fetch's answer: header first,
            (10.0014, BROKER, CONSUMER, parked),  # then the records
            (10.0016, PRODUCER, BROKER, _produce_v9(8, late)),  # no fetch is waiting now
            (10.0020, CONSUMER, BROKER, _fetch_request(2)),
            (10.0025, BROKER, CONSUMER, _response(2, late)),
            (10.0026, BROKER, PRODUCER, _response(8)),
        ]
    )
    got = analyze(list(read_pcap(capture)), BROKER)
    assert got.produce_us == pytest.approx([200, 1000], abs=1)
    assert got.parked_us == pytest.approx([400], abs=1)
    assert got.not_parked_us == pytest.approx([900], abs=1)
    assert got.not_parked_share == 0.5
    assert got.turnaround_us == pytest.approx([700], abs=1)  # from the response's first packet
    assert got.packets_per_response == [2]
    assert got.skipped_produces == 0


def test_another_brokers_traffic_and_a_cut_produce_are_left_out() -> None:
    batch = _batch(b"x")
    capture = _pcap(
        [
            (1.0, CONSUMER, BROKER, _fetch_request(1)),
            (1.1, PRODUCER, 9093, _produce_v9(5, batch)),  # another port: not this broker's
            (1.2, PRODUCER, BROKER, _produce_v9(6, batch)[:25]),
            (1.3, BROKER, CONSUMER, _response(1, batch)),
        ]
    )
    got = analyze(list(read_pcap(capture)), BROKER)
    assert (got.parked_us, got.not_parked_us, got.produce_us) == ([], [], [])
    assert got.skipped_produces == 1


def test_a_capture_longer_than_the_run_is_refused_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert latency_capture.parse_args([]).capture == 5.0
    with pytest.raises(SystemExit):
        latency_capture.parse_args(["--seconds", "3", "--capture", "5"])
    assert "--capture 5 is longer than --seconds 3" in capsys.readouterr().err


def test_the_report_puts_each_figure_under_its_column() -> None:
    kafka = latency_capture.Anatomy([150.0], [200.0], [700.0, 710.0], [90.0], [3], 2, 400.0)
    millrace = latency_capture.Anatomy(
        [210.0], [300.0, 320.0, 310.0], [720.0], [60.0], [1], 0, 480.0
    )
    args = latency_capture.parse_args(["--rounds", "1"])
    table = latency_capture.report({"Kafka": [kafka], "Millrace": [millrace]}, args)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    cells = {
        row.split("|")[1].strip(): [c.strip() for c in row.strip("|").split("|")]
        for row in rows[1:]
    }
    k, m = (dict(zip(header, cells[name], strict=True)) for name in ("Kafka", "Millrace"))
    assert (k["end to end (p50)"], k["produce"], k["parked"], k["not parked"]) == (
        "400",
        "150",
        "200",
        "705",
    )
    assert (k["share not parked"], k["turnaround"], k["packets per response"]) == ("67%", "90", "3")
    assert (m["parked"], m["share not parked"], m["produces skipped"]) == ("310", "25%", "0")
