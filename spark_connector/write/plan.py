"""What a ``format("millrace")`` write is told to do: the sink's options and the incoming
schema checked and turned into a :class:`WritePlan` (which columns hold value, key, topic,
partition and headers), and the librdkafka configuration of each task's producer.

Runs on the driver when Spark creates the writer; a bad option or column type raises
:class:`WriteOptionError` naming it (the security options, ``kafka.security.protocol``,
``kafka.sasl.*`` and ``kafka.ssl.*``, too: :mod:`spark_connector.kafka.security`). The plan
holds plain values (the options as strings, never an SSL context), so it pickles to the
tasks. Concurrency: pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from spark_connector.kafka.security import (
    SecurityOptionError,
    is_security_param,
    librdkafka_settings,
    validate_security,
    wire_unsupported,
)

__all__ = [
    "BatchSettings",
    "WriteOptionError",
    "WritePlan",
    "batch_settings",
    "plan_write",
    "producer_config",
]

BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
TOPIC_OPTION = "topic"
KAFKA_PREFIX = "kafka."
PRODUCER_OPTION = "producer"
PRODUCERS = ("auto", "batch", "librdkafka")

# Java serializer options make no sense here (Spark's Kafka sink rejects them too): the
# key and value columns are already bytes or strings.
_UNSUPPORTED_OPTIONS = {
    "kafka.key.serializer": "the key column is written as is (string or binary)",
    "kafka.value.serializer": "the value column is written as is (string or binary)",
}


class WriteOptionError(ValueError):
    """A bad option or a bad column type: raised on the driver when Spark creates the
    writer, or in a task when a row carries an unusable value. The message names the
    option or column."""


@dataclass(frozen=True, slots=True)
class WritePlan:
    """What the schema and options say about every row; plain values, so picklable.

    ``*_index`` are column positions in the incoming Arrow batches (``None``: no column).
    """

    bootstrap_servers: str
    topic: str | None
    value_index: int
    key_index: int | None
    topic_index: int | None
    partition_index: int | None
    headers_index: int | None
    producer_options: dict[str, str]
    producer: str = "auto"


def _type_name(dt: DataType) -> str:
    return dt.simpleString()


def _is_string_or_binary(dt: DataType) -> bool:
    return isinstance(dt, StringType | BinaryType)


def _is_headers_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = dt.elementType.fields
    return (
        len(fields) == 2
        and fields[0].name == "key"
        and isinstance(fields[0].dataType, StringType)
        and fields[1].name == "value"
        and isinstance(fields[1].dataType, BinaryType)
    )


_COLUMN_TYPES: dict[str, tuple[Callable[[DataType], bool], str]] = {
    "value": (
        _is_string_or_binary,
        "string or binary (cast it, e.g. CAST(value AS STRING) or to_json(...))",
    ),
    "key": (_is_string_or_binary, "string or binary"),
    "topic": (lambda dt: isinstance(dt, StringType), "string"),
    "partition": (lambda dt: isinstance(dt, IntegerType), "int"),
    "headers": (_is_headers_type, "array<struct<key:string,value:binary>>"),
}
"""The sink's columns, in the order they are checked: what type fits and its name."""


def plan_write(options: Mapping[str, str], schema: StructType) -> WritePlan:
    """Validate ``options`` and ``schema`` and locate the sink's columns.

    Runs on the driver (from the writer constructors). Raises :class:`WriteOptionError`
    naming the option or column. Column names match case-insensitively, like Spark's
    default resolution.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    bootstrap = opts.get(BOOTSTRAP_OPTION, "").strip()
    if not bootstrap:
        raise WriteOptionError(
            f"option '{BOOTSTRAP_OPTION}' is required: the Kafka/Millrace brokers to write to "
            "(host:port[,host:port...])"
        )
    for name, why in _UNSUPPORTED_OPTIONS.items():
        if name in opts:
            raise WriteOptionError(f"option '{name}' is not supported: {why}")
    producer = opts.get(PRODUCER_OPTION, "auto").strip().lower()
    if producer not in PRODUCERS:
        raise WriteOptionError(
            f"option '{PRODUCER_OPTION}' is {opts[PRODUCER_OPTION]!r}; it must be one of "
            f"{', '.join(PRODUCERS)}"
        )
    topic_option = opts.get(TOPIC_OPTION)
    if topic_option is not None and not topic_option.strip():
        raise WriteOptionError(f"option '{TOPIC_OPTION}' must not be empty")
    index = _sink_columns(schema)
    if topic_option is None and "topic" not in index:
        raise WriteOptionError(
            f"no topic to write to: set option '{TOPIC_OPTION}' or provide a string column 'topic'"
        )
    return WritePlan(
        bootstrap_servers=bootstrap,
        topic=topic_option.strip() if topic_option is not None else None,
        value_index=index["value"],
        key_index=index.get("key"),
        topic_index=index.get("topic"),
        partition_index=index.get("partition"),
        headers_index=index.get("headers"),
        producer_options=_producer_options(opts),
        producer=producer,
    )


def _sink_columns(schema: StructType) -> dict[str, int]:
    """The positions of the sink's columns in ``schema`` (the first of a name, matched
    case-insensitively), each checked to have a type the sink writes; ``value`` is
    required."""
    index: dict[str, int] = {}
    types: dict[str, DataType] = {}
    for i, f in enumerate(schema.fields):
        name = f.name.lower()
        if name in _COLUMN_TYPES and name not in index:
            index[name] = i
            types[name] = f.dataType
    if "value" not in index:
        raise WriteOptionError(
            "required column 'value' not found (columns: "
            f"{', '.join(schema.fieldNames()) or 'none'}); the sink writes columns value "
            "(string or binary), and optionally key, headers, topic, partition"
        )
    for name, (fits, expected) in _COLUMN_TYPES.items():
        if name in index and not fits(types[name]):
            raise WriteOptionError(
                f"column '{name}' has type {_type_name(types[name])}; it must be {expected}"
            )
    return index


def _producer_options(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix (but the bootstrap servers), the
    security options among them checked."""
    producer_options = {
        k[len(KAFKA_PREFIX) :]: v
        for k, v in opts.items()
        if k.startswith(KAFKA_PREFIX) and k != BOOTSTRAP_OPTION
    }
    try:
        validate_security(producer_options)
    except SecurityOptionError as exc:
        raise WriteOptionError(str(exc)) from None
    return producer_options


