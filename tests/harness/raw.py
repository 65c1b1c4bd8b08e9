"""Hand-built Kafka requests on a plain socket (frames, headers, kio-encoded bodies), for
tests that must send what no client sends."""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import struct
from typing import Any


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    def uvarint(p: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, p
            shift += 7

    count, pos = uvarint(pos)
    for _ in range(count):
        _tag, pos = uvarint(pos)
        size, pos = uvarint(pos)
        pos += size
    return pos


class RawConnection:
    """A plain-socket Kafka connection: hand-built frames and kio-encoded requests."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0, security: Any = None) -> None:
        """``security``: a ``kafka_security.client_security.ClientSecurity`` for a secured
        listener: TLS, then the SASL exchange, before the connection is handed over."""
        sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock = security.wrap(sock, host) if security is not None else sock
        self.sock.settimeout(timeout_s)
        self._correlation = 0
        if security is not None and security.sasl:
            from kafka_security.client_security import authenticate

            try:
                authenticate(security, self.request)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _recv_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    @staticmethod
    def header(
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str = "raw-test",
        *,
        flexible: bool = False,
    ) -> bytes:
        cid = client_id.encode()
        out = struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid
        if flexible:
            out += b"\x00"  # request header v2: empty tagged fields
        return out

    def send_request(self, entity: Any) -> int:
        """Send a kio request entity (header v1, or v2 if flexible); return its correlation id."""
        from kio.serial import entity_writer

        correlation_id = self.next_correlation_id()
        body = io.BytesIO()
        entity_writer(type(entity))(body, entity)
        header = self.header(
            int(entity.__api_key__),
            int(entity.__version__),
            correlation_id,
            flexible=bool(entity.__flexible__),
        )
        self.send_frame(header + body.getvalue())
        return correlation_id

    def read_response(self, api_key: int, version: int) -> tuple[int, Any]:
        """Read one response frame; return (correlation id, decoded kio response entity)."""
        from kio.index import load_response_schema
        from kio.serial import entity_reader

        frame = self.recv_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        pos = 4
        response_cls = load_response_schema(api_key, version)
        if response_cls.__flexible__ and api_key != 18:
            pos = _skip_tagged_fields(frame, pos)
        value, _size = entity_reader(response_cls)(frame, pos)
        return correlation_id, value

    def request(self, entity: Any) -> Any:
        """Send a kio request entity, return the decoded kio response entity."""
        sent = self.send_request(entity)
        got, value = self.read_response(int(entity.__api_key__), int(entity.__version__))
        assert got == sent, f"correlation id {got} != {sent}"
        return value

    def produce_v3(self, topic: str, partition: int, records: bytes, acks: int = 1) -> Any:
        """A hand-built Produce v3 for one partition; returns its PartitionProduceResponse."""
        return self.produce(topic, partition, records, acks, version=3)

    def produce(
        self, topic: str, partition: int, records: bytes, acks: int = 1, *, version: int
    ) -> Any:
        """A hand-built Produce request (v3 to v9: the same request fields) for one partition;
        returns its PartitionProduceResponse (from v8 with ``record_errors`` and
        ``error_message``)."""
        import datetime
        import importlib

        from kio.schema.types import TopicName
        from kio.static.primitive import i16, i32, i32Timedelta

        schema = importlib.import_module(f"kio.schema.produce.v{version}.request")
        resp = self.request(
            schema.ProduceRequest(
                transactional_id=None,
                acks=i16(acks),
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                topic_data=(
                    schema.TopicProduceData(
                        name=TopicName(topic),
                        partition_data=(
                            schema.PartitionProduceData(index=i32(partition), records=records),
                        ),
                    ),
                ),
            )
        )
        [t] = resp.responses
        [pr] = t.partition_responses
        return pr

    def init_producer_id(self) -> tuple[int, int]:
        """InitProducerId v0 for an idempotent (non-transactional) producer: (id, epoch)."""
        import datetime

        from kio.schema.init_producer_id.v0.request import InitProducerIdRequest
        from kio.static.primitive import i32Timedelta

        resp = self.request(
            InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            )
        )
        assert int(resp.error_code) == 0, f"InitProducerId: {resp.error_code!r}"
        return int(resp.producer_id), int(resp.producer_epoch)

    def closed_by_peer(self, timeout_s: float = 30.0) -> bool | bytes:
        """Wait for the broker's reaction: True if it closed the connection, else the bytes
        it sent (b"" never: that is a close). Raises TimeoutError if it stays silent."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True  # under TLS an abrupt close surfaces as an SSL error
        if not data:
            return True
        return data


def api_versions_ok(host: str, port: int, timeout_s: float = 10.0, security: Any = None) -> bool:
    """One ApiVersions v0 round trip on a fresh connection."""
    try:
        with RawConnection(host, port, timeout_s, security) as conn:
            conn.send_frame(RawConnection.header(18, 0, 1))
            frame = conn.recv_frame()
            corr, error = struct.unpack_from(">ih", frame, 0)
            return corr == 1 and error == 0
    except OSError:
        return False
