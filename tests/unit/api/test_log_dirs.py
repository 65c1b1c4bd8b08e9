"""DescribeLogDirs (35) handler (broker/api/log_dirs.py) against a real log manager with two
log directories in ``tmp_path``: every configured directory answered by absolute path, the
partitions each holds with their sizes, null = all partitions, a filter keeps Kafka's empty
topic entries, an offline directory answers KAFKA_STORAGE_ERROR, v4's file system bytes, and
CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster. Each response is encoded and
decoded again (valid on the wire)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.serial import entity_reader

from broker.api import log_dirs
from broker.api.context import RequestContext
from broker.clock import ManualClock
from broker.log.log import Log
from broker.log.log_manager import LogManager
from broker.protocol import records, registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.response import ConnectionInfo
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
CONFIG = LogConfig(file_delete_delay_ms=0)
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class DenyAll:
    def authorize(self, *_args: Any) -> bool:
        return False


def _append(log: Log, n: int) -> None:
    buf = bytearray(
        records.encode_batch([records.SimpleRecord(b"v" * 50, None, NOW) for _ in range(n)])
    )
    log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


@pytest.fixture
def manager(tmp_path: Path) -> LogManager:
    m = LogManager([tmp_path / "d1", tmp_path / "d2"], CONFIG, clock=ManualClock(NOW), broker_id=1)
    m.startup(lambda _topic: CONFIG)
    for tp, n in ((A0, 3), (A1, 5), (B0, 2)):
        log = m.get_or_create_log(tp)
        _append(log, n)
        log.high_watermark = log.log_end_offset  # type: ignore[misc]
    return m


def _ctx(manager: LogManager, version: int, authorizer: Any = None) -> RequestContext:
    services = SimpleNamespace(
        replica_manager=SimpleNamespace(log_manager=manager), authorizer=authorizer
    )
    return RequestContext(
        RequestHeader(ApiKey.DESCRIBE_LOG_DIRS, version, 7, "test"),
        ConnectionInfo("127.0.0.1:1", "PLAINTEXT", 1),
        cast(Any, services),
    )


def _request(version: int, topics: dict[str, list[int]] | None) -> Any:
    cls = registry.request_class(ApiKey.DESCRIBE_LOG_DIRS, version)
    topic_cls = registry.nested(cls, "DescribableLogDirTopic")
    return registry.build(
        cls,
        topics=None
        if topics is None
        else tuple(
            registry.build(topic_cls, topic=t, partitions=tuple(p)) for t, p in topics.items()
        ),
    )


def _describe(
    manager: LogManager,
    version: int,
    topics: dict[str, list[int]] | None = None,
    authorizer: Any = None,
) -> Any:
    response = asyncio.run(
        log_dirs.handle(_ctx(manager, version, authorizer), _request(version, topics))
    )
    value, _ = entity_reader(type(response))(registry.encode(response), 0)
    return value


def _by_dir(response: Any) -> dict[str, tuple[int, dict[str, dict[int, tuple[int, int, bool]]]]]:
    return {
        r.log_dir: (
            int(r.error_code),
            {
                t.name: {
                    int(p.partition_index): (
                        int(p.partition_size),
                        int(p.offset_lag),
                        p.is_future_key,
                    )
                    for p in t.partitions
                }
                for t in r.topics
            },
        )
        for r in response.results
    }


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_dir_lists_its_partitions_and_sizes(manager: LogManager, version: int) -> None:
    response = _describe(manager, version)
    dirs = _by_dir(response)
    assert sorted(dirs) == sorted(str(d.absolute()) for d in manager.log_dirs)
    seen: dict[TopicPartition, tuple[str, int]] = {}
    for path, (error, topics) in dirs.items():
        assert error == ErrorCode.none
        for topic, parts in topics.items():
            for partition, (size, lag, future) in parts.items():
                tp = TopicPartition(topic, partition)
                seen[tp] = (path, size)
                assert (lag, future) == (0, False)
    assert set(seen) == {A0, A1, B0}
    for tp, (path, size) in seen.items():
        log = manager.get_log(tp)
        assert log is not None
        assert size == log.size_in_bytes > 0
        assert path == str(cast(Path, manager.log_dir_of(tp)).absolute())
    if version >= 3:
        assert response.error_code == ErrorCode.none
    if version >= 4:
        for r in response.results:
            assert r.total_bytes >= r.usable_bytes > 0
    else:
        assert not hasattr(response.results[0], "total_bytes")


def test_a_filter_keeps_the_asked_partitions_and_kafkas_empty_topic_entries(
    manager: LogManager,
) -> None:
    dirs = _by_dir(_describe(manager, 4, {"a": [1], "missing": [0]}))
    partitions = {
        (t, p) for _e, topics in dirs.values() for t, parts in topics.items() for p in parts
    }
    assert partitions == {("a", 1)}
    listed = {t for _e, topics in dirs.values() for t in topics}
    assert "b" in listed  # as Kafka: a topic with a log in the dir, no partition asked for
    assert "missing" not in listed


def test_an_offline_dir_answers_a_storage_error(manager: LogManager) -> None:
    dir_of_b = cast(Path, manager.log_dir_of(B0))
    manager.handle_log_dir_failure(dir_of_b)
    dirs = _by_dir(_describe(manager, 4))
    error, topics = dirs[str(dir_of_b.absolute())]
    assert (error, topics) == (ErrorCode.kafka_storage_error, {})
    online = [v for k, v in dirs.items() if k != str(dir_of_b.absolute())]
    assert [e for e, _ in online] == [ErrorCode.none]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_without_describe_on_the_cluster_nothing_is_listed(
    manager: LogManager, version: int
) -> None:
    response = _describe(manager, version, authorizer=DenyAll())
    assert tuple(response.results) == ()
    if version >= 3:
        assert response.error_code == ErrorCode.cluster_authorization_failed
