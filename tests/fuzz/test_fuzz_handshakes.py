"""Fuzzing the security handshakes (issue 28) against one real SASL_SSL broker, seed-fixed:

* TLS: a real ClientHello (made by Python's ``ssl`` through memory BIOs) with bytes flipped,
  cut short, repeated, or replaced by noise, plus plaintext Kafka requests, sent raw to the
  TLS port. The broker must answer with at most a TLS alert and close, within the handshake
  timeout; never a Kafka response, never a hang.
* SASL, inside a valid TLS session: SaslHandshake with mutated mechanism names and versions,
  SaslAuthenticate carrying mutated SCRAM messages (a real exchange's client-first and
  client-final with bytes flipped, truncated, duplicated or swapped), random tokens after a
  v0 handshake, and requests out of order. Every request gets a well-formed response with
  its correlation id, or the connection is closed; an authentication the fuzzer did not make
  correctly never succeeds.

Afterwards the broker process is alive, a real client still produces and consumes over
SASL_SSL, and the broker's log holds no ERROR and no traceback. ``MILLRACE_FUZZ_HANDSHAKES``
sets the number of connections (default 200).
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fuzz.session import _broker_problems
from tests.harness.cluster import Cluster
from tests.harness.processes import pid_alive

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(brokers=1, security="sasl_ssl"),
]

CONNECTIONS = int(os.environ.get("MILLRACE_FUZZ_HANDSHAKES", "200"))
SEED = 28
PASSWORD = "fuzz-user-password"


def _client_hello() -> bytes:
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _mutate(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    buf = bytearray(data)
    if kind == 0 and buf:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf)
    if kind == 1:
        return bytes(buf[: rng.randrange(len(buf) + 1)])
    if kind == 2:
        return bytes(buf) * rng.randint(2, 3)
    if kind == 3:
        return rng.randbytes(rng.randint(0, 600))
    if kind == 4 and len(buf) > 2:
        i, j = sorted(rng.sample(range(len(buf)), 2))
        return bytes(buf[:i] + buf[j:i:-1] + buf[j:]) if j > i else bytes(buf)
    return bytes(buf) + rng.randbytes(rng.randint(1, 64))


def _frame(api_key: int, version: int, corr: int, body: bytes, flexible: bool) -> bytes:
    header = struct.pack(">hhih", api_key, version, corr, 4) + b"fuzz"
    if flexible:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _str16(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


def _compact_bytes(data: bytes) -> bytes:
    n = len(data) + 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out) + data


def _authenticate_frame(corr: int, token: bytes, version: int) -> bytes:
    if version >= 2:
        return _frame(36, 2, corr, _compact_bytes(token) + b"\x00", True)
    return _frame(36, version, corr, struct.pack(">i", len(token)) + token, False)


def _recv_frame(sock: ssl.SSLSocket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    head = b""
    try:
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        (size,) = struct.unpack(">i", head)
        assert 0 <= size < 1 << 20, f"response size {size}"
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return None


def _decode(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, the kio response) of a response frame; a malformed one fails."""
    from kio.serial import entity_reader

    from broker.protocol import registry

    cls = registry.response_class(api_key, version)
    (corr,) = struct.unpack_from(">i", frame, 0)
    pos = 4
    if registry.response_uses_flexible_header(api_key, version):
        assert frame[pos] == 0, "unexpected tagged fields in the response header"
        pos += 1
    value, _ = entity_reader(cls)(frame, pos)
    return corr, value


class _Tally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


def _tls_round(cluster: Cluster, rng: random.Random, hello: bytes, tally: _Tally) -> None:
    # plaintext Kafka on the TLS port, or a mutated ClientHello
    payload = _frame(18, 0, 7, b"", False) if rng.random() < 0.2 else _mutate(hello, rng)
    with socket.create_connection((cluster.host, cluster.port), timeout=15) as s:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            tally.add("tls: closed while sending")
            return
        received = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                received += chunk
        except ConnectionResetError:
            pass
        except TimeoutError:
            raise AssertionError(
                f"the broker neither answered nor closed: {payload[:40].hex()}"
            ) from None
        # a TLS record (alert or handshake) or nothing: never a Kafka frame
        assert not received or received[0] in (0x14, 0x15, 0x16, 0x17), received[:16].hex()
        tally.add("tls: alert/handshake then close" if received else "tls: closed")


@dataclass
class _SaslPlan:
    """What one connection's SASL exchange sends: the mechanism and versions, the steps in
    their (possibly shuffled) order, whether the client-final is mutated."""

    mechanism: bytes
    hs_version: int
    auth_version: int
    steps: list[tuple[str, bytes]]
    mutated_final: bool
    client: Any

    @property
    def bare(self) -> bool:
        """SaslHandshake v0 with SCRAM: the tokens go as bare length-prefixed bytes."""
        return self.hs_version == 0 and self.mechanism == b"SCRAM-SHA-512"

    def token_bytes(self, corr: int, token: bytes) -> bytes:
        if self.bare:
            return struct.pack(">i", len(token)) + token
        return _authenticate_frame(corr, token, self.auth_version)


