"""Fetching one partition's record batches, raw: the reader's fast path.

A reading task (:func:`spark_connector.read.consumer.read_range`) reads one offset range of one
partition. :class:`PartitionFetcher` talks to that partition's leader directly with the
Kafka protocol (leaders from the connector's wire-client core,
:class:`~spark_connector.kafka.cluster.Cluster`), so the task receives whole record batches (a Fetch response's ``records``
blob) and decodes them straight into Arrow columns
(:mod:`spark_connector.records.decoder`), instead of one client ``Message`` object per record.

Requests (hand-encoded, non-flexible versions every Kafka since 2.3 and Millrace serve):
Fetch v11 (no fetch session: ``session_epoch`` -1, one partition, ``isolation_level`` as
asked), ListOffsets v4 (earliest -2 / latest -1, with the isolation level: latest is the last
stable offset under read_committed), Metadata v9 through kio for the leader.

Pipelining: :meth:`PartitionFetcher.fetch` sends the request for an offset unless it was
already sent (:meth:`prefetch`), then reads the response; the reader prefetches the next
offset as soon as it knows it (after scanning batch headers, before decoding records), so
the broker reads the log while the task decodes. At most one prefetch is in flight.

Failures: a connection error, or a partition error that means the leader moved
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION,
FENCED/UNKNOWN_LEADER_EPOCH, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR,
NOT_ENOUGH_REPLICAS, OFFSET_NOT_AVAILABLE) drops the connection and looks the leader up
again; the result carries the error code so the caller decides (it retries until its
no-progress timeout). OFFSET_OUT_OF_RANGE is returned to the caller, which checks the log
bounds again (data loss). ListOffsets (:meth:`PartitionFetcher.watermarks`) is retried under
the caller's deadline by :meth:`~spark_connector.kafka.cluster.Cluster.retrying`, as every
other request of the wire client; error codes and names are
:mod:`spark_connector.kafka.errors`' (``FETCH_LEADER_MOVED``, ``CONNECTION_ERROR``). The
connection to the leader is the fetcher's own (requests are pipelined on it), opened by
:meth:`~spark_connector.kafka.cluster.Cluster.open_connection`.

Short-circuit reads (``local_reads``, the read option ``localReads``): when the leader is a
Millrace broker that lists MillraceLocalFetch (its own API key 32000) in ApiVersions (asked
once per connection, as ``millrace-spark-connector``), the fetcher sends that instead of
Fetch: the same request, answered with where the records lie in the leader's segment file,
which :class:`~spark_connector.kafka.local_files.LocalFiles` reads when the file is on this
machine. Records it cannot vouch for are fetched again with Fetch, and short-circuit reads
stop for the fetcher when they cannot work here (another machine, no permission). Against
Apache Kafka nothing changes (it does not list the key).

Security: the fetcher's connection to the leader carries the TLS and SASL settings of its
:class:`~spark_connector.kafka.cluster.Cluster` (``security``, or the shared cluster's). A topic
the user may not describe or read (TOPIC_AUTHORIZATION_FAILED in Metadata, ListOffsets or
Fetch) raises :class:`FetcherError` at once.

Concurrency: one fetcher per task thread; it owns its connection. Nothing here is pickled.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_connector.kafka.cluster import WIRE_ERRORS, Cluster, Unreachable
from spark_connector.kafka.connection import read_uvarint, skip_tagged_fields
from spark_connector.kafka.errors import (
    AUTHORIZATION_FAILED,
    CONNECTION_ERROR,
    FETCH_LEADER_MOVED,
    NONE,
    OFFSET_OUT_OF_RANGE,
    KafkaRequestError,
    Retriable,
    error_name,
)
from spark_connector.kafka.local_files import LOCAL_FETCH, LocalFiles

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity
    from spark_connector.kafka.connection import Connection

__all__ = [
    "CONNECTION_ERROR",
    "NONE",
    "OFFSET_OUT_OF_RANGE",
    "RETRIABLE",
    "FetchResult",
    "FetcherError",
    "PartitionFetcher",
    "error_name",
]

FETCH, LIST_OFFSETS, API_VERSIONS = 1, 2, 18
FETCH_VERSION, LIST_OFFSETS_VERSION, API_VERSIONS_VERSION = 11, 4, 3
SOFTWARE_NAME = "millrace-spark-connector"
"""The ``client_software_name`` of the fetcher's ApiVersions (a Millrace broker lists its own
APIs to a client whose name starts with ``millrace``)."""
EARLIEST, LATEST = -2, -1

RETRIABLE = FETCH_LEADER_MOVED
"""The partition errors after which the fetcher looks the leader up again (the caller retries
until its no-progress timeout)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start
_ABORTED = struct.Struct(">qq")  # producer id, first offset


class FetcherError(RuntimeError):
    """A request failed for good (not a retriable error)."""


@dataclass(slots=True)
class FetchResult:
    """One partition's share of a Fetch response. ``records`` is a view into the response
    frame (valid as long as the result is referenced)."""

    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    """Aborted transactions overlapping the records: ``(producer_id, first_offset)``."""
    records: memoryview | None = None


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


