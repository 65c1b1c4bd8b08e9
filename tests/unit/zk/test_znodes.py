"""Znode JSON round trips against literal samples written by ZooKeeper-mode Kafka 3.x brokers
(as printed by ``zookeeper-shell get``), and the key-order-independent decode."""

from __future__ import annotations

import uuid

import pytest

from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.znodes import (
    BrokerIdZNode,
    ClusterIdZNode,
    ConfigChangeNotificationZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicZNode,
    Endpoint,
    IsrChangeNotificationZNode,
    PartitionState,
    PreferredReplicaElectionZNode,
    ProducerIdBlockZNode,
    ReassignPartitionsZNode,
    TopicConfigZNode,
    TopicZNode,
    ZNodeDecodeError,
)

pytestmark = pytest.mark.unit

BROKER_SAMPLE = (
    b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://192.168.31.32:9091"],"jmx_port":-1,"features":{},'
    b'"host":"192.168.31.32","timestamp":"1646557610504","port":9091,"version":5}'
)
TOPIC_SAMPLE = (
    b'{"partitions":{"0":[2,3,1],"1":[3,1,2],"2":[1,2,3]},"topic_id":"cMr3GpVESX2L3byPGf93lQ",'
    b'"adding_replicas":{},"removing_replicas":{},"version":3}'
)
TOPIC_SAMPLE_OTHER_ORDER = (
    b'{"removing_replicas":{},"partitions":{"2":[2,1],"1":[1,3],"0":[3,2]},'
    b'"topic_id":"RSZ--odYRlSOPGRgukKnAQ","adding_replicas":{},"version":3}'
)
STATE_SAMPLE = b'{"controller_epoch":5,"leader":3,"version":1,"leader_epoch":4,"isr":[2,3]}'
CONTROLLER_SAMPLE = (
    b'{"version":2,"brokerid":1,"timestamp":"1689018188126","kraftControllerEpoch":-1}'
)
CONTROLLER_V1_SAMPLE = b'{"version":1,"brokerid":0,"timestamp":"1596122550321"}'
CONFIG_SAMPLE = b'{"version":1,"config":{"retention.ms":"100000"}}'
CONFIG_CHANGE_SAMPLE = b'{"version":2,"entity_path":"topics/my-topic"}'
CLUSTER_ID_SAMPLE = b'{"version":"1","id":"Sfr7YvlkRHSHrmSrwq9mug"}'
PID_BLOCK_SAMPLE = b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}'
ISR_CHANGE_SAMPLE = b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'
REASSIGN_SAMPLE = b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}'


def test_broker_registration_round_trip() -> None:
    node = BrokerIdZNode.decode(BROKER_SAMPLE, 0)
    assert node.broker_id == 0
    assert node.host == "192.168.31.32"
    assert node.port == 9091
    assert node.endpoints == ("PLAINTEXT://192.168.31.32:9091",)
    assert node.listener_security_protocol_map == {"PLAINTEXT": "PLAINTEXT"}
    assert node.rack is None
    assert node.jmx_port == -1
    assert node.timestamp == "1646557610504"
    assert node.version == 5
    assert node.encode() == BROKER_SAMPLE
    assert node.path() == "/brokers/ids/0"
    assert node.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "192.168.31.32", 9091)


def test_broker_registration_from_endpoints_derives_host_port_and_protocols() -> None:
    node = znodes.BrokerRegistration(
        broker_id=3, endpoints=["PLAINTEXT://127.0.0.1:9092"], rack="r1", timestamp="1"
    )
    assert (node.host, node.port) == ("127.0.0.1", 9092)
    assert node.encode() == (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://127.0.0.1:9092"],"rack":"r1","jmx_port":-1,"features":{},'
        b'"host":"127.0.0.1","timestamp":"1","port":9092,"version":5}'
    )
    assert BrokerIdZNode.decode(node.encode(), 3) == node
    # no PLAINTEXT listener: host null, port -1, as Kafka writes it
    ssl = BrokerIdZNode.create(3, [Endpoint("SSL", "::1", 9093)], timestamp_ms=5)
    assert ssl.host is None and ssl.port == -1
    assert ssl.endpoints == ("SSL://[::1]:9093",)
    assert BrokerIdZNode.decode(ssl.encode(), 3).endpoint("SSL") == Endpoint("SSL", "::1", 9093)


