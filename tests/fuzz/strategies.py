"""Request generators built from the kio schemas, for every supported (api_key, version).

One generator, two sources of choices:

* :class:`RandomSource` (``random.Random``): the long run, about 10^4 requests a second of
  generation on one core;
* :class:`DrawSource` (a Hypothesis ``draw``): the seed-fixed property tests, so a failure
  shrinks. :func:`requests` is the Hypothesis strategy.

A generated request (:class:`Generated`) is the frame body (header + request) with
correlation id 0 (the runner patches bytes 4..8) and what the invariants may expect of it:

* ``valid``: the bytes follow the schema (values may be strange: negative or huge numbers,
  empty or long strings, big arrays, unknown tagged fields); the broker must answer with a
  well-formed response, never close, except for Produce with acks=0 (no response, and Kafka
  closes the connection when such a produce fails) and frames over the size limit;
* otherwise something lies (a length or count, a null where the schema forbids it, invalid
  UTF-8, a bool that is neither 0 nor 1, the wrong header version, an unknown API key or
  version): the broker must answer well-formed or close that connection.

Field values aim at what the broker knows (topic, group and transactional-id pools, small
partition numbers, short timeouts) most of the time, so that requests reach deep into the
handlers. A few fields are guarded so the fuzzer cannot legitimately wreck the cluster it
tests: controller requests (LeaderAndIsr, StopReplica, UpdateMetadata) always carry a stale
controller epoch, ControlledShutdown never names broker 1, DeleteTopics never names the
produce topics, and no pool holds the canary's topic.

Concurrency: a generator object belongs to one thread.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st

from tests.fuzz import batches, schema, wire
from tests.fuzz.schema import Field, Struct

T = TypeVar("T")

PRODUCE = 0
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN = 4, 5, 6, 7
CONTROLLER_APIS = frozenset({LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN})
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37

PRODUCE_TOPICS = ("fuzz-a", "fuzz-b", "fuzz-c")  # created by the runner (fuzz-c compacted)
CHURN_TOPICS = tuple(f"fuzz-churn-{i}" for i in range(6))
COMPACTED = frozenset({"fuzz-c"})
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
INVALID_TOPIC = 17
GROUPS = ("fuzz-g0", "fuzz-g1", "fuzz-g2")
TXN_IDS = ("fuzz-t0", "fuzz-t1")
BAD_NAMES = (
    "",
    ".",
    "..",
    "a" * 250,
    "bad/name",
    "spaces here",
    "\u00e9t\u00e9",
    "__consumer_offsets",
)


class RandomSource:
    """Choices from ``random.Random`` (fast)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def raw(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.rng.randrange(len(seq))]


