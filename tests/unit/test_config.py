"""Broker and topic configuration (broker/config.py, config_def.py, topic_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig, read_properties
from broker.config_def import ConfigError
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit


def test_defaults_are_kafkas() -> None:
    cfg = BrokerConfig({})
    assert cfg["num.partitions"] == 1
    assert cfg["unclean.leader.election.enable"] is False
    assert cfg.retention_ms == 168 * 3_600_000
    lc = cfg.default_log_config()
    assert lc.segment_bytes == 1_073_741_824
    assert lc.max_message_bytes == 1_048_588
    assert lc.cleanup_policy == ("delete",)


def test_unknown_property_fails_naming_it() -> None:
    with pytest.raises(ConfigError, match="log.segmnt.bytes"):
        BrokerConfig({"log.segmnt.bytes": "1"})


def test_invalid_value_fails_naming_it() -> None:
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig({"num.partitions": "many"})
    with pytest.raises(ConfigError, match="log.cleanup.policy"):
        BrokerConfig({"log.cleanup.policy": "shred"})
    with pytest.raises(ConfigError, match="listeners"):
        BrokerConfig({"listeners": "127.0.0.1-9092"})


def test_ignored_kafka_properties_are_accepted() -> None:
    BrokerConfig({"num.network.threads": "3", "num.io.threads": "8"})


def test_broker_settings_become_topic_defaults() -> None:
    cfg = BrokerConfig(
        {
            "log.segment.bytes": "1048576",
            "log.retention.minutes": "5",
            "log.cleanup.policy": "compact,delete",
            "min.insync.replicas": "2",
        }
    )
    lc = cfg.default_log_config()
    assert lc.segment_bytes == 1_048_576
    assert lc.retention_ms == 300_000
    assert lc.compact and lc.delete
    assert lc.min_insync_replicas == 2
    assert cfg.topic_config_source("segment.bytes") == "static"
    assert cfg.topic_config_source("flush.ms") == "default"


def test_topic_overrides_validate() -> None:
    lc = LogConfig().with_overrides(
        {"retention.ms": "1000", "message.timestamp.type": "LogAppendTime"}
    )
    assert lc.retention_ms == 1000 and lc.log_append_time
    with pytest.raises(ConfigError, match="segment.bytes"):
        LogConfig().with_overrides({"segment.bytes": "1"})


def test_properties_file(tmp_path: Path) -> None:
    p = tmp_path / "server.properties"
    p.write_text(
        "# comment\n! other\nbroker.id = 3\nlog.dirs=/a,\\\n  /b\nlisteners:PLAINTEXT://127.0.0.1:9\n"
    )
    props = read_properties(p)
    assert props == {"broker.id": "3", "log.dirs": "/a,/b", "listeners": "PLAINTEXT://127.0.0.1:9"}
    cfg = BrokerConfig(props)
    assert cfg.broker_id == 3
    assert [str(d) for d in cfg.log_dirs] == ["/a", "/b"]
    assert cfg.listeners[0].port == 9
