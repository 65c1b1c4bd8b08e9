"""The ZooKeeper znodes of ZooKeeper-mode Kafka 3.x: paths and JSON, byte-compatible.

One frozen dataclass per znode kind. Each has ``path(...)`` (a classmethod or property: the
znode's path), ``encode() -> bytes`` (the JSON exactly as Kafka 3.9's ``ZkData.scala`` writes
it: compact, ``"version"`` as Kafka sets it, timestamps and producer-id bounds as strings) and
``decode(data, ...) -> Self`` (tolerant of the older versions Kafka itself still reads). The
key parts of a path that the JSON does not carry (broker id, topic, partition) are passed to
``decode``.

Layout (DESIGN.md section 3 "ZooKeeper layout", checklist section 10)::

    /brokers/ids/<id>                             BrokerIdZNode (ephemeral)
    /brokers/seqid                                BROKER_SEQID_PATH (version = generated id)
    /brokers/topics/<t>                           TopicZNode
    /brokers/topics/<t>/partitions/<p>/state      PartitionState
    /controller                                   ControllerZNode (ephemeral)
    /controller_epoch                             ControllerEpochZNode
    /config/topics/<t>                            TopicConfigZNode
    /config/changes/config_change_<seq>           ConfigChangeNotificationZNode
    /admin/delete_topics/<t>                      DeleteTopicZNode (empty data)
    /admin/reassign_partitions                    ReassignPartitionsZNode
    /admin/preferred_replica_election             PreferredReplicaElectionZNode
    /isr_change_notification/isr_change_<seq>     IsrChangeNotificationZNode
    /log_dir_event_notification/log_dir_event_<seq>   LogDirEventNotificationZNode
    /cluster/id                                   ClusterIdZNode
    /latest_producer_id_block                     ProducerIdBlockZNode

Key order inside the JSON follows what Kafka 3.x brokers are observed to write (Kafka builds
most of these from hash maps, so the order carries no meaning; readers must not rely on it).

The schema is split by concern: :mod:`.common` (paths, JSON and UUID conventions),
:mod:`.cluster` (brokers, controller, cluster id, producer-id blocks) and :mod:`.topics`
(topics, partition states, configs, admin requests, ISR-change notifications). Every name is
importable from this package (``from broker.zk import znodes``).

Concurrency: values are immutable; functions are pure.
"""

from __future__ import annotations

from broker.types import NO_LEADER
from broker.zk.znodes.cluster import (
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ControllerEpochZNode,
    ControllerZNode,
    Endpoint,
    LogDirEventNotificationZNode,
    ProducerIdBlockZNode,
)
from broker.zk.znodes.common import (
    ADMIN_PATH,
    BROKER_IDS_PATH,
    BROKER_SEQID_PATH,
    BROKER_TOPICS_PATH,
    BROKERS_PATH,
    CLUSTER_ID_PATH,
    CLUSTER_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_ENTITY_TYPES,
    CONFIG_PATH,
    CONFIG_TOPICS_PATH,
    CONSUMERS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LEADER_RECOVERY_RECOVERED,
    LEADER_RECOVERY_RECOVERING,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    METADATA_TOPIC_ID,
    PERSISTENT_PATHS,
    PREFERRED_REPLICA_ELECTION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    REASSIGN_PARTITIONS_PATH,
    ZERO_UUID,
    ZNodeDecodeError,
    encode_json,
    kafka_str_to_uuid,
    now_ms_str,
    random_cluster_id,
    random_kafka_uuid,
    sequence_number,
    uuid_to_kafka_str,
)
from broker.zk.znodes.topics import (
    ConfigChangeNotificationZNode,
    DeleteTopicZNode,
    IsrChangeNotificationZNode,
    PartitionState,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicConfigZNode,
    TopicPartitionStateZNode,
    TopicZNode,
)

__all__ = [
    "ADMIN_PATH",
    "BROKERS_PATH",
    "BROKER_IDS_PATH",
    "BROKER_SEQID_PATH",
    "BROKER_TOPICS_PATH",
    "CLUSTER_ID_PATH",
    "CLUSTER_PATH",
    "CONFIG_CHANGES_PATH",
    "CONFIG_ENTITY_TYPES",
    "CONFIG_PATH",
    "CONFIG_TOPICS_PATH",
    "CONSUMERS_PATH",
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "DELETE_TOPICS_PATH",
    "ISR_CHANGE_NOTIFICATION_PATH",
    "LEADER_RECOVERY_RECOVERED",
    "LEADER_RECOVERY_RECOVERING",
    "LOG_DIR_EVENT_NOTIFICATION_PATH",
    "METADATA_TOPIC_ID",
    "NO_LEADER",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION_PATH",
    "PRODUCER_ID_BLOCK_PATH",
    "REASSIGN_PARTITIONS_PATH",
    "ZERO_UUID",
    "BrokerIdZNode",
    "BrokerRegistration",
    "ClusterIdZNode",
    "ConfigChangeNotificationZNode",
    "ControllerEpochZNode",
    "ControllerZNode",
    "DeleteTopicZNode",
    "Endpoint",
    "IsrChangeNotificationZNode",
    "LogDirEventNotificationZNode",
    "PartitionState",
    "PreferredReplicaElectionZNode",
    "ProducerIdBlockZNode",
    "ReassignPartitionsZNode",
    "TopicConfigZNode",
    "TopicPartitionStateZNode",
    "TopicZNode",
    "ZNodeDecodeError",
    "encode_json",
    "kafka_str_to_uuid",
    "now_ms_str",
    "random_cluster_id",
    "random_kafka_uuid",
    "sequence_number",
    "uuid_to_kafka_str",
]