class DrawSource:
    """Choices drawn from Hypothesis (each shrinks towards the plain choice)."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return int(self.draw(st.integers(low, high)))

    def chance(self, p: float) -> bool:
        # shrinks to 0, i.e. to "no"
        return bool(self.draw(st.integers(0, 9999)) >= (1.0 - p) * 10000)

    def raw(self, n: int) -> bytes:
        return bytes(self.draw(st.binary(min_size=n, max_size=n)))

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.draw(st.integers(0, len(seq) - 1))]


Source = RandomSource | DrawSource


@dataclass(slots=True)
class Generated:
    """One fuzzed request frame body (correlation id 0) and what may be expected of it."""

    api_key: int
    version: int
    body: bytes
    kind: str
    valid: bool  # bytes follow the schema: a response is owed (see the module docstring)
    produce_expect: dict[tuple[str, int], frozenset[int]] = field(default_factory=dict)
    batch_kinds: tuple[str, ...] = ()
    batch_by_partition: dict[tuple[str, int], str] = field(default_factory=dict)
    frame_claim: int | None = None  # a lying size prefix (the runner then half-closes)
    lies: list[str] = field(default_factory=list)


_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_PARTITION_NAMES = frozenset({"partition_index", "partition", "index", "partition_id"})
_PARTITION_ARRAYS = frozenset({"partitions", "partition_indexes", "partition_ids"})
# integer fields whose values are picked from a few (repeats weigh the choice)
_INT_CHOICES: dict[str, tuple[int, ...]] = {
    "acks": (-1, 0, 1, 1, 1, -1),
    "num_partitions": (-1, 1, 2, 3),
    "count": (-1, 1, 2, 3),
    "replication_factor": (-1, 1, 1, 2),
}


class Generator:
    """Encodes one request from a schema, choosing values with ``src``.

    ``strange`` is the chance that a field takes a strange (but schema-valid) value;
    ``lie`` the chance that it is written in a way the schema forbids."""

    def __init__(
        self, src: Source, *, strange: float = 0.05, lie: float = 0.0, max_string: int = 2**16
    ) -> None:
        self.src = src
        self.strange = strange
        self.lie = lie
        self.max_string = max_string
        self.lies: list[str] = []
        self.produce_expect: dict[tuple[str, int], frozenset[int]] = {}
        self.batch_kinds: list[str] = []
        self.batch_by_partition: dict[tuple[str, int], str] = {}
        self.api_key = -1
        self.version = -1
        self._topic: str | None = None
        self._partition: int | None = None
        self.acks: int | None = None
        self.transactional = False
        self.plain_produce = False  # Produce without a transactional id (hostile batches only)

    # --- values ------------------------------------------------------------------------

    def _lying(self, what: str) -> bool:
        if self.lie and self.src.chance(self.lie):
            self.lies.append(what)
            return True
        return False

    def _int(self, f: Field, bits: int) -> int:
        src = self.src
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        special = self._guard_int(f)
        if special is None and src.chance(self.strange):
            special = src.pick(
                (lo, hi, lo + 1, hi - 1, -2, src.integer(lo, hi), src.integer(lo, hi))
            )
        if special is not None:
            return special
        name = f.name
        if name in _PARTITION_NAMES or (f.array and name in _PARTITION_ARRAYS):
            return src.integer(0, 2) if src.chance(0.9) else src.integer(-1, 8)
        if name in _INT_CHOICES:
            return src.pick(_INT_CHOICES[name])
        if name in ("isolation_level",):
            return src.integer(0, 1)
        if (
            "broker" in name
            or name in ("leader", "node_id", "controller_id", "replica_id")
            or f.hint == "BrokerId"
        ):
            return src.pick((-1, 1, 1, 2, 0))
        return src.pick(
            (0, 0, 1, -1, src.integer(0, 16), src.integer(0, 1000), src.integer(lo, hi))
        )

    def _guard_int(self, f: Field) -> int | None:
        if f.name == "controller_epoch" and self.api_key in (
            LEADER_AND_ISR,
            STOP_REPLICA,
            UPDATE_METADATA,
        ):
            return self.src.pick((-(2**31), -1, 0))
        if f.name == "broker_id" and self.api_key == CONTROLLED_SHUTDOWN:
            return self.src.pick((-1, 0, 2, 99, 2**31 - 1))
        return None

    def _millis(self, f: Field) -> int:
        src = self.src
        if src.chance(self.strange):
            return src.pick((-1, -(2**31), src.integer(-(2**31), -1), 0))
        name = f.name
        if name == "session_timeout":
            return src.integer(6000, 10000)
        if name == "transaction_timeout":
            return src.integer(1000, 60000)
        if name in ("max_wait", "rebalance_timeout"):
            return src.integer(0, 200)
        return src.integer(0, 1000)

    def _text(self, f: Field) -> str | None:
        src = self.src
        hint = f.hint
        if hint == "TopicName" or (
            f.name in ("topic", "topic_name", "topics", "name") and self._topic_like()
        ):
            return self._topic_text()
        if hint == "GroupId" or f.name == "group_id":
            return src.pick((*GROUPS, "", "fuzz-gx"))
        if hint == "TransactionalId" or f.name == "transactional_id":
            return None if (f.nullable and src.chance(0.5)) else src.pick((*TXN_IDS, ""))
        if f.nullable and src.chance(0.2):
            return None
        return src.pick(("", "fuzz", "x" * src.integer(0, 40), "1", "client-\u00fc"))

    def _topic_text(self) -> str:
        """A topic name: churned or bad ones for DeleteTopics; else mostly the produce
        topics, some churned ones, some bad names."""
        src = self.src
        if self.api_key == DELETE_TOPICS:
            return src.pick((*CHURN_TOPICS, *BAD_NAMES, "fuzz-nope"))
        roll = src.integer(0, 99)
        if roll < 60:
            return src.pick(PRODUCE_TOPICS)
        if roll < 80:
            return src.pick(CHURN_TOPICS)
        return src.pick((*BAD_NAMES, "fuzz-nope"))

    def _topic_like(self) -> bool:
        return self.api_key in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS)

    def _string(self, f: Field, flexible: bool) -> bytes:
        src = self.src
        if self._lying("string"):
            return self._lying_string(f, flexible)
        if src.chance(self.strange):
            strange = self._strange_string(flexible)
            if strange is not None:
                return strange
        value = self._text(f)
        return wire.string(None if value is None else value.encode(), flexible)

    def _lying_string(self, f: Field, flexible: bool) -> bytes:
        """A string whose encoding lies: null where not nullable, invalid UTF-8, or a length
        claim that does not match the bytes."""
        src = self.src
        choice = src.integer(0, 3)
        if choice == 0 and not f.nullable:
            return wire.string(None, flexible)
        if choice == 1:
            return wire.string(b"\xff\xfe\xc3", flexible)  # invalid UTF-8
        data = src.raw(src.integer(0, 8))
        claim = src.pick((2**15 - 1, -2, len(data) + src.integer(1, 100), 2**31 - 2))
        return wire.string(data, flexible, claim=claim)

    def _strange_string(self, flexible: bool) -> bytes | None:
        """An empty, very long or non-ASCII string; None a quarter of the time (an ordinary
        value then)."""
        src = self.src
        roll = src.integer(0, 3)
        if roll == 0:
            return wire.string(b"", flexible)
        if roll == 1:
            n = src.integer(0, self.max_string)
            return wire.string(b"s" * min(n, 32767), flexible)
        if roll == 2:
            return wire.string("\u2603\U0001f600".encode() * src.integer(1, 50), flexible)
        return None

    def _bytes(self, f: Field, flexible: bool) -> bytes:
        src = self.src
        if self._lying("bytes"):
            data = src.raw(src.integer(0, 8))
            return wire.blob(data, flexible, claim=src.pick((2**31 - 1, -5, len(data) + 1000)))
        if f.nullable and src.chance(0.1):
            return wire.blob(None, flexible)
        n = src.integer(0, 64) if not src.chance(self.strange) else src.integer(0, 100_000)
        return wire.blob(src.raw(n), flexible)

    def _records(self, flexible: bool) -> bytes:
        fb = batches.any_batch(self.src, self.version if self.api_key == PRODUCE else 9)
        self.batch_kinds.append(fb.kind)
        if self._topic is not None and self._partition is not None:
            key = (self._topic, self._partition)
            if key in self.produce_expect:
                self.produce_expect[key] = frozenset()  # duplicate partition: anything goes
            else:
                expect = fb.expect
                if self._topic in INTERNAL_TOPICS:
                    expect = frozenset({INVALID_TOPIC})
                elif self._topic in COMPACTED and expect:
                    expect = expect | {batches.INVALID_RECORD}  # keyless records refused
                self.produce_expect[key] = expect
                self.batch_by_partition[key] = fb.kind
        return wire.blob(fb.data, flexible)

    def _uuid(self) -> bytes:
        return bytes(16) if self.src.chance(0.6) else self.src.raw(16)

    def primitive(self, f: Field, flexible: bool) -> bytes:
        kt = f.kafka_type
        bits = _INTS.get(kt)
        if bits is not None:
            return self._int_field(f, bits)
        if kt == "string":
            return self._string_field(f, flexible)
        build = {
            "bool": self._bool,
            "bytes": lambda: self._bytes(f, flexible),
            "records": lambda: self._records(flexible),
            "uuid": self._uuid,
            "timedelta_i32": lambda: wire.i32(self._millis(f)),
            "timedelta_i64": lambda: wire.i64(self._millis(f)),
            "float64": lambda: self.src.raw(8),
        }.get(kt)
        if build is None:
            raise ValueError(f"no generator for {kt}")
        return build()

    def _int_field(self, f: Field, bits: int) -> bytes:
        """An integer of ``bits`` bits; a Produce request's partition index and acks are
        noted (what the broker must answer depends on them)."""
        value = self._int(f, bits)
        if self.api_key == PRODUCE:
            if f.name == "index":
                self._partition = value
            elif f.name == "acks":
                self.acks = value
        return {8: wire.i8, 16: wire.i16, 32: wire.i32, 64: wire.i64}[bits](value)

    def _string_field(self, f: Field, flexible: bool) -> bytes:
        """A string; a Produce request's transactional id and topic name are noted."""
        if self.api_key == PRODUCE and f.name == "transactional_id":
            if self.plain_produce:
                return wire.string(None, flexible)
            self.transactional = True
        data = self._string(f, flexible)
        if self.api_key == PRODUCE and f.name == "name":
            self._topic = self._decode_name(data, flexible)
        return data

    def _bool(self) -> bytes:
        if self._lying("bool"):
            return wire.i8(self.src.integer(2, 255))
        return wire.i8(self.src.integer(0, 1))

    @staticmethod
    def _decode_name(data: bytes, flexible: bool) -> str | None:
        try:
            if flexible:
                n = data[0] - 1
                return data[1 : 1 + n].decode() if 0 <= n < 0x7F else None
            n = int.from_bytes(data[:2], "big", signed=True)
            return data[2 : 2 + n].decode() if n >= 0 else None
        except UnicodeDecodeError:
            return None

    # --- structure ---------------------------------------------------------------------

    def array(self, f: Field, flexible: bool) -> bytes:
        src = self.src
        if f.name == "topic_data" and self.api_key == PRODUCE:
            n = src.pick((1, 1, 1, 2))
        elif src.chance(self.strange):
            n = src.pick((0, src.integer(4, 40), src.integer(100, 1000) if f.struct is None else 3))
        else:
            n = src.pick((0, 1, 1, 1, 2, 3)) if not f.nullable or not src.chance(0.2) else -1
        if n == -1:
            return wire.array_prefix(None, flexible)
        items = []
        elem = _element(f)
        for _ in range(n):
            if f.struct is not None:
                items.append(self.struct(f.struct))
            else:
                items.append(self.primitive(elem, flexible))
        count: int | None = n
        if self._lying("array"):
            roll = src.integer(0, 3)
            if roll == 0:
                count = src.pick((2**31 - 1, 2**30, 1 << 20))  # huge, few elements follow
            elif roll == 1 and not f.nullable:
                count = None  # null where not nullable
            elif roll == 2:
                count = src.integer(-(2**31), -2)
            else:
                count = n + src.integer(1, 3)
        return wire.array_prefix(count, flexible) + b"".join(items)

    def struct(self, s: Struct) -> bytes:
        out = bytearray()
        saved = self._topic, self._partition
        for f in s.fields:
            out += self.array(f, s.flexible) if f.array else self.primitive(f, s.flexible)
        if s.flexible:
            out += self.tags(s)
        self._topic, self._partition = saved
        return bytes(out)

    def tags(self, s: Struct) -> bytes:
        """The tagged-field section: known tags with good values sometimes, unknown tags
        (which Kafka skips) when strange, a lying count or size when lying."""
        src = self.src
        fields: list[tuple[int, bytes]] = []
        for f in s.tagged:
            if src.chance(0.3):
                # never a null known tag: kio reads tagged strings as not nullable (Fetch
                # v12 cluster_id), and clients omit a tag whose value is the null default
                fields.append((f.tag or 0, self.primitive(_element(f), True)))
        if src.chance(self.strange):
            used = {t for t, _ in fields}
            for _ in range(src.integer(1, 3)):
                tag = src.pick((src.integer(0, 50), 2**31 - 1, src.integer(1000, 2**35 - 1)))
                if tag not in used and tag not in {f.tag for f in s.tagged}:
                    used.add(tag)
                    fields.append((tag, src.raw(src.integer(0, 20))))
            fields.sort()
        if self._lying("tags"):
            roll = src.integer(0, 2)
            if roll == 0:
                return wire.tagged_fields(fields, claim_count=len(fields) + src.integer(1, 2**20))
            if roll == 1:
                return (
                    wire.uvarint(1) + wire.uvarint(7) + wire.uvarint(src.integer(100, 2**31)) + b"x"
                )
            return (
                wire.uvarint(2)
                + wire.uvarint(9)
                + wire.uvarint(0)
                + wire.uvarint(3)
                + wire.uvarint(0)
            )
        return wire.tagged_fields(fields)


