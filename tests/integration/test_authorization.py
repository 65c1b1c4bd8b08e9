"""Authorization: every API checks what Kafka 3.9's ``KafkaApis`` checks, with Kafka's error
codes, on a secured two-broker cluster (SASL/SCRAM over plaintext, Kafka's ACL authorizer,
``allow.everyone.if.no.acl.found=false``, super users ``admin`` and ``broker``).

* ``alice`` has no ACL. Every API, sent by hand (kio requests, table-driven), is refused
  with Kafka's code: TOPIC_AUTHORIZATION_FAILED for a topic whether it exists or not, and
  the group, transactional id and cluster codes; topics, groups and transactions she may not
  describe are left out of Metadata, ListGroups and ListTransactions; nothing she asked for
  changed anything (checked as admin afterwards).
* ``admin``, a super user, sends the same requests and meets no authorization error.
* ``bob`` has ACLs: LITERAL and PREFIXED, and a DENY that overrides an ALLOW. With
  confluent-kafka and kafka-python he produces, consumes with a group, runs a transaction
  and an idempotent producer, and creates, describes and deletes topics under his prefix;
  alice's attempts with the same clients fail with the codes the clients report.
* Metadata auto-creates a topic only with CREATE; CreateTopics sent to the broker that is
  not the controller (which forwards it as the broker's own super user) is checked where
  the client connected.
* One SASL_SSL cluster proves the same over TLS.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.serial import entity_reader

from broker.protocol import interbroker as ib
from broker.protocol import registry
from broker.protocol.errors import ErrorCode
from broker.protocol.records import SimpleRecord, encode_batch
from kafka_security.client_security import client_security
from tests.harness.raw import RawConnection
from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(
        {
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
        },
        brokers=2,
        security="sasl_plaintext",
    ),
]

E = ErrorCode
TAF = E.topic_authorization_failed
GAF = E.group_authorization_failed
CAF = E.cluster_authorization_failed
TXN_AF = E.transactional_id_authorization_failed
AUTH_CODES = {TAF, GAF, CAF, TXN_AF}
# CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
CLUSTER_OPS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
PASSWORDS = {"alice": "alice-password", "bob": "bob-password"}
SECRET = "secret"  # 2 partitions, records, offsets of SECRET_GROUP, written by admin
SECRET_GROUP = "secret-group"
SECRET_TXN = "secret-txn"
GHOST_GROUP = "ghost-group"  # never exists (admin's run of the table must change nothing)
GHOST_TXN = "ghost-txn"


# --- users, ACLs, connections ----------------------------------------------------------------


def user_config(cluster: Cluster, user: str) -> dict[str, object]:
    """librdkafka settings of ``user`` (SCRAM-SHA-512, the cluster's protocol and CA)."""
    cfg = cluster.client_config
    out: dict[str, object] = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": cfg["security.protocol"],
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }
    if "ssl.ca.location" in cfg:
        out["ssl.ca.location"] = cfg["ssl.ca.location"]
    return out


def connect(cluster: Cluster, user: str, broker_id: int = 1) -> RawConnection:
    """A raw connection to one broker, authenticated as ``user`` (``admin``: the super user)."""
    b = cluster.broker(broker_id)
    if user == "admin":
        security = cluster.client_security
    else:
        cfg = {k: v for k, v in user_config(cluster, user).items() if k != "bootstrap.servers"}
        security = client_security(cfg)
    return RawConnection(str(b["host"]), int(b["port"]), 15.0, security)


def call(conn: RawConnection, entity: Any) -> Any:
    """One request; the response decoded with the broker's own classes (kio's, and the
    inter-broker ones kio lacks)."""
    api_key, version = int(entity.__api_key__), int(entity.__version__)
    sent = conn.send_request(entity)
    frame = conn.recv_frame()
    assert int.from_bytes(frame[:4], "big") == sent
    pos = 5 if registry.response_uses_flexible_header(api_key, version) else 4  # no tags
    value, _ = entity_reader(registry.response_class(api_key, version))(frame, pos)
    return value


def error_codes(value: Any) -> list[ErrorCode]:
    """Every error code of a response, nested ones included."""
    out: list[ErrorCode] = []
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return out
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.name.endswith("error_code"):
            out.append(ErrorCode(int(item)))
        elif isinstance(item, tuple):
            for x in item:
                out += error_codes(x)
        elif dataclasses.is_dataclass(item):
            out += error_codes(item)
    return out


def create_users(cluster: Cluster, *users: str) -> None:
    """SCRAM-SHA-512 credentials for ``users``, usable on every broker once this returns."""
    admin = AdminClient(cluster.conf())
    upserts = [
        UserScramCredentialUpsertion(
            u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORDS[u].encode()
        )
        for u in users
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)

    def can_log_in() -> bool:
        for b in cluster.broker_ids():
            for u in users:
                with connect(cluster, u, b):
                    pass
        return True

    wait_for(can_log_in, 30, f"{users} logging in on every broker")