def test_broker_registration_old_versions_decode() -> None:
    v1 = BrokerIdZNode.decode(b'{"version":1,"host":"h","port":9092,"jmx_port":9999}', 7)
    assert v1.endpoints == ("PLAINTEXT://h:9092",) and v1.jmx_port == 9999
    v4 = BrokerIdZNode.decode(
        b'{"version":4,"host":"h","port":9092,"jmx_port":-1,"timestamp":"2233345666",'
        b'"endpoints":["CLIENT://h:9092","REPLICATION://h:9093"],"rack":"dc1",'
        b'"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"SSL"}}',
        8,
    )
    assert v4.rack == "dc1"
    assert v4.listener_security_protocol_map == {"CLIENT": "PLAINTEXT", "REPLICATION": "SSL"}


def test_topic_round_trip_and_topic_id() -> None:
    node = TopicZNode.decode(TOPIC_SAMPLE, "demo")
    assert node.partitions == {0: (2, 3, 1), 1: (3, 1, 2), 2: (1, 2, 3)}
    assert node.assignment == {0: [2, 3, 1], 1: [3, 1, 2], 2: [1, 2, 3]}
    assert node.topic_id_str == "cMr3GpVESX2L3byPGf93lQ"
    assert node.encode() == TOPIC_SAMPLE
    assert node.path() == "/brokers/topics/demo"
    other = TopicZNode.decode(TOPIC_SAMPLE_OTHER_ORDER, "test-topic")
    assert other.partitions == {0: (3, 2), 1: (1, 3), 2: (2, 1)}
    assert other.topic_id == znodes.kafka_str_to_uuid("RSZ--odYRlSOPGRgukKnAQ")
    assert TopicZNode.decode(other.encode(), "test-topic") == other
    # built from lists, equal to the decoded one
    built = TopicZNode.create("demo", {2: [1, 2, 3], 0: [2, 3, 1], 1: [3, 1, 2]}, node.topic_id)
    assert built == node and built.encode() == TOPIC_SAMPLE


def test_topic_without_id_and_with_reassignment() -> None:
    legacy = TopicZNode.decode(b'{"version":1,"partitions":{"0":[0]}}', "old")
    assert legacy.topic_id is None and legacy.partitions == {0: (0,)}
    assert b"topic_id" not in legacy.encode()
    moving = TopicZNode("m", {0: [1, 2, 3]}, None, adding_replicas={0: [3]}, removing_replicas={})
    decoded = TopicZNode.decode(moving.encode(), "m")
    assert decoded.adding_replicas == {0: (3,)}
    assert b'"adding_replicas":{"0":[3]}' in moving.encode()


def test_partition_state_round_trip() -> None:
    state = PartitionState.decode(STATE_SAMPLE, "t", 0)
    assert state == PartitionState(leader=3, leader_epoch=4, isr=(2, 3), controller_epoch=5)
    assert state.encode() == STATE_SAMPLE
    assert PartitionState(3, 4, [2, 3], 5) == state  # a list ISR is normalised
    assert PartitionState.path("t", 0) == "/brokers/topics/t/partitions/0/state"
    recovering = PartitionState(1, 2, [1], 3, leader_recovery_state=1)
    assert recovering.encode().endswith(b',"leader_recovery_state":1}')
    assert PartitionState.decode(recovering.encode()) == recovering


def test_controller_znodes() -> None:
    node = ControllerZNode.decode(CONTROLLER_SAMPLE)
    assert (node.broker_id, node.timestamp, node.kraft_controller_epoch) == (
        1,
        "1689018188126",
        -1,
    )
    assert node.encode() == CONTROLLER_SAMPLE
    v1 = ControllerZNode.decode(CONTROLLER_V1_SAMPLE)
    assert v1.broker_id == 0 and v1.version == 1
    assert ControllerEpochZNode.decode(b"1272").epoch == 1272
    assert ControllerEpochZNode(5).encode() == b"5"
    assert ControllerEpochZNode.INITIAL == 0


