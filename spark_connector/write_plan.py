"""What a ``format("millrace")`` write is told to do: the sink's options and the incoming
schema checked and turned into a :class:`WritePlan` (which columns hold value, key, topic,
partition and headers), and the librdkafka configuration of each task's producer.

Runs on the driver when Spark creates the writer; a bad option or column type raises
:class:`WriteOptionError` naming it. The plan holds plain values, so it pickles to the
tasks. Concurrency: pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

__all__ = ["WriteOptionError", "WritePlan", "plan_write", "producer_config"]

BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
TOPIC_OPTION = "topic"
KAFKA_PREFIX = "kafka."

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
    topic_option = opts.get(TOPIC_OPTION)
    if topic_option is not None and not topic_option.strip():
        raise WriteOptionError(f"option '{TOPIC_OPTION}' must not be empty")

    index: dict[str, int] = {}
    types: dict[str, DataType] = {}
    for i, f in enumerate(schema.fields):
        name = f.name.lower()
        if name in ("value", "key", "topic", "partition", "headers") and name not in index:
            index[name] = i
            types[name] = f.dataType

    if "value" not in index:
        raise WriteOptionError(
            "required column 'value' not found (columns: "
            f"{', '.join(schema.fieldNames()) or 'none'}); the sink writes columns value "
            "(string or binary), and optionally key, headers, topic, partition"
        )
    if not _is_string_or_binary(types["value"]):
        raise WriteOptionError(
            f"column 'value' has type {_type_name(types['value'])}; it must be string or "
            "binary (cast it, e.g. CAST(value AS STRING) or to_json(...))"
        )
    if "key" in index and not _is_string_or_binary(types["key"]):
        raise WriteOptionError(
            f"column 'key' has type {_type_name(types['key'])}; it must be string or binary"
        )
    if "topic" in index and not isinstance(types["topic"], StringType):
        raise WriteOptionError(
            f"column 'topic' has type {_type_name(types['topic'])}; it must be string"
        )
    if "partition" in index and not isinstance(types["partition"], IntegerType):
        raise WriteOptionError(
            f"column 'partition' has type {_type_name(types['partition'])}; it must be int"
        )
    if "headers" in index and not _is_headers_type(types["headers"]):
        raise WriteOptionError(
            f"column 'headers' has type {_type_name(types['headers'])}; it must be "
            "array<struct<key:string,value:binary>>"
        )
    if topic_option is None and "topic" not in index:
        raise WriteOptionError(
            f"no topic to write to: set option '{TOPIC_OPTION}' or provide a string column 'topic'"
        )

    producer_options = {
        k[len(KAFKA_PREFIX) :]: v
        for k, v in opts.items()
        if k.startswith(KAFKA_PREFIX) and k != BOOTSTRAP_OPTION
    }
    return WritePlan(
        bootstrap_servers=bootstrap,
        topic=topic_option.strip() if topic_option is not None else None,
        value_index=index["value"],
        key_index=index.get("key"),
        topic_index=index.get("topic"),
        partition_index=index.get("partition"),
        headers_index=index.get("headers"),
        producer_options=producer_options,
    )


def producer_config(plan: WritePlan) -> dict[str, Any]:
    """The librdkafka configuration for one task's producer.

    Defaults (each overridable with a ``kafka.`` option): ``acks=all``,
    ``enable.idempotence=true`` (turned off when ``kafka.acks`` is set to something other
    than ``all``/``-1``, since librdkafka requires ``acks=all`` for idempotence), and the
    Java-compatible ``partitioner=murmur2_random``.
    """
    user = dict(plan.producer_options)
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