def acl(
    rtype: ResourceType,
    name: str,
    operation: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    user: str = "bob",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", "*", operation, permission)


def grant(cluster: Cluster, *bindings: AclBinding) -> None:
    """Create ACLs as admin and wait until every broker's authorizer has them."""
    admin = AdminClient(cluster.conf())
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest

    def visible() -> bool:
        for broker_id in cluster.broker_ids():
            with connect(cluster, "admin", broker_id) as conn:
                for b in bindings:
                    r = call(
                        conn,
                        DescribeAclsRequest(
                            resource_type_filter=b.restype.value,
                            resource_name_filter=b.name,
                            pattern_type_filter=b.resource_pattern_type.value,
                            principal_filter=b.principal,
                            host_filter=b.host,
                            operation=b.operation.value,
                            permission_type=b.permission_type.value,
                        ),
                    )
                    if not any(res.acls for res in r.resources):
                        return False
        return True

    wait_for(visible, 30, "the new ACLs on every broker")


def flush(producer: Producer) -> None:
    assert producer.flush(30) == 0, "messages still queued after 30 s"


# --- the shared set-up ---------------------------------------------------------------------


@dataclasses.dataclass
class World:
    cluster: Cluster
    secret_id: uuid.UUID
    watermarks: dict[int, tuple[int, int]]  # SECRET's (low, high) per partition
    committed: dict[int, int]  # SECRET_GROUP's offsets


def watermarks(cluster: Cluster, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer(cluster.conf({"group.id": "watermarks"}))
    try:
        return {
            p: consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=15)
            for p in range(partitions)
        }
    finally:
        consumer.close()


def committed(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(cluster.conf({"group.id": group, "enable.auto.commit": False}))
    try:
        tps = consumer.committed([CTopicPartition(topic, p) for p in range(partitions)], 15)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def world(cluster: Cluster) -> World:
    """Users alice (no ACL) and bob, topic SECRET with records, SECRET_GROUP's committed
    offsets and a committed transaction of SECRET_TXN, all written by admin."""
    create_users(cluster, "alice", "bob")
    cluster.create_topic(SECRET, 2, replication_factor=2)
    producer = Producer(cluster.conf({"transactional.id": SECRET_TXN}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(SECRET, f"v{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    consumer = Consumer(cluster.conf({"group.id": SECRET_GROUP, "enable.auto.commit": False}))
    try:
        offsets = [CTopicPartition(SECRET, 0, 2), CTopicPartition(SECRET, 1, 3)]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    with connect(cluster, "admin") as conn:
        r = call(
            conn,
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=SECRET),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    assert r.topics[0].error_code == E.none
    return World(
        cluster,
        r.topics[0].topic_id,
        watermarks(cluster, SECRET, 2),
        committed(cluster, SECRET_GROUP, SECRET, 2),
    )


# --- every API, by hand ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    build: Callable[[World], Any]
    expected: ErrorCode  # alice's
    admin_safe: bool = True  # admin may send it too: it changes nothing that matters


def _produce(w: World, topic: str = SECRET, transactional: bool = False) -> Any:
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    batch = encode_batch(
        [SimpleRecord(b"x", timestamp=int(time.time() * 1000))],
        producer_id=1 if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        transactional=transactional,
    )
    return ProduceRequest(
        transactional_id=GHOST_TXN if transactional else None,
        acks=1,
        timeout=_ms(5000),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )


def _ms(ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=ms)


def _fetch(w: World, replica_id: int = -1) -> Any:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(
        replica_id=replica_id,
        max_wait=_ms(0),
        min_bytes=0,
        topics=(
            FetchTopic(
                topic=SECRET,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def _list_offsets(w: World) -> Any:
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            ListOffsetsTopic(
                name=SECRET, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)
            ),
        ),
    )


def _metadata(w: World, *names: str, by_id: bool = False, all_topics: bool = False) -> Any:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    topics = (
        None
        if all_topics
        else (MetadataRequestTopic(topic_id=w.secret_id, name=None),)
        if by_id
        else tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names)
    )
    return MetadataRequest(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=True
    )


def _offset_commit(w: World) -> Any:
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    part = OffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_metadata=""
    )
    return OffsetCommitRequest(
        group_id=GHOST_GROUP,
        member_id="",
        topics=(OffsetCommitRequestTopic(name=SECRET, partitions=(part,)),),
    )


def _offset_fetch(w: World) -> Any:
    from kio.schema.offset_fetch.v8.request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )

    topics = (OffsetFetchRequestTopics(name=SECRET, partition_indexes=(0, 1)),)
    return OffsetFetchRequest(
        groups=(OffsetFetchRequestGroup(group_id=SECRET_GROUP, topics=topics),)
    )


def _find_coordinator(w: World, key_type: int) -> Any:
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    key = SECRET_GROUP if key_type == 0 else SECRET_TXN
    return FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))


def _join_group(w: World) -> Any:
    from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol

    return JoinGroupRequest(
        group_id=GHOST_GROUP,
        session_timeout=_ms(10_000),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )


def _sync_group(w: World) -> Any:
    from kio.schema.sync_group.v5.request import SyncGroupRequest

    return SyncGroupRequest(
        group_id=GHOST_GROUP,
        generation_id=1,
        member_id="m",
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )


