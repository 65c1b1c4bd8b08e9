"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46)
handlers (broker/api/elect_leaders.py, broker/api/reassignments.py) against a fake
controller: response shapes per version, NOT_CONTROLLER, null = all partitions."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.serial import entity_reader

from broker.api import elect_leaders, reassignments
from broker.api.context import RequestContext
from broker.metadata.cache import PartitionInfo
from broker.protocol import registry
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.framing import RequestHeader
from broker.protocol.response import ConnectionInfo
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition


class NotController(KafkaError):
    code = ErrorCode.not_controller


class FakeController:
    """Records calls; answers from canned tables or raises NOT_CONTROLLER."""

    def __init__(self, *, active: bool = True) -> None:
        self.active = active
        self.calls: list[tuple[str, Any]] = []
        self.election: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        self.alter_result: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        self.ongoing: dict[TopicPartition, tuple[list[int], list[int], list[int]]] = {}

    def _check(self) -> None:
        if not self.active:
            raise NotController("broker 2 is not the controller")

    async def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        self.calls.append(("elect", (election_type, partitions)))
        self._check()
        if partitions is None:
            return dict(self.election)
        return {
            tp: self.election.get(tp, (ErrorCode.unknown_topic_or_partition, "unknown"))
            for tp in partitions
        }

    async def alter_partition_reassignments(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        self.calls.append(("alter", dict(targets)))
        self._check()
        return {tp: self.alter_result.get(tp, (ErrorCode.none, None)) for tp in targets}

    async def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        self.calls.append(("list", partitions))
        self._check()
        if partitions is None:
            return dict(self.ongoing)
        return {tp: self.ongoing[tp] for tp in partitions if tp in self.ongoing}


class FakeMetadata:
    def __init__(self, replicas: dict[TopicPartition, tuple[int, ...]]) -> None:
        self.replicas = replicas

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        r = self.replicas.get(TP(topic, partition))
        return None if r is None else PartitionInfo(partition, r[0], 0, r, r)


def ctx(
    api_key: int, version: int, controller: FakeController, metadata: FakeMetadata | None = None
) -> RequestContext:
    services = SimpleNamespace(
        controller=controller, metadata=metadata or FakeMetadata({}), authorizer=None
    )
    return RequestContext(
        RequestHeader(api_key, version, 7, "test"),
        ConnectionInfo("127.0.0.1:1", "PLAINTEXT", 1),
        cast(Any, services),
    )


def roundtrip(response: Any) -> Any:
    """Encode with the broker's writer and decode again: the response is valid on the wire."""
    value, _ = entity_reader(type(response))(registry.encode(response), 0)
    return value


def run(coro: Any) -> Any:
    return roundtrip(asyncio.run(coro))


# --- ElectLeaders ----------------------------------------------------------------------------


def elect_body(
    version: int, partitions: dict[str, list[int]] | None, election_type: int = 0
) -> Any:
    cls = registry.request_class(43, version)
    topic_cls = registry.nested(cls, "TopicPartitions")
    tps = (
        None
        if partitions is None
        else tuple(
            registry.build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in partitions.items()
        )
    )
    return registry.build(cls, election_type=election_type, topic_partitions=tps)


def results_of(response: Any) -> dict[TopicPartition, tuple[int, str | None]]:
    return {
        TP(t.topic, p.partition_id): (int(p.error_code), p.error_message)
        for t in response.replica_election_results
        for p in t.partition_result
    }


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_per_partition_results(version: int) -> None:
    c = FakeController()
    c.election = {
        TP("t", 0): (ErrorCode.none, None),
        TP("t", 1): (ErrorCode.election_not_needed, "Leader election not needed"),
        TP("u", 0): (ErrorCode.preferred_leader_not_available, "preferred replica 3 is down"),
    }
    body = elect_body(version, {"t": [0, 1, 1], "u": [0]}, election_type=0)
    resp = run(elect_leaders.handle(ctx(43, version, c), body))
    assert c.calls == [("elect", (0, [TP("t", 0), TP("t", 1), TP("u", 0)]))]
    assert results_of(resp) == {
        TP("t", 0): (0, None),
        TP("t", 1): (ErrorCode.election_not_needed, "Leader election not needed"),
        TP("u", 0): (ErrorCode.preferred_leader_not_available, "preferred replica 3 is down"),
    }
    assert [t.topic for t in resp.replica_election_results] == ["t", "u"]
    assert resp.throttle_time == datetime.timedelta(0)
    if version >= 1:
        assert resp.error_code == ErrorCode.none
    else:
        assert not hasattr(resp, "error_code")


def test_elect_leaders_unclean_passes_the_type() -> None:
    c = FakeController()
    c.election = {TP("t", 0): (ErrorCode.none, None)}
    run(elect_leaders.handle(ctx(43, 1, c), elect_body(1, {"t": [0]}, election_type=1)))
    assert c.calls == [("elect", (1, [TP("t", 0)]))]


def test_elect_leaders_null_means_all_partitions() -> None:
    c = FakeController()
    c.election = {
        TP("b", 0): (ErrorCode.none, None),
        TP("a", 1): (ErrorCode.election_not_needed, None),
        TP("a", 0): (ErrorCode.none, None),
    }
    resp = run(elect_leaders.handle(ctx(43, 2, c), elect_body(2, None)))
    assert c.calls == [("elect", (0, None))]
    assert [
        (t.topic, [p.partition_id for p in t.partition_result])
        for t in resp.replica_election_results
    ] == [("a", [0, 1]), ("b", [0])]


@pytest.mark.parametrize("version", [1, 2])
def test_elect_leaders_not_controller_is_top_level(version: int) -> None:
    c = FakeController(active=False)
    resp = run(elect_leaders.handle(ctx(43, version, c), elect_body(version, {"t": [0]})))
    assert resp.error_code == ErrorCode.not_controller
    resp_all = run(elect_leaders.handle(ctx(43, version, c), elect_body(version, None)))
    assert resp_all.error_code == ErrorCode.not_controller
    assert resp_all.replica_election_results == ()


def test_elect_leaders_v0_not_controller_is_per_partition() -> None:
    c = FakeController(active=False)
    resp = run(elect_leaders.handle(ctx(43, 0, c), elect_body(0, {"t": [0, 1]})))
    codes = {tp: code for tp, (code, _m) in results_of(resp).items()}
    assert codes == {TP("t", 0): ErrorCode.not_controller, TP("t", 1): ErrorCode.not_controller}


def test_elect_leaders_rejects_unknown_election_type() -> None:
    c = FakeController()
    resp = run(elect_leaders.handle(ctx(43, 2, c), elect_body(2, {"t": [0]}, election_type=5)))
    assert resp.error_code == ErrorCode.invalid_request
    assert c.calls == []


def test_elect_leaders_missing_result_is_unknown_partition() -> None:
    class Partial(FakeController):
        async def elect_leaders(
            self, election_type: int, partitions: list[TopicPartition] | None
        ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
            return {}

    resp = run(elect_leaders.handle(ctx(43, 2, Partial()), elect_body(2, {"t": [4]})))
    assert results_of(resp)[TP("t", 4)][0] == ErrorCode.unknown_topic_or_partition


# --- AlterPartitionReassignments -------------------------------------------------------------


def alter_body(
    version: int, targets: list[tuple[str, int, list[int] | None]], allow_rf_change: bool = True
) -> Any:
    cls = registry.request_class(45, version)
    topic_cls = registry.nested(cls, "ReassignableTopic")
    part_cls = registry.nested(cls, "ReassignablePartition")
    by_topic: dict[str, list[Any]] = {}
    for topic, p, replicas in targets:
        by_topic.setdefault(topic, []).append(
            registry.build(
                part_cls,
                partition_index=p,
                replicas=None if replicas is None else tuple(replicas),
            )
        )
    return registry.build(
        cls,
        allow_replication_factor_change=allow_rf_change,
        topics=tuple(
            registry.build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )


def alter_results(response: Any) -> dict[TopicPartition, tuple[int, str | None]]:
    return {
        TP(t.name, p.partition_index): (int(p.error_code), p.error_message)
        for t in response.responses
        for p in t.partitions
    }


@pytest.mark.parametrize("version", [0, 1])
def test_alter_reassignments_passes_targets_and_cancellations(version: int) -> None:
    c = FakeController()
    c.alter_result = {TP("t", 1): (ErrorCode.no_reassignment_in_progress, "nothing to cancel")}
    body = alter_body(version, [("t", 0, [2, 3, 1]), ("t", 1, None)])
    resp = run(reassignments.handle_alter_partition_reassignments(ctx(45, version, c), body))
    assert c.calls == [("alter", {TP("t", 0): [2, 3, 1], TP("t", 1): None})]
    assert resp.error_code == ErrorCode.none and resp.error_message is None
    assert alter_results(resp) == {
        TP("t", 0): (0, None),
        TP("t", 1): (ErrorCode.no_reassignment_in_progress, "nothing to cancel"),
    }
    if version >= 1:
        assert resp.allow_replication_factor_change is True


@pytest.mark.parametrize("version", [0, 1])
def test_alter_reassignments_not_controller(version: int) -> None:
    c = FakeController(active=False)
    body = alter_body(version, [("t", 0, [1, 2])])
    resp = run(reassignments.handle_alter_partition_reassignments(ctx(45, version, c), body))
    assert resp.error_code == ErrorCode.not_controller
    assert resp.error_message == "broker 2 is not the controller"
    assert resp.responses == ()


def test_alter_reassignments_validates_targets_itself() -> None:
    c = FakeController()
    body = alter_body(
        0, [("t", 0, []), ("t", 1, [1, 1]), ("t", 2, [-1]), ("u", 0, [1]), ("u", 0, [2])]
    )
    resp = run(reassignments.handle_alter_partition_reassignments(ctx(45, 0, c), body))
    codes = {tp: code for tp, (code, _m) in alter_results(resp).items()}
    assert codes == {
        TP("t", 0): ErrorCode.invalid_replica_assignment,
        TP("t", 1): ErrorCode.invalid_replica_assignment,
        TP("t", 2): ErrorCode.invalid_replica_assignment,
        TP("u", 0): ErrorCode.invalid_request,
    }
    assert c.calls == []  # nothing left for the controller


def test_alter_reassignments_v1_refuses_replication_factor_change() -> None:
    c = FakeController()
    meta = FakeMetadata({TP("t", 0): (1, 2), TP("t", 1): (1, 2)})
    body = alter_body(1, [("t", 0, [1, 2, 3]), ("t", 1, [2, 3])], allow_rf_change=False)
    resp = run(reassignments.handle_alter_partition_reassignments(ctx(45, 1, c, meta), body))
    codes = {tp: code for tp, (code, _m) in alter_results(resp).items()}
    assert codes == {TP("t", 0): ErrorCode.invalid_replication_factor, TP("t", 1): 0}
    assert c.calls == [("alter", {TP("t", 1): [2, 3]})]
    assert resp.allow_replication_factor_change is False


# --- ListPartitionReassignments --------------------------------------------------------------


def list_body(topics: dict[str, list[int]] | None) -> Any:
    cls = registry.request_class(46, 0)
    topic_cls = registry.nested(cls, "ListPartitionReassignmentsTopics")
    return registry.build(
        cls,
        topics=None
        if topics is None
        else tuple(
            registry.build(topic_cls, name=t, partition_indexes=tuple(ps))
            for t, ps in topics.items()
        ),
    )


def listed(response: Any) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    return {
        TP(t.name, p.partition_index): (
            list(p.replicas),
            list(p.adding_replicas),
            list(p.removing_replicas),
        )
        for t in response.topics
        for p in t.partitions
    }


def test_list_reassignments_only_ongoing_and_null_is_all() -> None:
    c = FakeController()
    c.ongoing = {
        TP("t", 0): ([2, 3, 1], [3], [1]),
        TP("t", 1): ([1, 2], [], []),  # not being reassigned: left out
        TP("a", 0): ([1, 2, 3], [3], []),
    }
    resp = run(reassignments.handle_list_partition_reassignments(ctx(46, 0, c), list_body(None)))
    assert c.calls == [("list", None)]
    assert resp.error_code == ErrorCode.none
    assert [t.name for t in resp.topics] == ["a", "t"]
    assert listed(resp) == {TP("t", 0): ([2, 3, 1], [3], [1]), TP("a", 0): ([1, 2, 3], [3], [])}


def test_list_reassignments_named_partitions() -> None:
    c = FakeController()
    c.ongoing = {TP("t", 0): ([2, 3, 1], [3], [1]), TP("t", 2): ([1, 3], [3], [])}
    resp = run(
        reassignments.handle_list_partition_reassignments(
            ctx(46, 0, c), list_body({"t": [0, 1, 0]})
        )
    )
    assert c.calls == [("list", [TP("t", 0), TP("t", 1)])]
    assert listed(resp) == {TP("t", 0): ([2, 3, 1], [3], [1])}


def test_list_reassignments_not_controller() -> None:
    c = FakeController(active=False)
    resp = run(reassignments.handle_list_partition_reassignments(ctx(46, 0, c), list_body(None)))
    assert resp.error_code == ErrorCode.not_controller
    assert resp.topics == ()


def test_registry_advertises_the_admin_apis() -> None:
    assert registry.SUPPORTED_APIS[43] == ("ElectLeaders", 0, 2)
    assert registry.SUPPORTED_APIS[45] == ("AlterPartitionReassignments", 0, 1)
    assert registry.SUPPORTED_APIS[46] == ("ListPartitionReassignments", 0, 0)
