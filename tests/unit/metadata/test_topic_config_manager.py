"""The broker-side topic-config manager (broker/metadata/topic_configs.py) against the
in-memory ZooKeeper: start-up load, effective configs, AlterConfigs writes with their
``/config/changes`` notification, and another broker following the change."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.config import BrokerConfig
from broker.metadata.topic_configs import InvalidConfigError, TopicConfigManager, validate_configs
from broker.topic_config import LogConfig
from broker.zk import znodes
from tests.fakes.zookeeper import FakeZooKeeper

pytestmark = pytest.mark.unit

CONFIG = BrokerConfig({"log.retention.ms": "5000"})


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_load_all_and_effective_configs() -> None:
    async def body() -> None:
        zk = FakeZooKeeper().client()
        await zk.start()
        await zk.create_topic("a", {0: [1]}, {"retention.ms": "100", "cleanup.policy": "compact"})
        await zk.create_topic("b", {0: [1]})
        manager = TopicConfigManager(zk, CONFIG)
        await manager.load_all()
        assert manager.overrides("a") == {"retention.ms": "100", "cleanup.policy": "compact"}
        assert manager.overrides("b") == {} and manager.overrides("unknown") == {}
        a = manager.log_config_for("a")
        assert a.retention_ms == 100 and a.cleanup_policy == ("compact",)
        assert manager.log_config_for("b").retention_ms == 5000  # the broker's default
        assert manager.log_config_for("b", {"retention.ms": "7"}).retention_ms == 7

    asyncio.run(body())


def test_invalid_stored_overrides_fall_back_to_the_defaults(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> LogConfig:
        zk = FakeZooKeeper().client()
        await zk.start()
        await zk.create_topic("t", {0: [1]}, {"retention.ms": "soon"})
        manager = TopicConfigManager(zk, CONFIG)
        await manager.ensure_loaded(["t"])
        return manager.log_config_for("t")

    with caplog.at_level(logging.WARNING):
        config = asyncio.run(body())
    assert config.retention_ms == 5000
    assert "ignoring invalid stored config of topic t" in caplog.text


def test_set_overrides_writes_notifies_and_other_brokers_follow() -> None:
    async def body() -> None:
        ensemble = FakeZooKeeper()
        zk1, zk2 = ensemble.client(), ensemble.client()
        await zk1.start()
        await zk2.start()
        await zk1.ensure_persistent_paths()
        await zk1.create_topic("t", {0: [1, 2]})
        here, there = TopicConfigManager(zk1, CONFIG), TopicConfigManager(zk2, CONFIG)
        applied_here: list[tuple[str, int]] = []
        applied_there: list[tuple[str, int]] = []
        here.add_listener(lambda t, c: applied_here.append((t, c.retention_ms)))
        there.add_listener(lambda t, c: applied_there.append((t, c.retention_ms)))
        for m in (here, there):
            await m.load_all()
            await m.start()
        await _settle()
        with pytest.raises(InvalidConfigError):
            await here.set_overrides("t", {"retention.ms": "x"})
        await here.set_overrides("t", {"retention.ms": "9"}, validate_only=True)
        assert await zk1.get_topic_config("t") == {}
        await here.set_overrides("t", {"retention.ms": "9", "segment.ms": None})
        await _settle()
        assert await zk1.get_topic_config("t") == {"retention.ms": "9"}
        changes = await zk1.get_config_change("config_change_0000000000")
        assert changes == znodes.ConfigChangeNotificationZNode("topics/t")
        assert ("t", 9) in applied_here
        assert there.overrides("t") == {"retention.ms": "9"} and applied_there == [("t", 9)]
        here.topic_deleted("t")
        assert here.overrides("t") == {}
        for m in (here, there):
            await m.stop()

    asyncio.run(body())


def test_config_validation_names_the_property() -> None:
    with pytest.raises(InvalidConfigError, match="retention.ms"):
        validate_configs({"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError, match="no.such.config"):
        validate_configs({"no.such.config": "1"})
    assert validate_configs({"cleanup.policy": "compact", "segment.ms": None}) == {
        "cleanup.policy": "compact"
    }