def _heartbeat(w: World) -> Any:
    from kio.schema.heartbeat.v4.request import HeartbeatRequest

    return HeartbeatRequest(group_id=GHOST_GROUP, generation_id=1, member_id="m")


def _leave_group(w: World) -> Any:
    from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity

    return LeaveGroupRequest(group_id=GHOST_GROUP, members=(MemberIdentity(member_id="m"),))


def _describe_groups(w: World) -> Any:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    return DescribeGroupsRequest(groups=(SECRET_GROUP,), include_authorized_operations=True)


def _delete_groups(w: World) -> Any:
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

    return DeleteGroupsRequest(groups_names=(GHOST_GROUP,))


def _offset_delete(w: World) -> Any:
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    part = OffsetDeleteRequestPartition(partition_index=0)
    return OffsetDeleteRequest(
        group_id=GHOST_GROUP, topics=(OffsetDeleteRequestTopic(name=SECRET, partitions=(part,)),)
    )


def _init_producer_id(w: World, transactional: bool) -> Any:
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    return InitProducerIdRequest(
        transactional_id=GHOST_TXN if transactional else None, transaction_timeout=_ms(60_000)
    )


def _add_partitions_v3(w: World) -> Any:
    from kio.schema.add_partitions_to_txn.v3.request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )

    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=GHOST_TXN,
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=SECRET, partitions=(0,)),),
    )


def _add_partitions_v4(w: World) -> Any:
    from kio.schema.add_partitions_to_txn.v4.request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
        AddPartitionsToTxnTransaction,
    )

    txn = AddPartitionsToTxnTransaction(
        transactional_id=GHOST_TXN,
        producer_id=1,
        producer_epoch=0,
        verify_only=True,
        topics=(AddPartitionsToTxnTopic(name=SECRET, partitions=(0,)),),
    )
    return AddPartitionsToTxnRequest(transactions=(txn,))


def _add_offsets(w: World) -> Any:
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest

    return AddOffsetsToTxnRequest(
        transactional_id=GHOST_TXN, producer_id=1, producer_epoch=0, group_id=GHOST_GROUP
    )


def _end_txn(w: World) -> Any:
    from kio.schema.end_txn.v3.request import EndTxnRequest

    return EndTxnRequest(
        transactional_id=GHOST_TXN, producer_id=1, producer_epoch=0, committed=False
    )


def _txn_offset_commit(w: World) -> Any:
    from kio.schema.txn_offset_commit.v3.request import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )

    part = TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_metadata=""
    )
    return TxnOffsetCommitRequest(
        transactional_id=GHOST_TXN,
        group_id=GHOST_GROUP,
        producer_id=1,
        producer_epoch=0,
        topics=(TxnOffsetCommitRequestTopic(name=SECRET, partitions=(part,)),),
    )


def _write_txn_markers(w: World) -> Any:
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )

    marker = WritableTxnMarker(
        producer_id=1,
        producer_epoch=0,
        transaction_result=False,
        topics=(WritableTxnMarkerTopic(name=SECRET, partition_indexes=(0,)),),
        coordinator_epoch=0,
    )
    return WriteTxnMarkersRequest(markers=(marker,))


def _describe_transactions(w: World) -> Any:
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

    return DescribeTransactionsRequest(transactional_ids=(SECRET_TXN,))


def _describe_producers(w: World) -> Any:
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

    return DescribeProducersRequest(topics=(TopicRequest(name=SECRET, partition_indexes=(0,)),))


def _create_topics(w: World) -> Any:
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest

    topic = CreatableTopic(
        name="alice-new", num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    return CreateTopicsRequest(topics=(topic,), validate_only=True)


def _delete_topics(w: World, by_id: bool) -> Any:
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState

    state = (
        DeleteTopicState(name=None, topic_id=w.secret_id)
        if by_id
        else DeleteTopicState(name=SECRET, topic_id=None)
    )
    return DeleteTopicsRequest(topics=(state,), timeout=_ms(10_000))


def _create_partitions(w: World) -> Any:
    from kio.schema.create_partitions.v3.request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )

    # the count it has: INVALID_PARTITIONS for admin (a validate-only growth waits for its
    # partitions until the timeout), TOPIC_AUTHORIZATION_FAILED first for alice
    return CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=SECRET, count=2, assignments=None),),
        timeout=_ms(10_000),
        validate_only=True,
    )


def _delete_records(w: World) -> Any:
    from kio.schema.delete_records.v2.request import (
        DeleteRecordsPartition,
        DeleteRecordsRequest,
        DeleteRecordsTopic,
    )

    part = DeleteRecordsPartition(partition_index=0, offset=0)  # a no-op for admin
    return DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name=SECRET, partitions=(part,)),), timeout=_ms(10_000)
    )


def _describe_configs(w: World, resource_type: int) -> Any:
    from kio.schema.describe_configs.v4.request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )

    name = SECRET if resource_type == 2 else "1"
    return DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=resource_type, resource_name=name),)
    )


