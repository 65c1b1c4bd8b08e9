"""The producer and the consumer of the console and perf tools (``millrace produce``,
``consume``, ``perf produce``, ``perf consume``): their options, the librdkafka configuration
built from them, their creation, the partitions of a topic, and the consumer errors that end
a run.

Options, with the names of Kafka's console and perf tools: ``--producer-property K=V``
(repeatable), ``--producer-props K=V ...`` (perf), ``--producer.config FILE``;
``--consumer-property K=V`` (repeatable), ``--consumer.config FILE``. A producer's settings,
later ones winning: ``broker.cli.client_settings.client_config``'s (bootstrap, logging,
``--command-config``), ``message.timeout.ms=60000``, ``--producer.config``,
``--compression-codec``/``--request-required-acks``, ``--producer-props``,
``--producer-property``. A consumer's: ``client_config``'s, the tool's (group, offset
reset, auto-commit only with a group), ``--consumer.config``, ``--consumer-property``.

Synchronous; the clients are used from the command's one thread.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

from broker.cli.client_settings import client_config
from broker.cli.common import CliError, kafka_error_text, parse_key_values, read_properties_file

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Producer

DEFAULT_DELIVERY_TIMEOUT_MS = "60000"


# --- options -------------------------------------------------------------------------------


def add_producer_options(parser: argparse.ArgumentParser, *, props_list: bool = False) -> None:
    """Add ``--producer-property``, (with ``props_list``, perf's ``--producer-props``) and
    ``--producer.config``."""
    parser.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer (librdkafka) setting (repeatable)",
    )
    if props_list:
        parser.add_argument(
            "--producer-props",
            nargs="+",
            default=[],
            metavar="KEY=VALUE",
            help="producer settings, Kafka-style list",
        )
    parser.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="properties file of producer settings",
    )


def add_consumer_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--consumer-property`` and ``--consumer.config``."""
    parser.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="consumer (librdkafka) setting (repeatable)",
    )
    parser.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="properties file of consumer settings",
    )


# --- configuration -------------------------------------------------------------------------


def settings_file(path: str, option: str) -> dict[str, str]:
    """A ``--producer.config`` / ``--consumer.config`` file's settings under librdkafka's
    names (Kafka's Java names are translated, as for ``--command-config``)."""
    from kafka_security.librdkafka_settings import SettingsError, librdkafka_settings

    try:
        return librdkafka_settings(read_properties_file(path, option), f"{option} {path}")
    except SettingsError as exc:
        raise CliError(str(exc)) from None


def producer_config(args: argparse.Namespace) -> dict[str, Any]:
    """The librdkafka configuration of a tool's producer."""
    extra: dict[str, str] = {"message.timeout.ms": DEFAULT_DELIVERY_TIMEOUT_MS}
    if getattr(args, "producer_config", None):
        extra.update(settings_file(args.producer_config, "--producer.config"))
    if getattr(args, "compression_codec", None):
        extra["compression.type"] = args.compression_codec
    if getattr(args, "request_required_acks", None):
        extra["acks"] = args.request_required_acks
    extra.update(parse_key_values(getattr(args, "producer_props", []), "--producer-props"))
    extra.update(parse_key_values(args.producer_property, "--producer-property"))
    return client_config(args, extra)


def delivery_timeout_ms(args: argparse.Namespace) -> str:
    """The delivery timeout ``--producer-property`` sets (``message.timeout.ms`` or
    ``delivery.timeout.ms``), else the tools' default."""
    props = parse_key_values(args.producer_property, "--producer-property")
    for name in ("message.timeout.ms", "delivery.timeout.ms"):
        if name in props and props[name].isdigit():
            return props[name]
    return DEFAULT_DELIVERY_TIMEOUT_MS


def consumer_config(args: argparse.Namespace, group: str | None, earliest: bool) -> dict[str, Any]:
    """The librdkafka configuration of a tool's consumer: member of ``group`` (committing)
    if given, else of a throwaway group it never joins; no committed offset: start at the
    earliest offset if ``earliest``, else the latest."""
    extra: dict[str, Any] = {
        "group.id": group or f"millrace-console-{os.getpid()}",
        "enable.auto.commit": bool(group),
        "enable.auto.offset.store": bool(group),
        "auto.offset.reset": "earliest" if earliest else "latest",
        "enable.partition.eof": False,
    }
    if getattr(args, "consumer_config", None):
        extra.update(settings_file(args.consumer_config, "--consumer.config"))
    extra.update(parse_key_values(args.consumer_property, "--consumer-property"))
    return client_config(args, extra)


# --- clients -------------------------------------------------------------------------------


def create_producer(args: argparse.Namespace) -> Producer:
    """The tool's producer; a setting librdkafka refuses raises CliError."""
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(producer_config(args))
    except KafkaException as exc:
        raise CliError(f"invalid producer setting: {kafka_error_text(exc)}") from exc


def create_consumer(conf: dict[str, Any]) -> Consumer:
    """A consumer of ``conf``; a setting librdkafka refuses raises CliError."""
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(conf)
    except KafkaException as exc:
        raise CliError(f"invalid consumer setting: {kafka_error_text(exc)}") from exc


def close_quietly(consumer: Consumer) -> None:
    """Close ``consumer``, ignoring a failure to (it is being abandoned anyway)."""
    from confluent_kafka import KafkaException

    try:
        consumer.close()
    except (KafkaException, RuntimeError):
        pass


def partitions_of(consumer: Consumer, topic: str, timeout: float = 15.0) -> list[int]:
    """The partition ids of ``topic``; CliError if it does not exist."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    last_error = "no metadata"
    while True:
        try:
            metadata = consumer.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            raise CliError(
                f"cannot fetch metadata of topic '{topic}': {kafka_error_text(exc)}"
            ) from exc
        info = metadata.topics.get(topic)
        if info is not None and info.error is None and info.partitions:
            return sorted(info.partitions)
        if info is not None and info.error is not None:
            last_error = kafka_error_text(info.error)
            if info.error.name() == "UNKNOWN_TOPIC_OR_PART":
                raise CliError(f"topic '{topic}' does not exist")
        if time.monotonic() >= deadline:
            raise CliError(f"no partitions for topic '{topic}': {last_error}")
        time.sleep(0.2)


def is_fatal(err: KafkaError) -> bool:
    """Errors after which a console client should stop (others are retried by librdkafka)."""
    if err.fatal():
        return True
    return err.name() in (
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_TOPIC",
        "_UNKNOWN_PARTITION",
        "TOPIC_AUTHORIZATION_FAILED",
        "OFFSET_OUT_OF_RANGE",
        "_AUTO_OFFSET_RESET",
    )