@functools.cache
def _element(f: Field) -> Field:
    """The element of a primitive array: never null (only the array itself may be)."""
    return dataclasses.replace(f, nullable=False)


def _client_id(src: Source) -> bytes | None:
    return src.pick((b"fuzz", b"", None, b"fuzz-\xc3\xa9"))


def structural(
    src: Source,
    api_key: int,
    version: int,
    *,
    lie: float = 0.0,
    strange: float = 0.05,
    plain_produce: bool = False,
) -> Generated:
    """One request of (api_key, version) generated from its schema."""
    s = schema.message(api_key, version)
    gen = Generator(src, strange=strange, lie=lie)
    gen.api_key, gen.version = api_key, version
    gen.plain_produce = plain_produce
    body = gen.struct(s)
    expect = gen.produce_expect
    if gen.lies or gen.transactional or gen.acks not in (-1, 1):
        expect = {}  # the batch is not all that decides the answer
    header_tags: list[tuple[int, bytes]] = []
    if s.flexible and src.chance(strange):
        header_tags = [(src.integer(0, 40), src.raw(src.integer(0, 8)))]
    header = wire.request_header(
        api_key, version, 0, _client_id(src), flexible=s.flexible, tags=header_tags
    )
    kind = "lying" if gen.lies else "valid"
    return Generated(
        api_key,
        version,
        header + body,
        kind,
        valid=not gen.lies,
        produce_expect=expect,
        batch_kinds=tuple(gen.batch_kinds),
        batch_by_partition=gen.batch_by_partition,
        lies=gen.lies,
    )