def _alter_configs(w: World, resource_type: int) -> Any:
    from kio.schema.alter_configs.v2.request import (
        AlterableConfig,
        AlterConfigsRequest,
        AlterConfigsResource,
    )

    name = SECRET if resource_type == 2 else "1"
    config = (AlterableConfig(name="retention.ms", value="1"),) if resource_type == 2 else ()
    return AlterConfigsRequest(
        resources=(
            AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=config),
        ),
        validate_only=True,
    )


def _incremental_alter_configs(w: World) -> Any:
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    config = AlterableConfig(name="retention.ms", config_operation=0, value="1")
    return IncrementalAlterConfigsRequest(
        resources=(AlterConfigsResource(resource_type=2, resource_name=SECRET, configs=(config,)),),
        validate_only=True,
    )


def _elect_leaders(w: World) -> Any:
    from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions

    return ElectLeadersRequest(
        election_type=0, topic_partitions=(TopicPartitions(topic=SECRET, partitions=(0,)),)
    )


def _alter_reassignments(w: World) -> Any:
    from kio.schema.alter_partition_reassignments.v0.request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
        ReassignableTopic,
    )

    part = ReassignablePartition(partition_index=0, replicas=None)  # cancel: nothing pending
    return AlterPartitionReassignmentsRequest(
        topics=(ReassignableTopic(name=SECRET, partitions=(part,)),)
    )


def _list_reassignments(w: World) -> Any:
    from kio.schema.list_partition_reassignments.v0.request import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsTopics,
    )

    return ListPartitionReassignmentsRequest(
        topics=(ListPartitionReassignmentsTopics(name=SECRET, partition_indexes=(0,)),)
    )


def _offset_for_leader_epoch(w: World, replica_id: int) -> Any:
    from kio.schema.offset_for_leader_epoch.v4.request import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )

    part = OffsetForLeaderPartition(partition=0, leader_epoch=0)
    return OffsetForLeaderEpochRequest(
        replica_id=replica_id, topics=(OffsetForLeaderTopic(topic=SECRET, partitions=(part,)),)
    )


# The controller's requests carry controller epoch 0: stale, so even a broker that forgot to
# check them would ignore them (the test would then see STALE_CONTROLLER_EPOCH).
def _leader_and_isr(w: World) -> Any:
    state = ib.LeaderAndIsrPartitionState(
        partition_index=0,
        controller_epoch=0,
        leader=2,
        leader_epoch=99,
        isr=(2,),
        partition_epoch=0,
        replicas=(1, 2),
    )
    return ib.LeaderAndIsrRequest(
        controller_id=2,
        controller_epoch=0,
        type_=0,
        topic_states=(
            ib.LeaderAndIsrTopicState(
                topic_name=SECRET, topic_id=w.secret_id, partition_states=(state,)
            ),
        ),
        live_leaders=(),
    )


def _update_metadata(w: World) -> Any:
    return ib.UpdateMetadataRequest(
        controller_id=2, controller_epoch=0, topic_states=(), live_brokers=()
    )


def _stop_replica(w: World) -> Any:
    state = ib.StopReplicaPartitionState(partition_index=0, delete_partition=True)
    return ib.StopReplicaRequest(
        controller_id=2,
        controller_epoch=0,
        topic_states=(ib.StopReplicaTopicState(topic_name=SECRET, partition_states=(state,)),),
    )


def _controlled_shutdown(w: World) -> Any:
    return ib.ControlledShutdownRequest(broker_id=99)


def _alter_partition(w: World) -> Any:
    """What a Kafka 3.9 broker sends the controller (v3, topic ids); answered, refused,
    wherever it lands (a broker that is not the controller checks authorization first)."""
    from kio.schema.alter_partition.v3.request import (
        AlterPartitionRequest,
        BrokerState,
        PartitionData,
        TopicData,
    )

    part = PartitionData(
        partition_index=0,
        leader_epoch=0,
        new_isr_with_epochs=(BrokerState(broker_id=99),),
        partition_epoch=0,
    )
    return AlterPartitionRequest(
        broker_id=99, topics=(TopicData(topic_id=w.secret_id, partitions=(part,)),)
    )


def _allocate_producer_ids(w: World) -> Any:
    from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest

    return AllocateProducerIdsRequest(broker_id=99, broker_epoch=-1)


def _describe_acls(w: World) -> Any:
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest

    return DescribeAclsRequest(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )


CASES: dict[str, Case] = {
    "produce": Case(_produce, TAF),
    "produce-unknown-topic": Case(lambda w: _produce(w, "no-such-topic"), TAF),
    "produce-transactional": Case(lambda w: _produce(w, transactional=True), TXN_AF),
    "fetch": Case(_fetch, TAF),
    "fetch-as-follower": Case(lambda w: _fetch(w, replica_id=2), TAF, admin_safe=False),
    "list-offsets": Case(_list_offsets, TAF),
    "metadata": Case(lambda w: _metadata(w, SECRET, "no-such-topic"), TAF),
    "metadata-by-id": Case(lambda w: _metadata(w, by_id=True), TAF),
    "offset-commit": Case(_offset_commit, GAF),
    "offset-fetch": Case(_offset_fetch, GAF),
    "find-coordinator-group": Case(lambda w: _find_coordinator(w, 0), GAF),
    "find-coordinator-txn": Case(lambda w: _find_coordinator(w, 1), TXN_AF),
    "join-group": Case(_join_group, GAF),
    "sync-group": Case(_sync_group, GAF),
    "heartbeat": Case(_heartbeat, GAF),
    "leave-group": Case(_leave_group, GAF),
    "describe-groups": Case(_describe_groups, GAF),
    "delete-groups": Case(_delete_groups, GAF),
    "offset-delete": Case(_offset_delete, GAF),
    "init-producer-id-idempotent": Case(lambda w: _init_producer_id(w, False), CAF),
    "init-producer-id-transactional": Case(lambda w: _init_producer_id(w, True), TXN_AF),
    "add-partitions-to-txn": Case(_add_partitions_v3, TXN_AF),
    "add-partitions-to-txn-v4": Case(_add_partitions_v4, CAF),
    "add-offsets-to-txn": Case(_add_offsets, TXN_AF),
    "end-txn": Case(_end_txn, TXN_AF),
    "txn-offset-commit": Case(_txn_offset_commit, TXN_AF),
    "write-txn-markers": Case(_write_txn_markers, CAF, admin_safe=False),
    "describe-transactions": Case(_describe_transactions, TXN_AF),
    "describe-producers": Case(_describe_producers, TAF),
    "create-topics": Case(_create_topics, TAF),
    "delete-topics": Case(lambda w: _delete_topics(w, False), TAF, admin_safe=False),
    "delete-topics-by-id": Case(lambda w: _delete_topics(w, True), TAF, admin_safe=False),
    "create-partitions": Case(_create_partitions, TAF),
    "delete-records": Case(_delete_records, TAF),
    "describe-configs-topic": Case(lambda w: _describe_configs(w, 2), TAF),
    "describe-configs-broker": Case(lambda w: _describe_configs(w, 4), CAF),
    "alter-configs-topic": Case(lambda w: _alter_configs(w, 2), TAF),
    "alter-configs-broker": Case(lambda w: _alter_configs(w, 4), CAF),
    "incremental-alter-configs": Case(_incremental_alter_configs, TAF),
    "elect-leaders": Case(_elect_leaders, CAF),
    "alter-partition-reassignments": Case(_alter_reassignments, CAF),
    "list-partition-reassignments": Case(_list_reassignments, CAF),
    "offset-for-leader-epoch": Case(lambda w: _offset_for_leader_epoch(w, -1), TAF),
    "offset-for-leader-epoch-replica": Case(lambda w: _offset_for_leader_epoch(w, 2), TAF),
    "leader-and-isr": Case(_leader_and_isr, CAF, admin_safe=False),
    "update-metadata": Case(_update_metadata, CAF, admin_safe=False),
    "stop-replica": Case(_stop_replica, CAF, admin_safe=False),
    "controlled-shutdown": Case(_controlled_shutdown, CAF, admin_safe=False),
    "alter-partition": Case(_alter_partition, CAF, admin_safe=False),
    "allocate-producer-ids": Case(_allocate_producer_ids, CAF, admin_safe=False),
    "describe-acls": Case(_describe_acls, CAF),
}


@pytest.fixture(scope="module")
def alice_conn(world: World) -> Iterator[RawConnection]:
    with connect(world.cluster, "alice") as conn:
        yield conn


@pytest.mark.parametrize("name", list(CASES))
def test_every_api_refuses_a_principal_without_acls(
    world: World, alice_conn: RawConnection, name: str
) -> None:
    case = CASES[name]
    response = call(alice_conn, case.build(world))
    codes = error_codes(response)
    assert codes, f"{name}: no error code in {response}"
    assert set(codes) - {E.none} == {case.expected}, f"{name}: {response}"
    if name == "create-topics":
        [topic] = response.topics
        assert topic.error_message == "Authorization failed."
        assert topic.topic_config_error_code == TAF
    if name == "delete-topics-by-id":
        [topic] = response.responses
        assert topic.name is None and topic.topic_id == world.secret_id  # the name stays secret
    if name == "metadata":  # neither an id nor partitions: existing or not, all look alike
        assert all(t.topic_id is None and not t.partitions for t in response.topics)
    if name == "metadata-by-id":  # the id is no secret, the name is
        [topic] = response.topics
        assert topic.name is None and topic.topic_id == world.secret_id
    if name == "find-coordinator-group":
        [c] = response.coordinators
        assert (c.node_id, c.error_message) == (-1, "Group authorization failed.")


