"""Produce over a plain socket, without a client library in the way: the request body (kio's
encoder), the request frame and the reading of a response frame. Shared by
``bench.broker_latency`` and ``bench.produce_cpu``, which measure the broker alone.

Concurrency: the caller's thread; one socket per caller.
"""

from __future__ import annotations

import datetime
import socket
import struct

from broker.protocol import registry
from broker.protocol.api_keys import ApiKey

PRODUCE_VERSION = 7

_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_SIZE = struct.Struct(">i")


def connect(host: str, port: int) -> socket.socket:
    """A connection with Nagle's algorithm off (a request leaves at once)."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def produce_request(topic: str, batch: bytes, acks: int) -> bytes:
    """The body of a Produce v7 request of ``batch`` to partition 0 of ``topic``."""
    cls = registry.request_class(ApiKey.PRODUCE, PRODUCE_VERSION)
    part = registry.build(registry.nested(cls, "PartitionProduceData"), index=0, records=batch)
    data = registry.build(
        registry.nested(cls, "TopicProduceData"), name=topic, partition_data=(part,)
    )
    return registry.encode(
        registry.build(
            cls,
            transactional_id=None,
            acks=acks,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(data,),
        )
    )


def request_frame(
    api_key: int, version: int, correlation_id: int, body: bytes, client_id: bytes
) -> bytes:
    """A whole request: the size, the header (v1) and ``body``."""
    header = _HEADER.pack(api_key, version, correlation_id, len(client_id)) + client_id
    return _SIZE.pack(len(header) + len(body)) + header + body


def receive(sock: socket.socket, correlation_id: int) -> bytes:
    """The next response frame (without its size), which must answer ``correlation_id``;
    SystemExit if the broker closed the connection or answered another request."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) != 4:
        raise SystemExit("the broker closed the connection")
    (size,) = _SIZE.unpack(head)
    frame = sock.recv(size, socket.MSG_WAITALL)
    if len(frame) != size:
        raise SystemExit(f"the broker closed the connection mid-response ({len(frame)} of {size})")
    (answered,) = _SIZE.unpack_from(frame)
    if answered != correlation_id:
        raise SystemExit(f"response to request {answered}, expected {correlation_id}")
    return frame
