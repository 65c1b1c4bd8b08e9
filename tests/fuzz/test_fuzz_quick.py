"""The seed-fixed protocol fuzzing of ``make test`` (issue 17), against one real broker.

* Hypothesis, derandomized: requests of every supported (api key, version) built from the
  kio schemas, schema-valid and lying, each sent on its own connection and checked (a
  well-formed answer with the right correlation id, or a close only after a lying request).
* A seed-fixed run of the pipelined runner (``MILLRACE_FUZZ_QUICK`` requests, 20,000 by
  default): every mode, the canary, the on-disk log check and a real client reading the
  fuzzed topics back (see tests/fuzz/session.py).
* The regressions the fuzzer found that need a live broker (Produce validation order,
  internal topics).

The million-request run is tests/fuzz/test_fuzz_long.py (``make fault``).
"""

from __future__ import annotations

import os
import socket
import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings

from broker.protocol import records
from tests.fuzz import batches, mutations, strategies
from tests.fuzz.runner import Runner, _produce_acks_zero, _Sent
from tests.fuzz.session import FUZZ_PROPS, fuzz_session
from tests.fuzz.strategies import DrawSource, Generated

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

# integration only (not property): it needs a cluster, and make test-unit runs
# "unit or property" without one
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(FUZZ_PROPS),
]

QUICK_REQUESTS = int(os.environ.get("MILLRACE_FUZZ_QUICK", "20000"))
QUICK_SEED = 17


def _exchange(cluster: Cluster, gen: Generated) -> Runner:
    """Send one request on a fresh connection; return the runner whose checks judged it."""
    runner = Runner(
        cluster.host, cluster.port, cluster.broker_pid(), seed=0, total=0, fail_fast=False
    )
    body = gen.body[:4] + struct.pack(">i", 1) + gen.body[8:] if len(gen.body) >= 8 else gen.body
    api_key = int.from_bytes(body[0:2], "big", signed=True) if len(body) >= 2 else -1
    version = int.from_bytes(body[2:4], "big", signed=True) if len(body) >= 4 else -1
    corr = int.from_bytes(body[4:8], "big", signed=True) if len(body) >= 8 else -1
    sent = _Sent(gen, corr, api_key, version, len(body), _produce_acks_zero(body))
    data = bytearray()
    with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
        try:
            sock.sendall(struct.pack(">i", len(body)) + body)
            if sent.acks_zero:
                sock.sendall(struct.pack(">i", 10) + b"\x00\x12\x00\x00\x7f\xff\xff\xff\xff\xff")
            sock.shutdown(socket.SHUT_WR)
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        except (ConnectionError, OSError) as exc:
            if isinstance(exc, TimeoutError):
                raise  # no answer and no close: a hang
            # the broker closed first (possibly before we finished writing): what it sent
            # before closing, if anything, is judged below
    if len(data) < 4:
        runner.on_close(sent)
        return runner
    (size,) = struct.unpack_from(">i", data, 0)
    frame = bytes(data[4 : 4 + size])
    if sent.acks_zero and struct.unpack_from(">i", frame, 0)[0] == 0x7FFFFFFF:
        return runner  # nothing owed; the sentinel answered
    runner.check_response(sent, frame)
    return runner


HYPOTHESIS = settings(
    max_examples=int(os.environ.get("MILLRACE_FUZZ_EXAMPLES", "150")),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@HYPOTHESIS
@given(strategies.requests())
def test_any_request_is_answered_or_closes(cluster: Cluster, gen: Generated) -> None:
    runner = _exchange(cluster, gen)
    assert not runner.stats.failures, runner.stats.failures


@HYPOTHESIS
@given(strategies.requests(lie=0.1))
def test_lying_request_is_answered_or_closes(cluster: Cluster, gen: Generated) -> None:
    runner = _exchange(cluster, gen)
    assert not runner.stats.failures, runner.stats.failures


@HYPOTHESIS
@given(strategies.st.data())
def test_mutated_request_is_answered_or_closes(
    cluster: Cluster, data: strategies.st.DataObject
) -> None:
    src = DrawSource(data.draw)
    gen = mutations.any_mutation(src)
    assert gen.api_key not in mutations.CONTROLLER_APIS  # see tests/fuzz/mutations.py
    gen.frame_claim = None  # one frame per connection here: a lying prefix proves nothing
    runner = _exchange(cluster, gen)
    assert not runner.stats.failures, runner.stats.failures


@HYPOTHESIS
@given(strategies.st.data())
def test_hostile_batch_gets_kafkas_error_code(
    cluster: Cluster, data: strategies.st.DataObject
) -> None:
    src = DrawSource(data.draw)
    gen = strategies.produce_request(src)
    runner = _exchange(cluster, gen)
    assert not runner.stats.failures, runner.stats.failures


def test_seeded_fuzz_run(cluster: Cluster) -> None:
    """QUICK_REQUESTS requests over 6 pipelined connections; every invariant of
    tests/fuzz/session.py holds afterwards."""
    report = fuzz_session(cluster, total=QUICK_REQUESTS, seed=QUICK_SEED)
    summary = report.summary()
    print(f"fuzz quick: {summary}")
    assert not report.problems, "\n".join(report.problems[:10])
    assert summary["requests"] >= QUICK_REQUESTS
    assert summary["answered"] > QUICK_REQUESTS // 2 and summary["connections_closed"] > 0


# --- regressions that need a live broker ------------------------------------------------------


def _produce(cluster: Cluster, topic: str, data: bytes, version: int = 3) -> int:
    with cluster.raw() as conn:
        return int(conn.produce(topic, 0, data, version=version).error_code)


def test_client_may_not_append_to_internal_topics(cluster: Cluster) -> None:
    batch = records.encode_batch([records.SimpleRecord(b"v", b"k", 0)])
    with cluster.raw() as conn:  # make sure __consumer_offsets exists
        conn.send_frame(conn.header(10, 1, 1) + struct.pack(">h", 5) + b"fuzzx" + b"\x00")
        conn.recv_frame()
    cluster.wait_for(
        lambda: _produce(cluster, "__consumer_offsets", batch) == 17, 30, "INVALID_TOPIC"
    )


def test_produce_validation_answers_like_kafka(cluster: Cluster) -> None:
    cluster.create_topic("fuzz-regress", 1)
    one = records.encode_batch([records.SimpleRecord(b"v", b"k", 0)])
    zstd = records.encode_batch([records.SimpleRecord(b"v", b"k", 0)], compression_type=4)
    assert _produce(cluster, "fuzz-regress", one) == 0
    assert _produce(cluster, "fuzz-regress", one + one) == batches.INVALID_RECORD
    assert _produce(cluster, "fuzz-regress", b"") == batches.INVALID_RECORD
    assert _produce(cluster, "fuzz-regress", zstd, version=6) == batches.UNSUPPORTED_CODEC
    assert _produce(cluster, "fuzz-regress", zstd, version=7) == 0
    bad = bytearray(one)
    bad[-1] ^= 0xFF  # the value's last byte: CRC mismatch
    assert _produce(cluster, "fuzz-regress", bytes(bad)) == batches.CORRUPT