class PartitionFetcher:
    """Fetches ``topic[partition]`` from its leader (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        *,
        read_committed: bool,
        client_id: str = "millrace-spark-reader",
        timeout_s: float = 30.0,
        max_wait_ms: int = 100,
        partition_max_bytes: int = 8 << 20,
        cluster: Cluster | None = None,
        security: ClientSecurity | None = None,
        local_reads: bool = True,
    ) -> None:
        # ``cluster``: a metadata client of the caller's to share (not closed here), whose
        # security is used; ``security``: TLS and SASL of a cluster made here
        self._owns_cluster = cluster is None
        self._cluster = cluster or Cluster(
            bootstrap, client_id=client_id, request_timeout_s=timeout_s, security=security
        )
        self.topic = topic
        self.partition = partition
        self._isolation = 1 if read_committed else 0
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._max_wait_ms = max_wait_ms
        self._partition_max_bytes = partition_max_bytes
        self._topic_bytes = _string(topic)
        self._conn: Connection | None = None
        self._leader: tuple[str, int] | None = None
        self._pending: int | None = None  # offset of the Fetch in flight
        self._pending_local = False  # whether that request is a MillraceLocalFetch
        self._files: LocalFiles | None = LocalFiles() if local_reads else None
        self._local = False  # the connection's broker serves MillraceLocalFetch

    @property
    def files_read(self) -> int:
        """Fetches answered by reading the leader's segment file here (short-circuit)."""
        return 0 if self._files is None else self._files.reads

    def close(self) -> None:
        self._drop()
        if self._files is not None:
            self._files.close()
        if self._owns_cluster:
            self._cluster.close()

    def __enter__(self) -> PartitionFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connection ------------------------------------------------------------------------

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._leader = None
        self._pending = None
        self._local = False

    def _find_leader(self) -> tuple[str, int]:
        try:
            self._cluster.refresh([self.topic])
        except Unreachable as exc:
            raise Retriable(
                f"no broker of {self._cluster.bootstrap_text} answered ({exc})", CONNECTION_ERROR
            ) from exc
        info = self._cluster.topics.get(self.topic)
        if info is not None and info.error in AUTHORIZATION_FAILED:
            raise FetcherError(
                f"{self.topic}[{self.partition}]: Metadata: {error_name(info.error)} (the user "
                "needs the DESCRIBE and READ ACLs of the topic)"
            )
        address = self._cluster.leader_address(self.topic, self.partition)
        if address is None:
            raise Retriable(f"{self.topic}[{self.partition}] has no leader", 5)
        return address

    def _connection(self) -> Connection:
        if self._conn is None:
            leader = self._find_leader()
            try:
                self._conn = self._cluster.open_connection(leader, self._timeout_s, self._client_id)
            except OSError as exc:
                raise Retriable(f"leader {leader} ({exc})", CONNECTION_ERROR) from exc
            self._leader = leader
            if self._files is not None and self._files.usable:
                try:
                    self._local = _serves_local_fetch(self._conn)
                except (OSError, ConnectionError, struct.error, IndexError) as exc:
                    self._drop()
                    raise Retriable(f"leader {leader} ({exc})", CONNECTION_ERROR) from exc
        return self._conn

    def _send_fetch(self, offset: int) -> None:
        conn = self._connection()
        local = self._local and self._files is not None and self._files.usable
        conn.send(LOCAL_FETCH if local else FETCH, FETCH_VERSION, self._fetch_body(offset))
        self._pending = offset
        self._pending_local = local

    # --- ListOffsets -----------------------------------------------------------------------

    def _list_offset(self, timestamp: int) -> int:
        body = b"".join(
            (
                _I32.pack(-1),  # replica id
                bytes((self._isolation,)),
                _I32.pack(1),
                self._topic_bytes,
                _I32.pack(1),
                struct.pack(">iiq", self.partition, -1, timestamp),
            )
        )
        conn = self._connection()
        if self._pending is not None:  # never interleave with a prefetch
            conn.receive()
            self._pending = None
        conn.send(LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        frame = conn.receive()
        pos = 8  # correlation id, throttle time
        (topics,) = _I32.unpack_from(frame, pos)
        pos += 4
        for _ in range(topics):
            (name_len,) = _I16.unpack_from(frame, pos)
            pos += 2 + name_len
            (parts,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(parts):
                index, error, _ts, offset, _epoch = struct.unpack_from(">ihqqi", frame, pos)
                pos += 26
                if index != self.partition:
                    continue
                if error in RETRIABLE:
                    raise Retriable("ListOffsets", error)
                if error != NONE:
                    raise FetcherError(
                        f"ListOffsets {self.topic}[{self.partition}]: {error_name(error)}"
                    )
                return int(offset)
        raise FetcherError(f"ListOffsets: no answer for {self.topic}[{self.partition}]")

    def watermarks(self, deadline: float) -> tuple[int, int]:
        """``(log start offset, end offset)``; the end is the last stable offset under
        read_committed. Retries a moved leader until ``deadline`` (``time.monotonic()``)."""
        where = f"{self.topic}[{self.partition}]"

        def attempt() -> tuple[int, int]:
            try:
                return self._list_offset(EARLIEST), self._list_offset(LATEST)
            except (Retriable, *WIRE_ERRORS):
                self._drop()
                raise

        try:
            return self._cluster.retrying(
                f"{where}: ListOffsets", attempt, deadline - time.monotonic()
            )
        except KafkaRequestError as exc:
            raise FetcherError(f"{where}: no answer to ListOffsets: {exc}") from exc

    # --- Fetch -----------------------------------------------------------------------------

    def _fetch_body(self, offset: int) -> bytes:
        return b"".join(
            (
                struct.pack(
                    ">iiiibii",
                    -1,  # replica id
                    self._max_wait_ms,
                    1,  # min bytes
                    max(self._partition_max_bytes, 1 << 20),  # max bytes
                    self._isolation,
                    0,  # session id
                    -1,  # session epoch: a full fetch, no session
                ),
                _I32.pack(1),
                self._topic_bytes,
                _I32.pack(1),
                struct.pack(">iiqqi", self.partition, -1, offset, -1, self._partition_max_bytes),
                _I32.pack(0),  # forgotten topics
                _I16.pack(0),  # rack id ""
            )
        )

    def prefetch(self, offset: int) -> None:
        """Send the Fetch for ``offset`` now (its response is read by ``fetch(offset)``).
        A failure is left for :meth:`fetch` to report."""
        if self._pending is not None:
            return
        try:
            self._send_fetch(offset)
        except (Retriable, OSError, ConnectionError):
            self._drop()

    def fetch(self, offset: int) -> FetchResult:
        """The records at ``offset`` (a Fetch request unless prefetched); errors come back
        as the result's ``error_code`` (after dropping the connection for a moved leader)."""
        try:
            if self._pending is not None and self._pending != offset:
                assert self._conn is not None
                self._conn.receive()  # a prefetch of another offset: discarded
                self._pending = None
            if self._pending is None:
                self._send_fetch(offset)
            assert self._conn is not None
            frame = self._conn.receive()
            self._pending = None
            result = self._parse(frame)
            if self._pending_local and result.records is not None:
                assert self._files is not None
                data = self._files.read(result.records)
                if data is None:  # not readable here: the records over the connection
                    self._conn.send(FETCH, FETCH_VERSION, self._fetch_body(offset))
                    result = self._parse(self._conn.receive())
                else:
                    result.records = memoryview(data)
        except Retriable as exc:
            self._drop()
            return FetchResult(exc.code)
        except (OSError, ConnectionError, struct.error):
            self._drop()
            return FetchResult(CONNECTION_ERROR)
        if result.error_code in RETRIABLE:
            self._drop()
        return result

    def _parse(self, frame: bytearray) -> FetchResult:
        """The partition's result in a Fetch v11 (or MillraceLocalFetch) response frame."""
        view = memoryview(frame)
        # correlation id, throttle time, top-level error, session id
        (error,) = _I16.unpack_from(frame, 8)
        if error != NONE:
            return FetchResult(error)
        pos = 14
        (topics,) = _I32.unpack_from(frame, pos)
        pos += 4
        for _ in range(topics):
            (name_len,) = _I16.unpack_from(frame, pos)
            pos += 2 + name_len
            (parts,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(parts):
                index, err, high, lso, log_start = _PARTITION_HEAD.unpack_from(frame, pos)
                pos += _PARTITION_HEAD.size
                (n_aborted,) = _I32.unpack_from(frame, pos)
                pos += 4
                aborted: list[tuple[int, int]] | None = None
                if n_aborted >= 0:
                    aborted = [_ABORTED.unpack_from(frame, pos + 16 * i) for i in range(n_aborted)]
                    pos += 16 * n_aborted
                pos += 4  # preferred read replica
                (size,) = _I32.unpack_from(frame, pos)
                pos += 4
                records = None
                if size > 0:
                    records = view[pos : pos + size]
                    pos += size
                if index == self.partition:
                    return FetchResult(err, high, lso, log_start, aborted, records)
        return FetchResult(CONNECTION_ERROR)


def _serves_local_fetch(conn: Connection) -> bool:
    """Whether the broker lists MillraceLocalFetch v11 (ApiVersions v3, naming this client)."""
    name = SOFTWARE_NAME.encode()
    version = b"1"
    body = bytes((len(name) + 1,)) + name + bytes((len(version) + 1,)) + version + b"\x00"
    conn.send(API_VERSIONS, API_VERSIONS_VERSION, body, flexible=True)
    frame = conn.receive()
    (error,) = _I16.unpack_from(frame, 4)  # header v0: the correlation id only
    if error != NONE:
        return False
    pos = 6
    count, pos = read_uvarint(frame, pos)
    for _ in range(count - 1):
        key, low, high = struct.unpack_from(">hhh", frame, pos)
        pos = skip_tagged_fields(frame, pos + 6)
        if key == LOCAL_FETCH:
            return low <= FETCH_VERSION <= high
    return False
