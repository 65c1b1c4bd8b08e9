"""Topic-level configs with Kafka's names, defaults and validation (Kafka's ``TopicConfig``
and ``LogConfig``).

* ``TOPIC_CONFIGS``: the configs a topic may override (stored under
  ``/config/topics/<topic>``); an unknown name or an invalid value raises
  :class:`~broker.config_def.ConfigError` naming the config.
* ``TOPIC_CONFIG_SYNONYMS``: for each, the broker property that supplies its default
  (``segment.bytes`` <- ``log.segment.bytes``).

:class:`LogConfig` is the effective configuration of one partition's log: the broker's
defaults (:meth:`broker.config.BrokerConfig.default_log_config`) with the topic's overrides
applied.

Concurrency: every value here is immutable; a config change builds a new object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.config_def import ConfigDef, ConfigError, ConfigType, at_least, one_of

__all__ = [
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "LogConfig",
    "parse_topic_overrides",
]

LONG_MAX = 9_223_372_036_854_775_807


def _policies(v: tuple[str, ...]) -> bool:
    return len(v) > 0 and all(p in ("delete", "compact") for p in v)


_T = ConfigType
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "cleanup.policy",
            _T.LIST,
            ("delete",),
            "delete and/or compact",
            _policies,
            "a list of delete, compact",
        ),
        ConfigDef(
            "compression.type",
            _T.STRING,
            "producer",
            "final compression of the topic",
            one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "one of producer, uncompressed, gzip, snappy, lz4, zstd",
        ),
        ConfigDef(
            "delete.retention.ms", _T.LONG, 86_400_000, "tombstone retention", at_least(0), ">= 0"
        ),
        ConfigDef(
            "file.delete.delay.ms",
            _T.LONG,
            60_000,
            "delay before deleting a file",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "flush.messages",
            _T.LONG,
            LONG_MAX,
            "fsync after this many messages",
            at_least(1),
            ">= 1",
        ),
        ConfigDef("flush.ms", _T.LONG, LONG_MAX, "fsync after this many ms", at_least(0), ">= 0"),
        ConfigDef(
            "index.interval.bytes",
            _T.INT,
            4096,
            "bytes between offset index entries",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "max.compaction.lag.ms",
            _T.LONG,
            LONG_MAX,
            "max time a record stays uncompacted",
            at_least(1),
            ">= 1",
        ),
        ConfigDef(
            "max.message.bytes",
            _T.INT,
            1_048_588,
            "largest record batch size",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "message.timestamp.type",
            _T.STRING,
            "CreateTime",
            "CreateTime or LogAppendTime",
            one_of("CreateTime", "LogAppendTime"),
            "CreateTime or LogAppendTime",
        ),
        ConfigDef(
            "message.timestamp.before.max.ms",
            _T.LONG,
            LONG_MAX,
            "max timestamp lag behind the broker",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "message.timestamp.after.max.ms",
            _T.LONG,
            LONG_MAX,
            "max timestamp lead ahead of the broker",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            _T.DOUBLE,
            0.5,
            "dirty ratio to clean",
            lambda v: 0.0 <= v <= 1.0,
            "between 0 and 1",
        ),
        ConfigDef(
            "min.compaction.lag.ms",
            _T.LONG,
            0,
            "min time a record stays uncompacted",
            at_least(0),
            ">= 0",
        ),
        ConfigDef(
            "min.insync.replicas",
            _T.INT,
            1,
            "replicas that must ack acks=all",
            at_least(1),
            ">= 1",
        ),
        ConfigDef("preallocate", _T.BOOLEAN, False, "preallocate segment files"),
        ConfigDef(
            "retention.bytes",
            _T.LONG,
            -1,
            "max partition size before deleting old segments, -1 for no limit",
        ),
        ConfigDef(
            "retention.ms",
            _T.LONG,
            604_800_000,
            "max age of a segment, -1 for no limit",
            at_least(-1),
            ">= -1",
        ),
        ConfigDef(
            "segment.bytes", _T.INT, 1_073_741_824, "segment file size", at_least(14), ">= 14"
        ),
        ConfigDef(
            "segment.index.bytes", _T.INT, 10_485_760, "offset index size", at_least(8), ">= 8"
        ),
        ConfigDef(
            "segment.jitter.ms", _T.LONG, 0, "random jitter for segment.ms", at_least(0), ">= 0"
        ),
        ConfigDef(
            "segment.ms",
            _T.LONG,
            604_800_000,
            "roll a segment after this age",
            at_least(1),
            ">= 1",
        ),
        ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, False, "allow out-of-ISR leaders"),
    )
}

# topic config -> the broker property that supplies its default
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition's log (topic overrides over broker
    defaults). Attribute names are the topic config names with dots as underscores."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment may get before it rolls: ``segment.ms``, or on a
        compacted topic the smaller ``max.compaction.lag.ms``, so the active segment (which is
        never cleaned) cannot hold records past their maximum compaction lag (Kafka's
        ``maxSegmentMs``)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def value_of(self, topic_config_name: str) -> Any:
        return getattr(self, topic_config_name.replace(".", "_"))

    def with_overrides(self, overrides: Mapping[str, object]) -> LogConfig:
        """Apply topic-level overrides (raw strings), validating each."""
        return dataclasses.replace(self, **parse_topic_overrides(overrides))


def parse_topic_overrides(overrides: Mapping[str, object]) -> dict[str, Any]:
    """Validate topic configs; return them keyed by LogConfig attribute name."""
    out: dict[str, Any] = {}
    for name, raw in overrides.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown topic configuration {name}")
        out[name.replace(".", "_")] = definition.parse(raw)
    return out
