"""The produce-CPU benchmark's wire pieces (bench/produce_cpu.py): the batch it sends is a
valid v2 batch of the size asked for, the request frame is what the broker's own decoder
reads, and the response's error code is read at the right place."""

from __future__ import annotations

import struct

import pytest

from bench import produce_cpu
from broker.protocol import produce_codec
from broker.protocol.framing import parse_request_header
from broker.protocol.records import iter_batches

pytestmark = pytest.mark.unit


def test_the_batch_is_one_v2_batch_just_under_the_size_asked_for() -> None:
    batch, records = produce_cpu.make_batch(1000)
    assert 990 * 1024 < len(batch) <= 1000 * 1024
    headers = list(iter_batches(batch))
    assert len(headers) == 1 and headers[0].record_count == records


def test_the_frame_decodes_as_a_produce_request_of_the_batch() -> None:
    batch, _ = produce_cpu.make_batch(4)
    frame = produce_cpu.frame(produce_cpu.produce_request("t", batch, -1), 42)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header, pos = parse_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 7, 42)
    request = produce_codec.decode_request(7, frame[4:], pos)
    assert request.acks == -1
    part = request.topic_data[0].partition_data[0]
    assert request.topic_data[0].name == "t" and part.index == 0
    assert part.records is not None and bytes(part.records) == batch


def test_the_error_code_is_read_from_the_partition() -> None:
    body = produce_codec.encode_response(
        7, [("topic", [produce_codec.PartitionResult(0, 6, -1, -1, -1, None)])]
    )
    assert produce_cpu.response_error(struct.pack(">i", 1) + body) == 6
