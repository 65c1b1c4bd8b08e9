"""The ZooKeeper interface (broker/zk/interface.py): the real client and the
in-memory fake both implement ZkOperations; the fake keeps ZooKeeper's rules (versions,
ephemeral znodes per session, watches, sequential znodes, the controller-epoch fence); code
outside the ZooKeeper client depends on the protocol, never on kazoo."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

from broker.topic_names import InvalidTopicError, TopicExistsError
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.client import ZkClient
from broker.zk.interface import (
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    ZkOperations,
)
from tests.fakes.zookeeper import FakeZkClient, FakeZooKeeper

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
PROTOCOL_MEMBERS = sorted(
    name for name in dir(ZkOperations) if not name.startswith("_") and name not in {"register"}
)


@pytest.mark.parametrize("cls", [ZkClient, FakeZkClient])
def test_both_clients_implement_every_operation_with_the_same_parameters(cls: type) -> None:
    for name in PROTOCOL_MEMBERS:
        assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
        wanted = list(inspect.signature(getattr(ZkOperations, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got == wanted, (cls.__name__, name, got, wanted)
    assert isinstance(FakeZooKeeper().client(), ZkOperations)


def test_fake_models_versions_ephemerals_and_watches() -> None:
    async def body() -> None:
        ensemble = FakeZooKeeper()
        a, b = ensemble.client(), ensemble.client()
        await a.start()
        await b.start()
        seen: list[list[int]] = []
        await b.watch_broker_ids(seen.append)
        reg = znodes.BrokerIdZNode.create(1, ["PLAINTEXT://h:1"])
        epoch = await a.register_broker(reg)
        assert await b.get_broker_epoch(1) == epoch
        with pytest.raises(BrokerIdAlreadyRegisteredError):
            await b.register_broker(reg)
        await asyncio.sleep(0)
        assert seen[-1] == [1]
        # conditional writes
        await a.create_topic("t", {0: [1]})
        with pytest.raises(TopicExistsError):
            await b.create_topic("t", {0: [1]})
        with pytest.raises(InvalidTopicError):
            await b.create_topic("a/b", {0: [1]})
        assert await a.set_topic_assignment("t", {0: [1, 2]}, 5) is None
        assert await a.set_topic_assignment("t", {0: [1, 2]}, 0) == 1
        # the controller-epoch fence
        assert await a.try_elect_controller(1) == 1
        assert await b.try_elect_controller(2) is None
        fence = a.controller_epoch_zk_version
        state = znodes.PartitionState(1, 0, (1,), 1)
        assert await a.create_partition_states("t", {0: state}, controller_epoch_zk_version=fence)
        ensemble.set(znodes.CONTROLLER_EPOCH_PATH, b"9")
        with pytest.raises(ControllerMovedError):
            await a.update_partition_state("t", 0, state, 0, controller_epoch_zk_version=fence)
        # sequential notifications
        names = [await b.add_isr_change_notification([TopicPartition("t", 0)]) for _ in range(2)]
        assert names == ["isr_change_0000000000", "isr_change_0000000001"]
        # a session that ends takes its ephemeral znodes with it
        await a.close()
        await asyncio.sleep(0)
        assert seen[-1] == [] and await b.get_controller() is None
        assert await b.try_elect_controller(2) == 10

    asyncio.run(body())


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


ZK_PACKAGE = ROOT / "broker" / "zk"
ZK_CLIENT_MODULES = {"client.py", "session.py", "topics.py", "security.py"}
"""The modules of ``broker/zk/`` that are the kazoo client (not the interface, the znodes or
the embedded server's launcher)."""


def test_only_the_zookeeper_client_modules_import_kazoo() -> None:
    bad = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "broker").rglob("*.py")
        if any(n == "kazoo" or n.startswith("kazoo.") for n in _imports(path))
        and not (path.parent == ZK_PACKAGE and path.name in ZK_CLIENT_MODULES)
    ]
    assert bad == []


def test_controller_and_topic_configs_depend_on_the_protocol_not_the_client() -> None:
    client = {f"broker.zk.{m.removesuffix('.py')}" for m in ZK_CLIENT_MODULES}
    users = [
        *(ROOT / "broker" / "controller").glob("*.py"),
        ROOT / "broker" / "metadata" / "topic_configs.py",
    ]
    bad = [f"{p.name} imports {n}" for p in users for n in _imports(p) & client]
    assert bad == []