def producer_config(plan: WritePlan) -> dict[str, Any]:
    """The librdkafka configuration for one task's producer (security settings under
    librdkafka's names: :func:`~spark_connector.kafka.security.librdkafka_settings`).

    Defaults (each overridable with a ``kafka.`` option): ``acks=all``,
    ``enable.idempotence=true`` (turned off when ``kafka.acks`` is set to something other
    than ``all``/``-1``, since librdkafka requires ``acks=all`` for idempotence), and the
    Java-compatible ``partitioner=murmur2_random``.
    """
    user = librdkafka_settings(plan.producer_options)
    conf: dict[str, Any] = {
        "bootstrap.servers": plan.bootstrap_servers,
        "client.id": "millrace-spark-writer",
        "acks": "all",
        "partitioner": "murmur2_random",
    }
    acks = user.get("acks", user.get("request.required.acks"))
    weak_acks = acks is not None and acks.strip().lower() not in ("all", "-1")
    if "enable.idempotence" not in user:
        conf["enable.idempotence"] = not weak_acks
    conf.update(user)
    return conf


# --- the batch producer's settings --------------------------------------------------------------

# librdkafka's batching knobs: the batch producer sends each Arrow batch's rows of a partition
# as whole record batches of up to batch.size bytes, so these have nothing left to tune.
_BATCHING_ONLY = frozenset(
    {
        "linger.ms",
        "queue.buffering.max.ms",
        "batch.num.messages",
        "queue.buffering.max.messages",
        "partitioner",
    }
)
_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_MAX_IN_FLIGHT = 5  # Kafka's limit with idempotence (spark_connector.kafka.producer)


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """How a task's :class:`~spark_connector.kafka.producer.BatchProducer` is set up, from
    the ``kafka.*`` options (librdkafka's names and defaults). Picklable."""

    acks: int = -1
    idempotent: bool = True
    codec: int = 0
    batch_bytes: int = 1_000_000
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 300_000
    retry_backoff_ms: int = 100
    buffer_bytes: int = 32 << 20
    client_id: str = "millrace-spark-writer"
    max_in_flight: int | None = None
    """Produce requests in flight per broker connection (None: 5 with idempotence, 1
    without); at most 5 (Kafka's limit with idempotence)."""


