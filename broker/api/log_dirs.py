"""DescribeLogDirs (35), versions 1-4: this broker's log directories, the partitions each
holds and their sizes (what ``kafka-log-dirs.sh --describe`` and the admin client's
``describeLogDirs`` show), as Kafka's ``ReplicaManager.describeLogDirs`` answers it.

One result per configured log directory (``log.dirs``), named by its absolute path:
- an offline directory (:mod:`broker.log.log_dir_failure`) answers KAFKA_STORAGE_ERROR and
  nothing else;
- an online one lists, per topic with a log in it, the partitions asked for (every partition
  when the request's ``topics`` is null): the log's size in bytes (every segment file),
  ``offset_lag`` max(high watermark - log end offset, 0) (0 for a replica that has its
  records: Kafka's lag of a *current* log; Millrace has no future logs, so ``is_future_key``
  is always false), and from v4 the file system's total and usable bytes (``statvfs``).
  As Kafka, a topic whose partitions in that directory were all filtered out is listed
  with no partitions.

Authorization: DESCRIBE on the cluster; without it the answer has no results and, from v3,
CLUSTER_AUTHORIZATION_FAILED (as Kafka).

Concurrency: event loop thread; reads the log manager's maps and each log's size (segment
sizes kept in memory), one ``statvfs`` per directory.
"""

from __future__ import annotations

import datetime
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(
    ctx: RequestContext, request: messages.DescribeLogDirsRequest
) -> messages.DescribeLogDirsResponse:
    cls = registry.response_class(ApiKey.DESCRIBE_LOG_DIRS, ctx.version)
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return _response(cls, ErrorCode.cluster_authorization_failed, ())
    wanted: set[TopicPartition] | None = None
    if request.topics is not None:
        wanted = {
            TopicPartition(str(t.topic), int(p)) for t in request.topics for p in t.partitions
        }
    return _response(cls, ErrorCode.none, describe(ctx, cls, wanted))


def _response(cls: Any, error: ErrorCode, results: tuple[Any, ...]) -> Any:
    # ``error_code`` is dropped below v3, ``total_bytes``/``usable_bytes`` below v4 (build)
    return registry.build(
        cls, throttle_time=datetime.timedelta(0), error_code=error, results=results
    )


def describe(ctx: RequestContext, cls: Any, wanted: set[TopicPartition] | None) -> tuple[Any, ...]:
    """One ``DescribeLogDirsResult`` per configured log directory (``wanted``: the
    partitions asked for; None: all)."""
    result_cls = registry.nested(cls, "DescribeLogDirsResult")
    topic_cls = registry.nested(cls, "DescribeLogDirsTopic")
    partition_cls = registry.nested(cls, "DescribeLogDirsPartition")
    log_manager = ctx.services.replica_manager.log_manager
    by_dir: dict[Path, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for tp, log in sorted(log_manager.all_logs().items(), key=lambda item: item[0]):
        log_dir = log_manager.log_dir_of(tp)
        if log_dir is None:
            continue
        partitions = by_dir[log_dir][tp.topic]
        if wanted is None or tp in wanted:
            partitions.append(
                registry.build(
                    partition_cls,
                    partition_index=tp.partition,
                    partition_size=log.size_in_bytes,
                    offset_lag=_lag(log.high_watermark, log.log_end_offset),
                    is_future_key=False,
                )
            )
    results = []
    for log_dir in log_manager.log_dirs:
        path = str(Path(log_dir).absolute())
        fields: dict[str, Any] = {"log_dir": path}
        if log_manager.failure_channel.is_offline(log_dir):
            fields.update(error_code=ErrorCode.kafka_storage_error, topics=())
        else:
            try:
                space = os.statvfs(log_dir)
            except OSError:
                fields.update(error_code=ErrorCode.kafka_storage_error, topics=())
            else:
                topics = by_dir.get(Path(log_dir), {})
                fields.update(
                    error_code=ErrorCode.none,
                    topics=tuple(
                        registry.build(topic_cls, name=name, partitions=tuple(parts))
                        for name, parts in topics.items()
                    ),
                    total_bytes=space.f_blocks * space.f_frsize,
                    usable_bytes=space.f_bavail * space.f_frsize,
                )
        results.append(registry.build(result_cls, **fields))
    return tuple(results)


def _lag(high_watermark: int | None, log_end_offset: int) -> int:
    """Kafka's ``getLogEndOffsetLag`` of a current (not future) log."""
    if high_watermark is None:
        return 0
    return max(high_watermark - log_end_offset, 0)