def produce_request(src: Source, version: int | None = None) -> Generated:
    """A well-formed Produce request to the fuzz topics whose records are hostile."""
    if version is None:
        version = src.integer(3, 9)
    while True:
        g = structural(src, PRODUCE, version, strange=0.0, plain_produce=True)
        if g.produce_expect or g.batch_kinds:
            g.kind = "produce"
            return g


def header_fuzz(src: Source) -> Generated:
    """Unknown API keys and versions, the wrong header version, lying client ids."""
    from broker.protocol import registry

    roll = src.integer(0, 4)
    versions = schema.all_versions()
    if roll in (2, 3):
        # A header of the other version shifts the body by a byte: that is a byte mutation,
        # which the controller APIs are spared (tests/fuzz/mutations.py says why). Their
        # versions without a broker epoch (LeaderAndIsr v0-v1, UpdateMetadata v0-v4,
        # StopReplica v0) read a shifted zero as a newer controller epoch, legitimately.
        versions = [v for v in versions if v[0] not in CONTROLLER_APIS]
    api_key, version, _name = src.pick(versions)
    flexible = schema.message(api_key, version).flexible
    if roll == 0:  # unknown api key
        api_key = src.pick((src.integer(70, 2**15 - 1), src.integer(-(2**15), -1), 100, 1000))
        version = src.integer(-5, 20)
        body = wire.request_header(api_key, version, 0, b"fuzz", flexible=False) + src.raw(
            src.integer(0, 64)
        )
        return Generated(api_key, version, body, "unknown_api", valid=False)
    if roll == 1:  # a version outside the supported range
        _name, low, high = registry.SUPPORTED_APIS[registry.ApiKey(api_key)]
        version = src.pick((low - 1, high + 1, high + src.integer(2, 50), -1, 2**15 - 1))
        body = wire.request_header(api_key, version, 0, b"fuzz", flexible=False) + src.raw(
            src.integer(0, 64)
        )
        return Generated(api_key, version, body, "unsupported_version", valid=False)
    g = structural(src, api_key, version)
    header_len = 8 + 2 + len(_client_from(g.body)) + (1 if flexible else 0)
    request = g.body[header_len:]
    if roll == 2:  # the other header version
        header = wire.request_header(api_key, version, 0, b"fuzz", flexible=not flexible)
        return Generated(api_key, version, header + request, "wrong_header_version", valid=False)
    if roll == 3:  # client id length lies
        claim = src.pick((-2, -(2**15), 2**15 - 1, 100))
        header = wire.i16(api_key) + wire.i16(version) + wire.i32(0) + wire.i16(claim) + b"fz"
        return Generated(api_key, version, header + request, "client_id_lie", valid=False)
    # a header that stops early
    header = wire.request_header(api_key, version, 0, b"fuzz", flexible=flexible)
    return Generated(
        api_key, version, header[: src.integer(0, len(header) - 1)], "short_header", valid=False
    )