def test_listings_hide_what_a_principal_may_not_describe(world: World) -> None:
    """Metadata for all topics, ListGroups and ListTransactions (asked of every broker: each
    lists what it coordinates) leave out what alice may not describe; DescribeCluster is
    open to all, with the principal's own cluster operations."""
    from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
    from kio.schema.list_groups.v4.request import ListGroupsRequest
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    seen: dict[str, dict[str, set[str]]] = {}
    for user in ("alice", "admin"):
        listed: dict[str, set[str]] = {"topics": set(), "groups": set(), "transactions": set()}
        for broker_id in world.cluster.broker_ids():
            with connect(world.cluster, user, broker_id) as conn:
                meta = call(conn, _metadata(world, all_topics=True))
                groups = call(conn, ListGroupsRequest())
                txns = call(conn, ListTransactionsRequest())
                cluster = call(
                    conn, DescribeClusterRequest(include_cluster_authorized_operations=True)
                )
            assert all(t.error_code == E.none for t in meta.topics)
            assert groups.error_code == E.none and txns.error_code == E.none
            listed["topics"] |= {t.name for t in meta.topics}
            listed["groups"] |= {g.group_id for g in groups.groups}
            listed["transactions"] |= {t.transactional_id for t in txns.transaction_states}
            # any principal may describe the cluster (Kafka 3.9); the operations are its own
            assert cluster.error_code == E.none and len(cluster.brokers) == 2
            expected = 0 if user == "alice" else CLUSTER_OPS
            assert cluster.cluster_authorized_operations == expected
        seen[user] = listed
    assert seen["alice"] == {"topics": set(), "groups": set(), "transactions": set()}
    assert SECRET in seen["admin"]["topics"]
    assert SECRET_GROUP in seen["admin"]["groups"]
    assert SECRET_TXN in seen["admin"]["transactions"]


def test_refused_requests_changed_nothing(world: World) -> None:
    """After alice's table (and before admin's): SECRET, its records, SECRET_GROUP's offsets
    and its configs are as admin left them; nothing alice asked to create exists."""
    cluster = world.cluster
    admin = AdminClient(cluster.conf())
    topics = admin.list_topics(timeout=15).topics
    assert len(topics[SECRET].partitions) == 2
    assert "alice-new" not in topics and "no-such-topic" not in topics
    assert watermarks(cluster, SECRET, 2) == world.watermarks
    assert committed(cluster, SECRET_GROUP, SECRET, 2) == world.committed
    [config] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, SECRET)]).values()
    retention = config.result(15)["retention.ms"]
    assert retention.value != "1" and retention.is_default


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.admin_safe])
def test_a_super_user_is_allowed_everything(world: World, name: str) -> None:
    with connect(world.cluster, "admin") as conn:
        response = call(conn, CASES[name].build(world))
    assert not set(error_codes(response)) & AUTH_CODES, f"{name}: {response}"


# --- ACLs, with real clients -----------------------------------------------------------------


def first_error_code(consumer: Consumer, timeout_s: float) -> int | None:
    """The code of the first error the consumer reports within ``timeout_s``, else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            return int(msg.error().code())
    return None


def _alice_refused_by_confluent_kafka(cluster: Cluster) -> None:
    alice = user_config(cluster, "alice")
    producer = Producer({**alice, "message.timeout.ms": 5000})
    errors: list[KafkaError] = []
    producer.produce(SECRET, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    consumer = Consumer({**alice, "group.id": SECRET_GROUP, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([SECRET])
        seen = first_error_code(consumer, 20)
        assert seen in (
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
        )
    finally:
        consumer.close()

    txn = Producer({**alice, "transactional.id": "alice-txn"})
    with pytest.raises(KafkaException) as info:
        txn.init_transactions(15)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    admin = AdminClient(alice)
    assert SECRET not in admin.list_topics(timeout=15).topics
    for name, future in admin.create_topics([NewTopic("alice-new", 1, 1)]).items():
        with pytest.raises(KafkaException) as info:
            future.result(15)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, name
    [future] = admin.delete_topics([SECRET]).values()
    with pytest.raises(KafkaException) as info:
        future.result(15)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _alice_refused_by_kafka_python(cluster: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import TopicAuthorizationFailedError

    kp_conf = kafka_python_config(cluster, "alice")
    kp = KafkaProducer(**kp_conf, max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(SECRET, b"x").get(timeout=10)
    finally:
        kp.close(timeout=5)
    ka = KafkaAdminClient(**kp_conf)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            ka.create_topics([KNewTopic("alice-new", 1, 1)])
    finally:
        ka.close()


def test_alice_is_refused_by_real_clients(world: World) -> None:
    """confluent-kafka and kafka-python report Kafka's codes to a principal without ACLs."""
    _alice_refused_by_confluent_kafka(world.cluster)
    _alice_refused_by_kafka_python(world.cluster)


def kafka_python_config(cluster: Cluster, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.bootstrap,
        "security_protocol": cluster.client_config["security.protocol"],
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": PASSWORDS[user],
    }


