"""Blocking Kafka protocol connections for the connector's own clients.

:class:`Connection` sends requests and reads their responses over one TCP connection:
``request(entity)`` for a ``kio`` request entity (encoded and decoded by kio, generated from
Kafka's JSON schemas; the cold paths: coordinators, offsets, transactions), and
``send(api_key, version, body)`` / ``receive()`` for hand-encoded requests on a hot or a
first path (the reader's Fetch and ListOffsets, Metadata), which may keep several requests
in flight: Kafka answers the requests of one connection in the order they were sent.

Frames are Kafka's: a big-endian int32 size, then a request header v1 (``api_key`` int16,
``api_version`` int16, ``correlation_id`` int32, ``client_id`` string, plus an empty tagged
field section for flexible versions) and the body; a response is the correlation id, then
(for flexible versions other than ApiVersions) a tagged field section, then the body.

Security (``kafka.security.protocol``, :mod:`spark_connector.kafka.security`): with ``SSL`` or
``SASL_SSL`` the socket is wrapped in TLS right after it connects (a blocking handshake, the
broker's certificate checked against the trust store and, with
``ssl.endpoint.identification.algorithm=https``, the host); with ``SASL_PLAINTEXT`` or
``SASL_SSL`` the connection then authenticates before any other request (KIP-152:
SaslHandshake v1 naming the mechanism, then SaslAuthenticate v2 until the mechanism's last
token; ``kafka_security.client_security.authenticate``). A refused login or a certificate
that fails verification raises :class:`~spark_connector.kafka.errors.AuthenticationError`,
which no caller retries: another attempt would fail the same way. A TLS socket may hold
decrypted bytes ``select`` cannot see: :meth:`Connection.pending` tells.

Concurrency: a connection belongs to one thread; nothing here is pickled.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import struct
from typing import TYPE_CHECKING, Any

from spark_connector.kafka.errors import AuthenticationError

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = ["Connection", "parse_bootstrap", "read_uvarint", "skip_tagged_fields", "write_uvarint"]

_FRAME_HEAD = struct.Struct(">hhih")


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as ``[(host, port)]`` (IPv6 hosts in brackets)."""
    out: list[tuple[str, int]] = []
    for raw in bootstrap.split(","):
        item = raw.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError(f"no broker address in {bootstrap!r}")
    return out


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """``(value, position after it)`` of the unsigned varint at ``pos``."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def write_uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after the tagged field section at ``pos``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


class Connection:
    """One blocking connection to one broker (see the module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float,
        client_id: str,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = (host, port)
        self._client_id = client_id.encode()
        self._correlation = 0
        self._in_flight: list[int] = []
        self._ssl: ssl.SSLSocket | None = None
        # an ASCII host as bytes: a str makes getaddrinfo encode it with the "idna" codec,
        # whose import costs a fresh Spark worker several ms before its first request
        wire_host: str | bytes = host.encode("ascii") if host.isascii() else host
        raw = socket.create_connection((wire_host, port), timeout=timeout_s)  # type: ignore[arg-type]
        self._sock: socket.socket = raw
        try:
            raw.settimeout(timeout_s)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if security is not None and security.tls:
                self._ssl = self._handshake(security, raw, host)
                self._sock = self._ssl
            if security is not None and security.sasl:
                self._authenticate(security)
        except BaseException:
            self.close()
            raise

    def _handshake(self, security: ClientSecurity, raw: socket.socket, host: str) -> ssl.SSLSocket:
        try:
            wrapped: ssl.SSLSocket = security.wrap(raw, host)
        except ssl.SSLCertVerificationError as exc:
            raise AuthenticationError(
                f"{host}:{self.address[1]}: the broker's TLS certificate was refused: "
                f"{exc.verify_message or exc} (options 'kafka.ssl.truststore.location' and "
                "'kafka.ssl.endpoint.identification.algorithm')"
            ) from None
        return wrapped

    def _authenticate(self, security: ClientSecurity) -> None:
        from kafka_security.client_security import authenticate
        from kafka_security.sasl_mechanisms import SaslAuthenticationError

        try:
            authenticate(security, self.request)
        except SaslAuthenticationError as exc:
            raise AuthenticationError(
                f"{self.address[0]}:{self.address[1]}: {exc} (options "
                "'kafka.sasl.jaas.config' and 'kafka.sasl.mechanism')"
            ) from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def fileno(self) -> int:
        """The socket's descriptor, for ``select``."""
        return self._sock.fileno()

    def pending(self) -> bool:
        """Whether bytes already received and decrypted wait in the TLS layer, where
        ``select`` on :meth:`fileno` does not see them."""
        return self._ssl is not None and self._ssl.pending() > 0

    def _recv_exact(self, n: int) -> bytearray:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if not k:
                raise ConnectionError(f"{self.address} closed the connection")
            got += k
        return out

    def send(self, api_key: int, version: int, body: bytes, *, flexible: bool = False) -> None:
        """Send a hand-encoded request body; its response comes from :meth:`receive`."""
        self._correlation += 1
        header = _FRAME_HEAD.pack(api_key, version, self._correlation, len(self._client_id))
        header += self._client_id + (b"\x00" if flexible else b"")
        self._sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        self._in_flight.append(self._correlation)

    def receive(self) -> bytearray:
        """The next response frame (after its size), starting with the correlation id."""
        (size,) = struct.unpack(">i", self._recv_exact(4))
        frame = self._recv_exact(size)
        (correlation,) = struct.unpack_from(">i", frame, 0)
        expected = self._in_flight.pop(0) if self._in_flight else None
        if correlation != expected:
            raise ConnectionError(f"{self.address}: response {correlation} out of order")
        return frame

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses were not received yet."""
        return len(self._in_flight)

    def request(self, entity: Any) -> Any:
        """Send a kio request entity and return its decoded kio response."""
        from kio.index import load_response_schema
        from kio.serial import entity_reader, entity_writer

        api_key, version = int(entity.__api_key__), int(entity.__version__)
        body = io.BytesIO()
        entity_writer(type(entity))(body, entity)
        self.send(api_key, version, body.getvalue(), flexible=bool(entity.__flexible__))
        frame = bytes(self.receive())
        response_cls = load_response_schema(api_key, version)
        pos = 4
        if response_cls.__flexible__ and api_key != 18:
            pos = skip_tagged_fields(frame, pos)
        value, _ = entity_reader(response_cls)(frame, pos)
        return value