def test_config_znodes() -> None:
    cfg = TopicConfigZNode.decode(CONFIG_SAMPLE, "my-topic")
    assert cfg.config == {"retention.ms": "100000"}
    assert cfg.encode() == CONFIG_SAMPLE
    assert cfg.path() == "/config/topics/my-topic"
    assert TopicConfigZNode.decode(b"", "x").config == {}
    assert TopicConfigZNode("x").encode() == b'{"version":1,"config":{}}'
    change = ConfigChangeNotificationZNode.decode(CONFIG_CHANGE_SAMPLE)
    assert change == ConfigChangeNotificationZNode.for_topic("my-topic")
    assert change.encode() == CONFIG_CHANGE_SAMPLE
    assert ConfigChangeNotificationZNode.create_path() == "/config/changes/config_change_"
    assert ConfigChangeNotificationZNode.path(7) == "/config/changes/config_change_0000000007"
    assert znodes.sequence_number("config_change_0000000007", "config_change_") == "0000000007"


def test_admin_znodes() -> None:
    assert DeleteTopicZNode("t").path() == "/admin/delete_topics/t"
    assert DeleteTopicZNode("t").encode() == b""
    reassign = ReassignPartitionsZNode.decode(REASSIGN_SAMPLE)
    assert reassign.partitions == {TopicPartition("t", 0): (1, 2)}
    assert reassign.encode() == REASSIGN_SAMPLE
    assert reassign.path() == "/admin/reassign_partitions"
    election = PreferredReplicaElectionZNode.decode(ISR_CHANGE_SAMPLE)
    assert election.partitions == frozenset({TopicPartition("t", 0)})
    assert election.encode() == ISR_CHANGE_SAMPLE
    assert election.path() == "/admin/preferred_replica_election"


def test_isr_change_notification() -> None:
    node = IsrChangeNotificationZNode.decode(ISR_CHANGE_SAMPLE)
    assert node.partitions == frozenset({TopicPartition("t", 0)})
    assert node.encode() == ISR_CHANGE_SAMPLE
    assert IsrChangeNotificationZNode.create_path() == "/isr_change_notification/isr_change_"
    two = IsrChangeNotificationZNode(frozenset({TopicPartition("b", 1), TopicPartition("a", 0)}))
    assert two.encode() == (
        b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"b","partition":1}]}'
    )


def test_cluster_id_and_producer_id_block() -> None:
    cid = ClusterIdZNode.decode(CLUSTER_ID_SAMPLE)
    assert cid.id == "Sfr7YvlkRHSHrmSrwq9mug"
    assert cid.encode() == CLUSTER_ID_SAMPLE
    block = ProducerIdBlockZNode.decode(PID_BLOCK_SAMPLE)
    assert (block.broker, block.block_start, block.block_end) == (0, 0, 999)
    assert block.next_block_start == 1000
    assert block.encode() == PID_BLOCK_SAMPLE
    big = ProducerIdBlockZNode(2, 2**62, 2**62 + 999)
    assert ProducerIdBlockZNode.decode(big.encode()) == big
    assert b'"block_start":"4611686018427387904"' in big.encode()


def test_kafka_uuid_strings() -> None:
    value = znodes.kafka_str_to_uuid("cMr3GpVESX2L3byPGf93lQ")
    assert znodes.uuid_to_kafka_str(value) == "cMr3GpVESX2L3byPGf93lQ"
    assert znodes.uuid_to_kafka_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    for _ in range(200):
        text = znodes.random_cluster_id()
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    with pytest.raises(ValueError, match="22"):
        znodes.kafka_str_to_uuid("short")


def test_decode_errors_name_the_path() -> None:
    with pytest.raises(ZNodeDecodeError, match="/brokers/topics/t/partitions/0/state"):
        PartitionState.decode(b"{not json", "t", 0)
    with pytest.raises(ZNodeDecodeError, match="leader_epoch"):
        PartitionState.decode(b'{"leader":1,"isr":[1],"controller_epoch":1}', "t", 0)
    with pytest.raises(ZNodeDecodeError, match="/controller_epoch"):
        ControllerEpochZNode.decode(b"abc")
    with pytest.raises(ZNodeDecodeError, match="/brokers/ids/4"):
        BrokerIdZNode.decode(b'{"version":5,"endpoints":["nonsense"],"jmx_port":-1}', 4)
    with pytest.raises(ZNodeDecodeError, match="/cluster/id"):
        ClusterIdZNode.decode(b"[]")


def test_persistent_paths_match_kafka() -> None:
    for path in (
        "/consumers",
        "/brokers/ids",
        "/brokers/topics",
        "/brokers/seqid",
        "/config/changes",
        "/config/topics",
        "/admin/delete_topics",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/log_dir_event_notification",
    ):
        assert path in znodes.PERSISTENT_PATHS
