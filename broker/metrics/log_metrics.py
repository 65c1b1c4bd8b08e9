"""Scrape-time metrics of the logs hosted on this broker and of its log cleaner, named as the
Prometheus JMX exporter renders Kafka's ``kafka.log`` MBeans (see ``docs/metrics.md``).

Per partition whose log is here (leader or follower, as Kafka's ``Log`` MBeans), labels
``topic`` and ``partition``:

- ``kafka_log_log_size``: bytes of the log's segments (``kafka.log:type=Log,name=Size``);
- ``kafka_log_log_logendoffset``, ``kafka_log_log_logstartoffset`` (``LogEndOffset``,
  ``LogStartOffset``);
- ``kafka_log_log_numlogsegments`` (``NumLogSegments``).

A log that is closed or whose directory has gone offline (KIP-112) is left out, as Kafka
removes its gauges.

The log cleaner (only when it runs: ``log.cleaner.enable`` and ``log.cleaner.threads`` > 0;
Kafka registers these MBeans only then):

- ``kafka_log_logcleanermanager_max_dirty_percent``: the highest cleanable ratio of a
  compacted log at the cleaner's last search for work, as a whole percent
  (``kafka.log:type=LogCleanerManager,name=max-dirty-percent``, truncated as Kafka does);
- ``kafka_log_logcleanermanager_time_since_last_run_ms`` (``time-since-last-run-ms``: since
  that last search);
- ``kafka_log_logcleanermanager_uncleanable_partitions_count{logDirectory}``
  (``uncleanable-partitions-count``: partitions whose cleaning failed in this broker run);
- ``kafka_log_logcleaner_max_clean_time_secs`` (``kafka.log:type=LogCleaner,
  name=max-clean-time-secs``: the longest last round among the cleaner tasks; Kafka truncates
  to whole seconds, this keeps the fraction);
- ``kafka_log_logcleaner_cleaner_recopy_percent`` (``cleaner-recopy-percent``: bytes written
  over bytes read in each task's last round, averaged over the tasks, as a whole percent);
- ``kafka_log_logcleaner_deadthreadcount`` (``DeadThreadCount``);
- ``kafka_log_logcleaner_cleaned_bytes_total`` (a counter, a Millrace addition: Kafka has no
  MBean for it): bytes read by the cleaning rounds that completed (a round discarded because
  the log changed under it, or that failed, does not count).

Concurrency: :func:`collect` runs on the broker's event loop (the registry awaits it at scrape
time) and only reads state owned by that loop; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.log.cleaner.manager import LogCleaner
from broker.log.log import Log
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView

__all__ = ["cleaner_families", "collect", "log_families"]

_PARTITION_LABELS = ["topic", "partition"]


async def collect(broker: BrokerView) -> list[Metric]:
    """Every family of this module for ``broker`` (see the module docstring)."""
    families: list[Metric] = []
    if broker.log_manager is not None:
        families.extend(log_families(broker.log_manager.all_logs()))
    if broker.log_cleaner is not None:
        families.extend(cleaner_families(broker.log_cleaner))
    return families


def log_families(logs: Mapping[TopicPartition, Log]) -> list[Metric]:
    """The ``kafka_log_log_*`` gauges of the open, online logs in ``logs``."""
    size = GaugeMetricFamily(
        "kafka_log_log_size", "Bytes of the partition's log segments", labels=_PARTITION_LABELS
    )
    end = GaugeMetricFamily(
        "kafka_log_log_logendoffset",
        "Offset of the next record appended to the partition's log",
        labels=_PARTITION_LABELS,
    )
    start = GaugeMetricFamily(
        "kafka_log_log_logstartoffset",
        "First offset of the partition's log",
        labels=_PARTITION_LABELS,
    )
    segments = GaugeMetricFamily(
        "kafka_log_log_numlogsegments",
        "Segments of the partition's log",
        labels=_PARTITION_LABELS,
    )
    for tp in sorted(logs, key=lambda t: (t.topic, t.partition)):
        log = logs[tp]
        if log.closed or log.offline:
            continue
        labels = [tp.topic, str(tp.partition)]
        live = log.segments
        size.add_metric(labels, sum(s.size for s in live))
        end.add_metric(labels, log.log_end_offset)
        start.add_metric(labels, log.log_start_offset)
        segments.add_metric(labels, len(live))
    return [size, end, start, segments]


def cleaner_families(cleaner: LogCleaner) -> list[Metric]:
    """The ``kafka_log_logcleaner*`` families of a running cleaner."""
    stats = cleaner.stats
    max_dirty = GaugeMetricFamily(
        "kafka_log_logcleanermanager_max_dirty_percent",
        "Highest cleanable ratio of a compacted log at the last search for work, in percent",
        value=int(100 * stats.max_dirty_ratio),
    )
    since_run = GaugeMetricFamily(
        "kafka_log_logcleanermanager_time_since_last_run_ms",
        "Milliseconds since the cleaner last looked for a log to clean",
        value=cleaner.time_since_last_run_ms(),
    )
    uncleanable = GaugeMetricFamily(
        "kafka_log_logcleanermanager_uncleanable_partitions_count",
        "Partitions whose cleaning failed in this broker run, per log directory",
        labels=["logDirectory"],
    )
    for log_dir, count in sorted(cleaner.uncleanable_counts().items()):
        uncleanable.add_metric([str(log_dir)], count)
    last = list(stats.last_by_worker.values())
    threads = max(cleaner.settings.threads, 1)
    max_time = GaugeMetricFamily(
        "kafka_log_logcleaner_max_clean_time_secs",
        "Longest duration of the last cleaning round among the cleaner tasks, in seconds",
        value=max((r.seconds for r in last), default=0.0),
    )
    recopy = GaugeMetricFamily(
        "kafka_log_logcleaner_cleaner_recopy_percent",
        "Bytes written over bytes read by each cleaner task's last round, averaged, in percent",
        value=int(100 * sum(r.bytes_written / max(r.bytes_read, 1) for r in last) / threads),
    )
    dead = GaugeMetricFamily(
        "kafka_log_logcleaner_deadthreadcount",
        "Cleaner tasks that have stopped",
        value=cleaner.dead_tasks(),
    )
    cleaned = CounterMetricFamily(
        "kafka_log_logcleaner_cleaned_bytes",
        "Bytes read by the cleaning rounds that completed (Millrace addition)",
        value=stats.bytes_read,
    )
    return [max_dirty, since_run, uncleanable, max_time, recopy, dead, cleaned]
