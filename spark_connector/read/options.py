"""Read options of the ``millrace`` data source, parsed and validated once on the driver.

Option names, defaults and rules follow Spark's built-in Kafka source
(``KafkaSourceProvider`` in spark-sql-kafka-0-10) so that a job moves over by changing the
format name:

* ``kafka.bootstrap.servers`` is required; every other ``kafka.*`` option is passed to the
  Kafka client with the prefix removed (``kafka.isolation.level`` -> ``isolation.level``),
  except the ones the connector must own (``auto.offset.reset``, ``enable.auto.commit``,
  ``key.deserializer``, ``value.deserializer``, ``interceptor.classes``), which are rejected.
* exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regular
  expression that must match the whole topic name; internal ``__`` topics are excluded) or
  ``assign`` (JSON ``{"topicA":[0,1]}``).
* starting position, highest priority first: ``startingTimestamp`` (one epoch-ms for every
  partition), ``startingOffsetsByTimestamp`` (JSON of epoch-ms), ``startingOffsets``
  (``earliest``, ``latest``, JSON with -2 = earliest, -1 = latest, or ``group``: the
  committed offsets of the consumer group ``kafka.group.id``, and for a partition the group
  has none, ``startingOffsetsGroupFallback`` = ``earliest`` (default) or ``latest``; a way to
  start a new checkpoint where an exactly-once pipeline's group is). Batch queries default to
  ``earliest``, streaming queries to ``latest``. ``startingOffsetsByTimestampStrategy`` =
  ``error`` (default: fail when no record has a timestamp >= the target) or ``latest``.
* ending position (batch only), same shapes: ``endingTimestamp``, ``endingOffsetsByTimestamp``,
  ``endingOffsets`` (default ``latest``). A batch may not start at ``latest`` nor end at
  ``earliest`` (nor use -1 / -2 that way in JSON); streaming queries reject every ending option.
* ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay`` (``15m`` default),
  ``minPartitions``, ``maxRecordsPerPartition`` (positive integers), ``failOnDataLoss``
  (default true), ``includeHeaders`` (default false), ``kafkaConsumer.pollTimeoutMs``
  (default 120000), ``kafka.default.api.timeout.ms`` (the Java client's name: how long the
  driver waits for the brokers' metadata and offsets, default 30000; not passed to
  librdkafka).
* ``endingBatch`` (batch only): where a read of a topic the exactly-once sink writes ends:
  ``latest`` (the default when no ending option is given: the newest micro-batch boundary),
  a batch id, or ``none`` (the last stable offset, as for any other topic);
  ``wholeBatches`` (streaming only, default false): advance one whole upstream micro-batch
  per trigger (``docs/exactly-once.md``, "Whole micro-batches for readers").
* ``readAs`` (batch only): ``records`` (default) or ``table``: one row per live key of a
  compacted topic, its latest record (see :func:`spark_connector.read.reader.latest_per_key`);
  with the default positions each task reads its partition as it is when the task runs, so
  a stream-static join sees the table's current values in every micro-batch.
* ``fetcher``: how a reading task fetches records. ``auto`` (default): ``direct`` unless the
  SASL mechanism is one the connector's own client does not speak (GSSAPI, OAUTHBEARER), then
  ``librdkafka``. ``direct``: the task fetches whole record batches from the partition's
  leader and decodes them straight into Arrow columns (:mod:`spark_connector.kafka.fetcher`;
  message format v2; PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL with PLAIN or SCRAM).
  ``librdkafka``: a confluent-kafka consumer per task (every security setting librdkafka has).
* ``localReads`` (default true): a ``direct`` task whose partition's leader is a Millrace
  broker on the task's own machine reads the records from the leader's segment file instead
  of over TCP (:mod:`spark_connector.kafka.local_files`); ``false`` always fetches over TCP.
* security, as Spark's Kafka source takes it: ``kafka.security.protocol``,
  ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``,
  ``kafka.ssl.keystore.*``, ``kafka.ssl.key.password``,
  ``kafka.ssl.endpoint.identification.algorithm``, ``kafka.ssl.enabled.protocols`` (or
  librdkafka's names): checked here, on the driver (the stores opened, the JAAS line parsed;
  a bad one raises naming it), carried to the tasks as the plain strings of
  :attr:`ReadOptions.kafka_params` and turned into TLS and SASL settings there, once per
  process (:mod:`spark_connector.kafka.security`). The driver's librdkafka look-ups get them
  under librdkafka's names (:meth:`ReadOptions.client_config`).

Spark hands options over in a case-insensitive dict; names are matched case-insensitively.
Every error is a ``ValueError`` whose message starts with the offending option's name. An
option no reader or writer of the format knows is ignored, as Spark's connector ignores it,
but logged once per process with the closest known name (:func:`warn_unknown_options`).
:class:`ReadOptions` is a frozen, picklable value: it travels to executors inside the reader.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from spark_connector.kafka.security import (
    librdkafka_settings,
    validate_security,
    wire_unsupported,
)
from spark_connector.read.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    TopicPartition,
    parse_assign_json,
    parse_partition_json,
)

DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_METADATA_TIMEOUT_MS = 30_000
METADATA_TIMEOUT_OPTION = "kafka.default.api.timeout.ms"
_CONNECTOR_KAFKA_PARAMS = frozenset({"default.api.timeout.ms"})
"""``kafka.*`` options the connector reads itself (Java client names librdkafka lacks)."""

_FORBIDDEN_KAFKA_PARAMS = {
    "auto.offset.reset": "use 'startingOffsets' to choose where to start",
    "enable.auto.commit": "the connector tracks offsets itself and never commits them",
    "key.deserializer": "keys are always returned as binary; cast them in the DataFrame",
    "value.deserializer": "values are always returned as binary; cast them in the DataFrame",
    "interceptor.classes": "consumer interceptors are not supported",
}


class OffsetKind(Enum):
    """How a starting or ending position is given."""

    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSETS = "offsets"  # per-partition offsets (may hold -2 / -1)
    TIMESTAMP = "timestamp"  # one epoch-ms timestamp for every partition
    TIMESTAMPS = "timestamps"  # per-partition epoch-ms timestamps
    GROUP = "group"  # the committed offsets of kafka.group.id


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A starting or ending position as the user gave it, not yet resolved against a cluster.

    ``option`` is the name of the option it came from (for error messages)."""

    kind: OffsetKind
    option: str
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Validated read options. Frozen and picklable; holds no client or Spark object."""

    bootstrap_servers: str
    kafka_params: dict[str, str]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec | None
    streaming: bool
    starting_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    group_id_prefix: str = "spark-millrace-source"
    read_as_table: bool = False
    fetcher: str = "auto"
    local_reads: bool = True
    """Short-circuit reads from a Millrace leader on this machine (``localReads``)."""
    group_fallback: OffsetKind = OffsetKind.EARLIEST
    metadata_timeout_ms: int = DEFAULT_METADATA_TIMEOUT_MS
    ending_batch: int | str | None = None
    """A batch read's micro-batch boundary (``endingBatch``): ``"latest"``, a batch id, or
    None (no boundary: ``endingOffsets`` or ``endingBatch=none``)."""
    whole_batches: bool = False
    """A streaming read advances one whole upstream micro-batch at a time (``wholeBatches``)."""
    at_boundary: bool = False
    """Set by the planner for the tasks of a read that ends at a micro-batch boundary: read
    read_committed, up to the planned end (not the live end of ``readAs=table``), waiting for
    the last stable offset to reach it (an open transaction below it is aborted shortly)."""

    @property
    def group_id(self) -> str | None:
        """``kafka.group.id``, when given."""
        value = self.kafka_params.get("group.id")
        return value.strip() if value is not None and value.strip() else None

    def uses_direct_fetch(self) -> bool:
        """Whether tasks fetch record batches themselves (option ``fetcher``)."""
        if self.fetcher != "auto":
            return self.fetcher == "direct"
        return wire_unsupported(self.kafka_params) is None

    def client_config(self, **extra: object) -> dict[str, object]:
        """A confluent-kafka config: the ``kafka.*`` pass-through (security settings under
        librdkafka's names) plus ``extra``.

        ``group.id`` is required by librdkafka's Consumer even though no group is joined
        (partitions are always ``assign()``-ed and offsets never committed)."""
        # Spark's (Java client's) default isolation level; librdkafka's is read_committed.
        conf: dict[str, object] = {
            "group.id": self.group_id_prefix,
            "isolation.level": "read_uncommitted",
        }
        conf.update(
            {
                k: v
                for k, v in librdkafka_settings(self.kafka_params).items()
                if k not in _CONNECTOR_KAFKA_PARAMS
            }
        )
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf["enable.auto.commit"] = False
        conf.update(extra)
        return conf


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Options with lower-cased names (Spark's option names are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _positive_int(opts: dict[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"option '{name}' must be a positive integer, got {raw!r}")
    return value


def bool_option(opts: dict[str, str], name: str, default: bool) -> bool:
    """``true`` / ``false`` (any case) from lower-cased ``opts``; ``ValueError`` otherwise."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ValueError(f"option '{name}' must be 'true' or 'false', got {raw!r}")


_DURATION_UNITS_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def parse_duration_ms(raw: str, option: str) -> int:
    """Spark's time strings (``JavaUtils.timeStringAsMs``): ``100``, ``100ms``, ``10s``,
    ``15m``, ``1h``, ``1d``. A bare number is milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if m is None or m.group(2) not in ("", *_DURATION_UNITS_MS):
        raise ValueError(
            f"option '{option}' must be a duration such as '30s', '15m' or '500ms', got {raw!r}"
        )
    unit = _DURATION_UNITS_MS.get(m.group(2), 1)
    return int(int(m.group(1)) * unit)


def _timestamp(raw: str, option: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(
            f"option '{option}' must be an epoch timestamp in milliseconds, got {raw!r}"
        ) from None
    if value < 0:
        raise ValueError(f"option '{option}' must not be negative, got {raw!r}")
    return value


def _offset_spec(
    opts: dict[str, str], prefix: str, default: OffsetKind | None
) -> OffsetSpec | None:
    """``prefix`` is ``starting`` or ``ending``; Spark's priority: global timestamp, then
    per-partition timestamps, then offsets."""
    ts_name = f"{prefix}Timestamp"
    by_ts_name = f"{prefix}OffsetsByTimestamp"
    off_name = f"{prefix}Offsets"
    if ts_name.lower() in opts:
        return OffsetSpec(
            OffsetKind.TIMESTAMP, ts_name, timestamp=_timestamp(opts[ts_name.lower()], ts_name)
        )
    if by_ts_name.lower() in opts:
        return _timestamps_spec(opts[by_ts_name.lower()], by_ts_name)
    raw = opts.get(off_name.lower())
    if raw is None:
        return None if default is None else OffsetSpec(default, off_name)
    return _offsets_spec(raw, off_name, starting=prefix == "starting")


def _timestamps_spec(raw: str, option: str) -> OffsetSpec:
    """``*OffsetsByTimestamp``: JSON of per-partition epoch-ms timestamps."""
    stamps = parse_partition_json(raw, option)
    if not stamps:
        raise ValueError(f"option '{option}' must name at least one partition")
    for tp, ts in stamps.items():
        if ts < 0:
            raise ValueError(
                f"option '{option}': timestamp for {tp.topic}[{tp.partition}] must not "
                f"be negative, got {ts}"
            )
    return OffsetSpec(OffsetKind.TIMESTAMPS, option, offsets=stamps)


_OFFSET_KEYWORDS = {
    "earliest": OffsetKind.EARLIEST,
    "latest": OffsetKind.LATEST,
    "group": OffsetKind.GROUP,  # starting positions only
}


def _offsets_spec(raw: str, option: str, *, starting: bool) -> OffsetSpec:
    """``*Offsets``: a keyword (``group`` only for a starting position) or per-partition
    JSON offsets (-2 = earliest, -1 = latest)."""
    text = raw.strip()
    kind = _OFFSET_KEYWORDS.get(text.lower())
    if kind is not None and (starting or kind is not OffsetKind.GROUP):
        return OffsetSpec(kind, option)
    if not text.startswith("{"):
        choices = "'earliest', 'latest', 'group'" if starting else "'earliest', 'latest'"
        raise ValueError(
            f"option '{option}' must be {choices} or JSON like "
            f'{{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}'
        )
    offsets = parse_partition_json(text, option)
    if not offsets:
        raise ValueError(f"option '{option}' must name at least one partition")
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise ValueError(
                f"option '{option}': offset for {tp.topic}[{tp.partition}] must be >= 0, "
                f"-1 (latest) or -2 (earliest), got {off}"
            )
    return OffsetSpec(OffsetKind.OFFSETS, option, offsets=offsets)


def _subscription(
    opts: dict[str, str],
) -> tuple[tuple[str, ...] | None, str | None, tuple[TopicPartition, ...] | None]:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in opts]
    if len(given) != 1:
        raise ValueError(
            "option 'subscribe', 'subscribePattern' or 'assign': exactly one must be set, "
            f"got {given or 'none'}"
        )
    name = given[0]
    raw = opts[name.lower()]
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise ValueError(f"option 'subscribe' must list at least one topic, got {raw!r}")
        return topics, None, None
    if name == "subscribePattern":
        if not raw.strip():
            raise ValueError("option 'subscribePattern' must not be empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise ValueError(
                f"option 'subscribePattern' is not a valid regular expression: {exc}"
            ) from None
        return None, raw, None
    return None, None, tuple(parse_assign_json(raw, "assign"))


def _kafka_params(opts: dict[str, str]) -> tuple[str, dict[str, str]]:
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise ValueError(
            "option 'kafka.bootstrap.servers' is required (e.g. 'host1:9092,host2:9092')"
        )
    params: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka.") :]
        if name in _FORBIDDEN_KAFKA_PARAMS:
            raise ValueError(
                f"option 'kafka.{name}' is not supported: {_FORBIDDEN_KAFKA_PARAMS[name]}"
            )
        params[name] = value
    return bootstrap, params


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate ``options`` for a batch (``streaming=False``) or streaming read.

    Raises ``ValueError`` naming the first bad, missing or contradictory option."""
    opts = lower_keys(options)
    bootstrap, params = _kafka_params(opts)
    subscribe, pattern, assign = _subscription(opts)
    starting, ending = _positions(opts, streaming=streaming)
    if assign is not None:
        _check_assigned(assign, (starting, ending))
    fallback = _group_fallback(opts, params, starting)
    metadata_timeout = _metadata_timeout(opts)
    strategy = _timestamp_strategy(opts)
    max_per_trigger, min_per_trigger = _trigger_limits(opts)
    max_delay = _max_trigger_delay(opts)
    poll_timeout = _positive_int(opts, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS
    prefix = opts.get("groupidprefix", "spark-millrace-source").strip()
    if not prefix:
        raise ValueError("option 'groupIdPrefix' must not be empty")
    read_as_table = _read_as_table(opts, streaming=streaming)
    fetcher = _fetcher(opts, params)
    ending_batch, whole_batches = _batch_boundaries(opts, params, streaming=streaming)
    if whole_batches:
        _check_whole_batches(opts)

    return ReadOptions(
        bootstrap_servers=bootstrap,
        kafka_params=params,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        streaming=streaming,
        starting_timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=max_delay,
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=bool_option(opts, "failOnDataLoss", True),
        include_headers=bool_option(opts, "includeHeaders", False),
        poll_timeout_ms=poll_timeout,
        group_id_prefix=prefix,
        read_as_table=read_as_table,
        fetcher=fetcher,
        local_reads=bool_option(opts, "localReads", True),
        group_fallback=fallback,
        metadata_timeout_ms=metadata_timeout,
        ending_batch=ending_batch,
        whole_batches=whole_batches,
    )


def _positions(opts: dict[str, str], *, streaming: bool) -> tuple[OffsetSpec, OffsetSpec | None]:
    """The starting and (batch reads only) ending positions, with their defaults; a
    streaming query rejects every ending option."""
    if streaming:
        for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if name.lower() in opts:
                raise ValueError(f"option '{name}' is not valid in streaming queries")
        if "endingbatch" in opts:
            raise ValueError(
                "option 'endingBatch' is not valid in streaming queries (option "
                "'wholeBatches=true' makes a stream advance one whole upstream batch at a time)"
            )
        starting = _offset_spec(opts, "starting", OffsetKind.LATEST)
        assert starting is not None
        return starting, None
    starting = _offset_spec(opts, "starting", OffsetKind.EARLIEST)
    ending = _offset_spec(opts, "ending", OffsetKind.LATEST)
    assert starting is not None
    assert ending is not None
    _check_batch_positions(starting, ending)
    return starting, ending


def _check_batch_positions(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """A batch may not start at latest nor end at earliest (nor use -1 / -2 that way)."""
    if starting.kind is OffsetKind.LATEST:
        raise ValueError("option 'startingOffsets': 'latest' is not allowed for batch queries")
    if starting.kind is OffsetKind.OFFSETS:
        for tp, off in starting.offsets.items():
            if off == LATEST:
                raise ValueError(
                    f"option 'startingOffsets': {tp.topic}[{tp.partition}] can't be latest "
                    "(-1) for batch queries"
                )
    if ending.kind is OffsetKind.EARLIEST:
        raise ValueError("option 'endingOffsets': 'earliest' is not allowed for batch queries")
    if ending.kind is OffsetKind.OFFSETS:
        for tp, off in ending.offsets.items():
            if off == EARLIEST:
                raise ValueError(
                    f"option 'endingOffsets': {tp.topic}[{tp.partition}] can't be earliest "
                    "(-2) for batch queries"
                )


def _check_assigned(
    assign: tuple[TopicPartition, ...], specs: tuple[OffsetSpec | None, ...]
) -> None:
    """Per-partition positions of an ``assign`` read name only assigned partitions."""
    assigned = set(assign)
    for spec in specs:
        if spec is not None and spec.kind in (OffsetKind.OFFSETS, OffsetKind.TIMESTAMPS):
            extra = sorted(set(spec.offsets) - assigned)
            if extra:
                raise ValueError(
                    f"option '{spec.option}' names partitions that are not assigned: "
                    f"{[f'{tp.topic}[{tp.partition}]' for tp in extra]}"
                )


def _group_fallback(
    opts: dict[str, str], params: Mapping[str, str], starting: OffsetSpec
) -> OffsetKind:
    """``startingOffsetsGroupFallback`` (only with ``startingOffsets=group``, which needs
    ``kafka.group.id``)."""
    fallback_raw = opts.get("startingoffsetsgroupfallback")
    fallback = OffsetKind.EARLIEST
    if fallback_raw is not None:
        if starting.kind is not OffsetKind.GROUP:
            raise ValueError("option 'startingOffsetsGroupFallback' needs startingOffsets=group")
        value = fallback_raw.strip().lower()
        if value not in ("earliest", "latest"):
            raise ValueError(
                "option 'startingOffsetsGroupFallback' must be 'earliest' (the default) or "
                f"'latest', got {fallback_raw!r}"
            )
        fallback = OffsetKind(value)
    if starting.kind is OffsetKind.GROUP and not (params.get("group.id") or "").strip():
        raise ValueError(
            "option 'startingOffsets': 'group' starts from the committed offsets of the "
            "consumer group named by option 'kafka.group.id', which is not set"
        )
    return fallback


def _metadata_timeout(opts: dict[str, str]) -> int:
    """``kafka.default.api.timeout.ms``: the driver's wait for metadata and offsets."""
    if opts.get(METADATA_TIMEOUT_OPTION) is None:
        return DEFAULT_METADATA_TIMEOUT_MS
    return _positive_int(opts, METADATA_TIMEOUT_OPTION) or DEFAULT_METADATA_TIMEOUT_MS


def _timestamp_strategy(opts: dict[str, str]) -> str:
    """``startingOffsetsByTimestampStrategy``: ``error`` (the default) or ``latest``."""
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}"
        )
    return strategy


def _trigger_limits(opts: dict[str, str]) -> tuple[int | None, int | None]:
    """``maxOffsetsPerTrigger`` and ``minOffsetsPerTrigger`` (min not above max)."""
    max_per_trigger = _positive_int(opts, "maxOffsetsPerTrigger")
    min_per_trigger = _positive_int(opts, "minOffsetsPerTrigger")
    if (
        max_per_trigger is not None
        and min_per_trigger is not None
        and min_per_trigger > max_per_trigger
    ):
        raise ValueError(
            f"option 'minOffsetsPerTrigger' ({min_per_trigger}) must not exceed "
            f"'maxOffsetsPerTrigger' ({max_per_trigger})"
        )
    return max_per_trigger, min_per_trigger


def _max_trigger_delay(opts: dict[str, str]) -> int:
    """``maxTriggerDelay`` in milliseconds (``15m`` by default)."""
    delay_raw = opts.get("maxtriggerdelay")
    if delay_raw is None:
        return DEFAULT_MAX_TRIGGER_DELAY_MS
    return parse_duration_ms(delay_raw, "maxTriggerDelay")


def _read_as_table(opts: dict[str, str], *, streaming: bool) -> bool:
    """``readAs``: ``records`` (the default) or ``table`` (batch reads, one task per
    partition)."""
    read_as = opts.get("readas", "records").strip().lower()
    if read_as not in ("records", "table"):
        raise ValueError(
            f"option 'readAs' must be 'records' (every record, the default) or 'table' (the "
            f"latest record of every live key of a compacted topic), got {opts['readas']!r}"
        )
    if read_as != "table":
        return False
    if streaming:
        raise ValueError(
            "option 'readAs': 'table' is a batch read (spark.read); in a stream-static join "
            "Spark reads it again for every micro-batch"
        )
    for name in ("minPartitions", "maxRecordsPerPartition"):
        if name.lower() in opts:
            raise ValueError(
                f"option '{name}' cannot be used with readAs=table: a key's records must "
                "be read by one task, so each partition is one task"
            )
    return True


def _fetcher(opts: dict[str, str], params: dict[str, str]) -> str:
    """``fetcher`` (``auto``, ``direct`` or ``librdkafka``), after checking the security
    options: ``direct`` must be able to connect with them."""
    fetcher = opts.get("fetcher", "auto").strip().lower()
    if fetcher not in ("auto", "direct", "librdkafka"):
        raise ValueError(
            "option 'fetcher' must be 'auto' (the default), 'direct' (tasks fetch record "
            "batches and decode them into Arrow) or 'librdkafka' (a consumer per task), got "
            f"{opts['fetcher']!r}"
        )
    validate_security(params)
    unsupported = wire_unsupported(params)
    if fetcher == "direct" and unsupported is not None:
        raise ValueError(
            f"option 'fetcher': 'direct' cannot connect: {unsupported}; use 'auto' or 'librdkafka'"
        )
    return fetcher


def _check_whole_batches(opts: dict[str, str]) -> None:
    """``wholeBatches=true`` sizes each micro-batch itself: no per-trigger limits."""
    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger"):
        if name.lower() in opts:
            raise ValueError(
                f"option '{name}' cannot be used with wholeBatches=true: each micro-batch "
                "is one whole upstream batch"
            )


def _batch_boundaries(
    opts: dict[str, str], params: Mapping[str, str], *, streaming: bool
) -> tuple[int | str | None, bool]:
    """``endingBatch`` (batch reads) and ``wholeBatches`` (streams): whether a read of a topic
    the exactly-once sink writes stops at a micro-batch boundary (``docs/exactly-once.md``).
    Reads at a boundary are read_committed, so an explicit
    ``kafka.isolation.level=read_uncommitted`` turns the default off and cannot be combined
    with an explicit boundary."""
    uncommitted = params.get("isolation.level", "").strip().lower() == "read_uncommitted"
    whole_raw = opts.get("wholebatches")
    if streaming:
        whole = bool_option(opts, "wholeBatches", False)
        if whole and uncommitted:
            raise ValueError(
                "option 'wholeBatches' reads whole committed micro-batches and cannot be used "
                "with kafka.isolation.level=read_uncommitted"
            )
        return None, whole
    if whole_raw is not None:
        raise ValueError(
            "option 'wholeBatches' is for streaming reads; a batch read ends at the latest "
            "micro-batch boundary by default (option 'endingBatch')"
        )
    raw = opts.get("endingbatch")
    explicit_end = any(
        n in opts for n in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp")
    )
    if raw is None:
        return (None if explicit_end or uncommitted else "latest"), False
    text = raw.strip().lower()
    if explicit_end:
        given = [
            n
            for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
            if n.lower() in opts
        ]
        raise ValueError(
            f"option 'endingBatch' cannot be combined with '{given[0]}': give one ending position"
        )
    if text == "none":
        return None, False
    if uncommitted:
        raise ValueError(
            "option 'endingBatch' reads whole committed micro-batches and cannot be used with "
            "kafka.isolation.level=read_uncommitted"
        )
    if text == "latest":
        return "latest", False
    try:
        batch = int(text)
    except ValueError:
        batch = -1
    if batch < 0:
        raise ValueError(
            "option 'endingBatch' must be 'latest' (the default: the newest committed "
            "micro-batch of a topic the exactly-once sink writes), a batch id (>= 0) or "
            f"'none' (up to the last stable offset), got {raw!r}"
        )
    return batch, False


def validate_common(options: Mapping[str, str]) -> None:
    """The checks that do not depend on batch vs streaming (run from ``schema()`` at
    ``load()`` time, before Spark says which kind of read it is)."""
    opts = lower_keys(options)
    # Ending options are legal for batch; check them as batch, everything else as streaming
    # would (streaming accepts a superset of starting positions).
    if any(k.startswith("ending") for k in opts) or opts.get("readas", "").lower() == "table":
        parse_read_options(options, streaming=False)
    else:
        parse_read_options(options, streaming=True)