def _plan_sasl(rng: random.Random, valid: bool) -> _SaslPlan:
    """One exchange, mutated at random; ``valid``: a correct exchange (the control)."""
    from kafka_security.sasl_mechanisms import make_client

    mechanism = rng.choice(
        [b"SCRAM-SHA-512", b"SCRAM-SHA-256", b"PLAIN", b"GSSAPI", b"", rng.randbytes(12)]
    )
    hs_version = rng.choice([0, 1, 1, 1])
    if valid:
        mechanism, hs_version = b"SCRAM-SHA-512", 1
    steps: list[tuple[str, bytes]] = []
    if valid or rng.random() < 0.85:
        steps.append(("handshake", mechanism))
    client = make_client("SCRAM-SHA-512", "fuzzer", PASSWORD)
    first = client.first()
    steps.append(("token", _mutate(first, rng) if not valid and rng.random() < 0.5 else first))
    steps.append(("final", b""))
    if not valid and rng.random() < 0.2:
        rng.shuffle(steps)
    auth_version = rng.choice([0, 1, 2, 2])
    mutated_final = not valid and rng.random() < 0.9
    return _SaslPlan(mechanism, hs_version, auth_version, steps, mutated_final, client)


def _sasl_final(
    sock: Any, plan: _SaslPlan, rng: random.Random, server_first: bytes, corr: int, tally: _Tally
) -> bool | None:
    """Answer the server-first message with the client-final (mutated as planned): True if
    authenticated, False if refused, None if the broker closed the connection."""
    try:
        final = plan.client.respond(server_first) or b""
    except Exception:  # noqa: BLE001 - the fuzzer sent a mutated client-first
        final = rng.randbytes(40)
    if plan.mutated_final:
        final = _mutate(final, rng)
    sock.sendall(plan.token_bytes(corr, final))
    reply = _recv_frame(sock)
    if reply is None:
        tally.add("sasl: closed after final")
        return None
    if plan.bare:
        return True
    got, response = _decode(36, plan.auth_version, reply)
    assert got == corr
    code = int(response.error_code)
    tally.add(f"sasl: final error {code}")
    return code == 0


def _sasl_exchange(sock: Any, plan: _SaslPlan, rng: random.Random, tally: _Tally) -> bool | None:
    """Send the planned steps: True if authenticated, False if not, None if the broker
    closed the connection."""
    corr = 0
    for kind, value in plan.steps:
        corr += 1
        if kind == "handshake":
            sock.sendall(_frame(17, plan.hs_version, corr, _str16(value), False))
        elif kind == "token":
            sock.sendall(plan.token_bytes(corr, value))
        else:
            continue  # the final message needs the server's first reply: below
        frame = _recv_frame(sock)
        if frame is None:
            tally.add(f"sasl: closed after {kind}")
            return None
        if kind == "token" and plan.bare:
            server_first = frame
        else:
            got, response = _decode(
                17 if kind == "handshake" else 36,
                plan.hs_version if kind == "handshake" else plan.auth_version,
                frame,
            )
            assert got == corr, f"correlation id {got}, expected {corr}"
            code = int(response.error_code)
            tally.add(f"sasl: {kind} error {code}")
            if code != 0 or kind != "token":
                continue
            server_first = bytes(response.auth_bytes)
        return _sasl_final(sock, plan, rng, server_first, corr + 1, tally)
    return False


def _sasl_round(cluster: Cluster, rng: random.Random, tally: _Tally, valid: bool) -> None:
    """One connection's SASL exchange, mutated at random; ``valid``: a correct exchange (the
    control: it must succeed)."""
    ctx = ssl.create_default_context(cafile=cluster.client_config["ssl.ca.location"])
    raw = socket.create_connection((cluster.host, cluster.port), timeout=15)
    with ctx.wrap_socket(raw, server_hostname=cluster.host) as sock:
        plan = _plan_sasl(rng, valid)
        authenticated = _sasl_exchange(sock, plan, rng, tally)
    if authenticated is None:
        return
    if authenticated:
        # only an unmutated exchange may succeed
        assert not plan.mutated_final, "a mutated SCRAM client-final was accepted"
        tally.add("sasl: authenticated")
    assert authenticated or not valid, "a correct SCRAM exchange was refused"


def test_handshake_fuzzing(cluster: Cluster) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    for f in (
        cluster.admin()
        .client.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "fuzzer",
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                    PASSWORD.encode(),
                )
            ]
        )
        .values()
    ):
        f.result(timeout=30)
    rng = random.Random(SEED)
    hello = _client_hello()
    tally = _Tally()
    pid = cluster.broker_pid()
    for i in range(CONNECTIONS):
        if i % 25 == 0:
            _sasl_round(cluster, rng, tally, valid=True)
        elif rng.random() < 0.4:
            _tls_round(cluster, rng, hello, tally)
        else:
            _sasl_round(cluster, rng, tally, valid=False)
    print(f"handshake fuzzing, seed {SEED}: {sorted(tally.counts.items())}")
    assert pid_alive(pid)
    assert tally.counts.get("sasl: authenticated", 0) > 0, "no valid exchange was tried"
    # a real client is still served
    from confluent_kafka import Consumer, Producer

    cluster.create_topic("after-fuzz", 1)
    p = Producer(cluster.conf())
    for i in range(10):
        p.produce("after-fuzz", value=b"%d" % i)
    assert p.flush(30) == 0
    c = Consumer(cluster.conf({"group.id": "after-fuzz", "auto.offset.reset": "earliest"}))
    c.subscribe(["after-fuzz"])
    got: list[Any] = []
    for _ in range(120):
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
        if len(got) == 10:
            break
    c.close()
    assert len(got) == 10
    assert _broker_problems(cluster) == []