def _client_from(body: bytes) -> bytes:
    n = int.from_bytes(body[8:10], "big", signed=True)
    return body[10 : 10 + n] if n > 0 else b""


def any_request(src: Source) -> Generated:
    """One request of a mode chosen by ``src``: schema-valid with strange values, lying,
    hostile Produce batches or header fuzz (byte mutations come from :mod:`mutations`)."""
    roll = src.integer(0, 99)
    if roll < 20:
        return produce_request(src)
    if roll < 30:
        return header_fuzz(src)
    api_key, version, _name = src.pick(schema.all_versions())
    if roll < 70:
        return structural(src, api_key, version, strange=0.1)
    return structural(src, api_key, version, lie=0.08, strange=0.1)


@st.composite
def requests(
    draw: Callable[[st.SearchStrategy[Any]], Any],
    api_key: int | None = None,
    version: int | None = None,
    lie: float = 0.0,
) -> Generated:
    """Hypothesis strategy: one request (of ``api_key``/``version`` when given)."""
    src = DrawSource(draw)
    if api_key is None:
        return any_request(src)
    if version is None:
        versions = [v for k, v, _n in schema.all_versions() if k == api_key]
        version = src.pick(versions)
    if api_key == PRODUCE and lie == 0.0:
        return produce_request(src, version)
    return structural(src, api_key, version, lie=lie, strange=0.1)