def _bob_produces_and_consumes(bob: dict[str, object]) -> None:
    """An idempotent producer, a transaction and a consumer group, with confluent-kafka."""
    # an idempotent producer: InitProducerId with WRITE on some topic (KIP-679)
    producer = Producer({**bob, "enable.idempotence": True})
    for i in range(3):
        producer.produce("bob-orders", f"o{i}".encode())
    flush(producer)
    # a transaction: WRITE on the transactional id (by its prefix) and the topic
    txn = Producer({**bob, "transactional.id": "bob-tx-1"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("bob-orders", b"in-txn")
    txn.commit_transaction(30)

    # a consumer group: READ on the group and the topic
    consumer = Consumer(
        {
            **bob,
            "group.id": "bob-group",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.subscribe(["bob-orders"])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        assert sorted(values) == [b"in-txn", b"o0", b"o1", b"o2"]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _bob_reads_with_kafka_python(cluster: Cluster) -> None:
    """kafka-python, the same group (the offsets confluent-kafka committed) and topic."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    kc = KafkaConsumer(
        **kafka_python_config(cluster, "bob"),
        group_id="bob-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        tp = KTopicPartition("bob-orders", 0)
        assert (kc.committed(tp) or 0) >= 4
        kc.assign([tp])
        kc.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            for records in kc.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        assert sorted(got) == [b"in-txn", b"o0", b"o1", b"o2"]
    finally:
        kc.close()


def _bob_uses_his_prefix(bob: dict[str, object]) -> None:
    """The prefix: create, describe, produce, delete; the DENY beats the prefix's ALLOW;
    nothing outside his ACLs."""
    admin = AdminClient(bob)
    for future in admin.create_topics(
        [NewTopic("bob-pre-a", 1, 1), NewTopic("bob-pre-denied", 1, 1)]
    ).values():
        future.result(30)
    wait_for(
        lambda: {"bob-pre-a", "bob-pre-denied"} <= set(admin.list_topics(timeout=10).topics),
        30,
        "bob's topics",
    )
    [config] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "bob-pre-a")]).values()
    assert config.result(15)["cleanup.policy"].value == "delete"
    p = Producer(bob)
    p.produce("bob-pre-denied", b"write-allowed")
    flush(p)
    denied = Consumer({**bob, "group.id": "bob-group", "auto.offset.reset": "earliest"})
    try:
        denied.assign([CTopicPartition("bob-pre-denied", 0, 0)])
        assert first_error_code(denied, 20) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        denied.close()
    # bob may not touch topics outside his ACLs
    [future] = admin.delete_topics([SECRET]).values()
    with pytest.raises(KafkaException) as info:
        future.result(15)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    [future] = admin.delete_topics(["bob-pre-a"]).values()
    future.result(30)


def test_bob_acts_within_his_acls(world: World) -> None:
    """LITERAL ACLs on a topic, a group and a transactional id, PREFIXED ones on a topic
    prefix, a DENY that overrides the prefix's ALLOW; confluent-kafka and kafka-python."""
    cluster = world.cluster
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    prefixed = ResourcePatternType.PREFIXED
    grant(
        cluster,
        acl(T, "bob-orders", AclOperation.WRITE),
        acl(T, "bob-orders", AclOperation.READ),
        acl(G, "bob-group", AclOperation.READ),
        acl(ResourceType.TRANSACTIONAL_ID, "bob-tx-", AclOperation.WRITE, prefixed),
        acl(T, "bob-pre-", AclOperation.ALL, prefixed),
        acl(T, "bob-pre-denied", AclOperation.READ, permission=AclPermissionType.DENY),
    )
    cluster.create_topic("bob-orders", 1, replication_factor=2)
    bob = user_config(cluster, "bob")
    _bob_produces_and_consumes(bob)
    _bob_reads_with_kafka_python(cluster)
    _bob_uses_his_prefix(bob)


def test_one_request_is_answered_resource_by_resource(world: World) -> None:
    """A request naming what bob may and may not touch: each topic (or group) answered on its
    own, as Kafka does; listings and ``authorized_operations`` are bob's."""
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.list_groups.v4.request import ListGroupsRequest
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.offset_fetch.v8.request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    cluster = world.cluster
    topic, group = "bob-mixed", "bob-mixed-group"
    cluster.create_topic(topic, 1, replication_factor=2)
    grant(
        cluster,
        acl(ResourceType.TOPIC, topic, AclOperation.WRITE),
        acl(ResourceType.TOPIC, topic, AclOperation.READ),
        acl(ResourceType.GROUP, group, AclOperation.READ),
    )
    leader = cluster.leader_of(topic)
    batch = encode_batch([SimpleRecord(b"x", timestamp=int(time.time() * 1000))])
    produce = ProduceRequest(
        acks=1,
        timeout=_ms(5000),
        topic_data=tuple(
            TopicProduceData(
                name=name, partition_data=(PartitionProduceData(index=0, records=batch),)
            )
            for name in (topic, SECRET)
        ),
    )

    def commit(name: str) -> OffsetCommitRequestTopic:
        part = OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_metadata="m"
        )
        return OffsetCommitRequestTopic(name=name, partitions=(part,))

    with connect(cluster, "bob", leader) as conn:
        r = call(conn, produce)
        assert {t.name: t.partition_responses[0].error_code for t in r.responses} == {
            topic: E.none,
            SECRET: TAF,
        }
    # (one offsets partition: one coordinator for every group)
    with connect(cluster, "admin") as conn:
        [found] = call(conn, _find_coordinator(world, 0)).coordinators
    # admin commits SECRET's offset in bob's group too: bob must not see it listed
    with connect(cluster, "admin", found.node_id) as conn:
        r = call(conn, OffsetCommitRequest(group_id=group, member_id="", topics=(commit(SECRET),)))
        assert error_codes(r) == [E.none]
    with connect(cluster, "bob", found.node_id) as conn:
        r = call(
            conn,
            OffsetCommitRequest(
                group_id=group, member_id="", topics=(commit(topic), commit(SECRET))
            ),
        )
        assert {t.name: t.partitions[0].error_code for t in r.topics} == {
            topic: E.none,
            SECRET: TAF,
        }
        named = tuple(
            OffsetFetchRequestTopics(name=n, partition_indexes=(0,)) for n in (topic, SECRET)
        )
        r = call(
            conn,
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(group_id=group, topics=named),
                    OffsetFetchRequestGroup(group_id=group, topics=None),
                    OffsetFetchRequestGroup(group_id=SECRET_GROUP, topics=None),
                )
            ),
        )
        mine, everything, others = r.groups
        assert {
            t.name: (t.partitions[0].committed_offset, t.partitions[0].error_code)
            for t in mine.topics
        } == {topic: (1, E.none), SECRET: (-1, TAF)}
        assert [t.name for t in everything.topics] == [topic]  # SECRET left out
        assert (others.error_code, others.topics) == (GAF, ())
        r = call(
            conn,
            DescribeGroupsRequest(groups=(group, SECRET_GROUP), include_authorized_operations=True),
        )
        described = {g.group_id: (g.error_code, g.authorized_operations) for g in r.groups}
        assert described == {
            group: (E.none, (1 << 3) | (1 << 8)),  # READ, and the DESCRIBE it implies
            SECRET_GROUP: (GAF, -(2**31)),
        }
    listed: set[str] = set()
    for broker_id in cluster.broker_ids():
        with connect(cluster, "bob", broker_id) as conn:
            listed |= {g.group_id for g in call(conn, ListGroupsRequest()).groups}
    assert group in listed and SECRET_GROUP not in listed


def test_metadata_auto_creates_only_with_create(world: World) -> None:
    """DESCRIBE alone: TOPIC_AUTHORIZATION_FAILED and nothing created; with CREATE on the
    topic, Metadata creates it."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    cluster = world.cluster
    grant(cluster, acl(ResourceType.TOPIC, "bob-auto", AclOperation.DESCRIBE))
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="bob-auto"),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=True,
    )
    with connect(cluster, "bob") as conn:
        [topic] = call(conn, request).topics
        assert topic.error_code == TAF
        assert "bob-auto" not in AdminClient(cluster.conf()).list_topics(timeout=10).topics
        grant(cluster, acl(ResourceType.TOPIC, "bob-auto", AclOperation.CREATE))
        [topic] = call(conn, request).topics
        assert topic.error_code in (E.none, E.leader_not_available)
        # the operations he may perform on it: CREATE (5) and DESCRIBE (8)
        assert topic.topic_authorized_operations == (1 << 5) | (1 << 8)
    wait_for(
        lambda: "bob-auto" in AdminClient(cluster.conf()).list_topics(timeout=10).topics,
        30,
        "bob-auto auto-created",
    )


def test_a_forwarded_create_topics_is_checked_where_the_client_connected(world: World) -> None:
    """The broker that is not the controller forwards CreateTopics as its own super user:
    the refused topic must be refused there, the allowed one created."""
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest

    cluster = world.cluster
    grant(
        cluster,
        acl(ResourceType.TOPIC, "bob-fwd-", AclOperation.CREATE, ResourcePatternType.PREFIXED),
    )
    controller = cluster.controller_id()
    [other] = [b for b in cluster.broker_ids() if b != controller]

    def topic(name: str) -> Any:
        return CreatableTopic(
            name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
        )

    request = CreateTopicsRequest(topics=(topic("fwd-refused"), topic("bob-fwd-ok")))
    with connect(cluster, "bob", other) as conn:
        refused, created = call(conn, request).topics
    assert (refused.name, refused.error_code) == ("fwd-refused", TAF)
    assert (created.name, created.error_code) == ("bob-fwd-ok", E.none)
    # created, but bob may not DESCRIBE_CONFIGS it: no configs or id answered
    assert created.topic_config_error_code == TAF and created.configs is None
    admin = AdminClient(cluster.conf())
    topics = wait_for(
        lambda: "bob-fwd-ok" in (t := admin.list_topics(timeout=10).topics) and t,
        30,
        "bob-fwd-ok in the metadata",
    )
    assert "fwd-refused" not in topics


def test_sasl_ssl(cluster_factory: Callable[..., Cluster]) -> None:
    """The same rules over TLS: alice refused, bob with an ACL allowed."""
    cluster = cluster_factory(brokers=1, security="sasl_ssl")
    assert cluster.client_config["security.protocol"] == "SASL_SSL"
    create_users(cluster, "alice", "bob")
    cluster.create_topic("tls-topic", 1)
    grant(
        cluster, acl(ResourceType.TOPIC, "tls-", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    )
    results: dict[str, list[KafkaError | None]] = {}
    for user in ("alice", "bob"):
        producer = Producer({**user_config(cluster, user), "message.timeout.ms": 10_000})
        results[user] = []
        producer.produce(
            "tls-topic", b"x", on_delivery=lambda err, _m, u=user: results[u].append(err)
        )
        producer.flush(20)
    assert [e.code() for e in results["alice"] if e is not None] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    assert results["bob"] == [None]