def _int_option(name: str, raw: str, low: int, high: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise WriteOptionError(f"option 'kafka.{name}' is {raw!r}; it must be an integer") from None
    if not low <= value <= high:
        raise WriteOptionError(f"option 'kafka.{name}' is {value}; it must be {low}..{high}")
    return value


def _bool_option(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise WriteOptionError(f"option 'kafka.{name}' is {raw!r}; it must be true or false")


def batch_settings(plan: WritePlan) -> BatchSettings | str:
    """The batch producer's settings for ``plan``, or why it cannot write it (the reason
    is a sentence; such writes go through librdkafka's per-row producer).

    The batch producer writes every row (a ``topic`` option or column, any ``key``,
    ``partition`` and ``headers`` columns) of a write with the ``kafka.*`` options ``acks``
    (all or 1), ``enable.idempotence``, ``compression.type`` (none, gzip, snappy, lz4, zstd),
    ``batch.size``, ``request.timeout.ms``, ``delivery.timeout.ms`` (or
    ``message.timeout.ms``), ``retry.backoff.ms``, ``queue.buffering.max.kbytes`` (the bytes
    of batches a task may have unacknowledged), ``max.in.flight.requests.per.connection``
    (or ``max.in.flight``: 1..5 with idempotence, the default 5; without idempotence the
    default is 1, which keeps a retried partition in order, and more than 5 counts as 5),
    ``client.id``, the security options (TLS,
    SASL PLAIN and SCRAM: :mod:`spark_connector.kafka.security`) and librdkafka's batching
    options (which it has no use for: ``linger.ms``, ``batch.num.messages``, ...). Raises
    :class:`WriteOptionError` for a malformed value.
    """
    if plan.producer == "librdkafka":
        return f"option '{PRODUCER_OPTION}' is librdkafka"
    opts = dict(plan.producer_options)
    acks_raw = opts.pop("acks", opts.pop("request.required.acks", "all")).strip().lower()
    acks = _ACKS.get(acks_raw)
    if acks is None:
        return f"option 'kafka.acks' is {acks_raw} (the batch producer waits for acks)"
    idempotent = acks == -1
    if "enable.idempotence" in opts:
        idempotent = _bool_option("enable.idempotence", opts.pop("enable.idempotence"))
        if idempotent and acks != -1:
            raise WriteOptionError(
                "option 'kafka.enable.idempotence' is true, which needs 'kafka.acks' all"
            )
    codec_raw = opts.pop("compression.type", opts.pop("compression.codec", "none"))
    codec = _CODECS.get(codec_raw.strip().lower())
    if codec is None:
        return f"option 'kafka.compression.type' is {codec_raw}"
    changes = _setting_changes(plan, opts)
    if isinstance(changes, str):
        return changes
    settings = BatchSettings(acks=acks, idempotent=idempotent, codec=codec)
    return replace(settings, **_settled(changes, idempotent))  # type: ignore[arg-type]


_ACKS = {"all": -1, "-1": -1, "1": 1}
"""``kafka.acks`` values the batch producer takes (it always waits for acks)."""

_INT_SETTINGS = {
    "batch.size": ("batch_bytes", 1, 2**31 - 1),
    "request.timeout.ms": ("request_timeout_ms", 1, 900_000),
    "delivery.timeout.ms": ("delivery_timeout_ms", 0, 2**31 - 1),
    "message.timeout.ms": ("delivery_timeout_ms", 0, 2**31 - 1),
    "retry.backoff.ms": ("retry_backoff_ms", 1, 300_000),
    "queue.buffering.max.kbytes": ("buffer_bytes", 1, 2**31 - 1),
    "max.in.flight.requests.per.connection": ("max_in_flight", 1, 1_000_000),
    "max.in.flight": ("max_in_flight", 1, 1_000_000),
}
"""Integer ``kafka.*`` options: the :class:`BatchSettings` field each sets and its range."""


def _setting_changes(plan: WritePlan, opts: Mapping[str, str]) -> dict[str, object] | str:
    """The :class:`BatchSettings` fields the remaining ``kafka.*`` options set (as given),
    or why the batch producer cannot write with them."""
    changes: dict[str, object] = {}
    for name, raw in opts.items():
        if name in _INT_SETTINGS:
            attr, low, high = _INT_SETTINGS[name]
            changes[attr] = _int_option(name, raw, low, high)
        elif name == "client.id":
            changes["client_id"] = raw
        elif name == "transaction.timeout.ms":
            continue  # the exactly-once sink's (spark_connector.exactly_once.settings)
        elif is_security_param(name):
            reason = wire_unsupported(plan.producer_options)
            if reason is not None:
                return reason
        elif name not in _BATCHING_ONLY:
            return f"option 'kafka.{name}' is a librdkafka setting the batch producer lacks"
    return changes


def _settled(changes: dict[str, object], idempotent: bool) -> dict[str, object]:
    """``changes`` in the batch producer's units and limits: KiB to bytes, in-flight
    requests at most 5 (an error with idempotence), a 0 delivery timeout infinite."""
    if "buffer_bytes" in changes:
        changes["buffer_bytes"] = int(changes["buffer_bytes"]) * 1024  # type: ignore[call-overload]
    in_flight = changes.get("max_in_flight")
    if isinstance(in_flight, int) and in_flight > _MAX_IN_FLIGHT:
        if idempotent:
            raise WriteOptionError(
                f"option 'kafka.max.in.flight.requests.per.connection' is {in_flight}; with "
                f"idempotence it must be 1..{_MAX_IN_FLIGHT} (Kafka's limit)"
            )
        changes["max_in_flight"] = _MAX_IN_FLIGHT  # the batch producer's most
    if changes.get("delivery_timeout_ms") == 0:
        changes["delivery_timeout_ms"] = 2**31 - 1  # librdkafka: 0 is infinite
    return changes
