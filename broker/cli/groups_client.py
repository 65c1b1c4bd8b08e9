"""The cluster calls of ``millrace groups``: confluent-kafka's ``AdminClient`` (ListGroups,
DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups, Metadata) and a plain ``Consumer``
that never joins a group (ListOffsets watermarks, ``offsets_for_times``).

Answers come back as the values of ``broker.cli.groups_output`` and plain dicts keyed by
``TopicPartition``; every failure raises ``CliError`` naming the group or partition.
Synchronous: one client per command, used from the command's thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from broker.cli.client_settings import admin_client, client_config
from broker.cli.common import MISSING, CliError, kafka_error_text
from broker.cli.groups_output import GroupView, MemberView, state_name
from broker.types import TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient


class GroupsClient:
    """The cluster calls of ``millrace groups``: an AdminClient, and a Consumer (created on
    first use, never subscribed, read_uncommitted) for watermarks and offsets_for_times."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timeout = float(args.timeout)
        self.admin: AdminClient = admin_client(args)
        self._consumer: Consumer | None = None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @property
    def consumer(self) -> Consumer:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer(
                client_config(
                    self.args,
                    {
                        "group.id": "millrace-groups-tool",  # never joined nor committed
                        "enable.auto.commit": "false",
                        "isolation.level": "read_uncommitted",
                    },
                )
            )
        return self._consumer

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, Kafka state name) of every group, sorted."""
        from confluent_kafka import KafkaException

        try:
            result = self.admin.list_consumer_groups(request_timeout=self.timeout).result()
        except KafkaException as exc:
            raise CliError(f"cannot list consumer groups: {kafka_error_text(exc)}") from exc
        errors = list(getattr(result, "errors", None) or [])
        if errors and not result.valid:
            raise CliError(f"cannot list consumer groups: {kafka_error_text(errors[0])}")
        return sorted((g.group_id, state_name(g.state)) for g in result.valid)

    def describe(self, groups: Sequence[str]) -> list[GroupView]:
        from confluent_kafka import KafkaException

        futures = self.admin.describe_consumer_groups(list(groups), request_timeout=self.timeout)
        views: list[GroupView] = []
        for group in groups:
            try:
                desc = futures[group].result()
            except KafkaException as exc:
                raise CliError(
                    f"cannot describe consumer group '{group}': {kafka_error_text(exc)}"
                ) from exc
            node = desc.coordinator
            coordinator = (
                f"{node.host}:{node.port} ({node.id_string})" if node is not None else MISSING
            )
            members = tuple(
                MemberView(
                    str(m.member_id),
                    str(m.host),
                    str(m.client_id),
                    tuple(
                        sorted(
                            TopicPartition(tp.topic, tp.partition)
                            for tp in (m.assignment.topic_partitions if m.assignment else [])
                        )
                    ),
                    m.group_instance_id or None,
                )
                for m in desc.members
            )
            views.append(
                GroupView(
                    group,
                    state_name(desc.state),
                    coordinator,
                    str(desc.partition_assignor or ""),
                    members,
                )
            )
        return views

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

        futures = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout
        )
        try:
            result = futures[group].result()
        except KafkaException as exc:
            raise CliError(
                f"cannot fetch the committed offsets of group '{group}': {kafka_error_text(exc)}"
            ) from exc
        out: dict[TopicPartition, int] = {}
        for tp in result.topic_partitions or []:
            if tp.error is None and tp.offset >= 0:
                out[TopicPartition(tp.topic, tp.partition)] = int(tp.offset)
        return out

    def watermarks(
        self, partitions: Iterable[TopicPartition], *, strict: bool
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(log start offsets, log end offsets); an unreachable partition is left out, or
        raises CliError when ``strict``."""
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        low: dict[TopicPartition, int] = {}
        high: dict[TopicPartition, int] = {}
        for tp in sorted(set(partitions)):
            try:
                lo, hi = self.consumer.get_watermark_offsets(
                    CkTopicPartition(tp.topic, tp.partition), timeout=self.timeout, cached=False
                )
            except KafkaException as exc:
                if strict:
                    raise CliError(
                        f"cannot get the log offsets of partition {tp}: {kafka_error_text(exc)}"
                    ) from exc
                continue
            low[tp], high[tp] = int(lo), int(hi)
        return low, high

    def offsets_for_times(
        self, partitions: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = [CkTopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in partitions]
        if not request:
            return {}
        try:
            answer = self.consumer.offsets_for_times(request, timeout=self.timeout)
        except KafkaException as exc:
            raise CliError(f"cannot look up offsets by timestamp: {kafka_error_text(exc)}") from exc
        out: dict[TopicPartition, int | None] = {}
        for ck in answer:
            tp = TopicPartition(ck.topic, ck.partition)
            if ck.error is not None:
                raise CliError(
                    f"cannot look up the offset by timestamp of partition {tp}: "
                    f"{kafka_error_text(ck.error)}"
                )
            out[tp] = int(ck.offset) if ck.offset >= 0 else None
        return out

    def topic_partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        from confluent_kafka import KafkaException

        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise CliError(f"cannot list topics: {kafka_error_text(exc)}") from exc
        out: dict[str, int] = {}
        for name in topics:
            topic = metadata.topics.get(name)
            if topic is not None and topic.error is None:
                out[name] = len(topic.partitions)
        return out

    def alter_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = ConsumerGroupTopicPartitions(
            group,
            [CkTopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())],
        )
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout)
        try:
            result = futures[group].result()
        except KafkaException as exc:
            raise CliError(
                f"cannot reset the offsets of group '{group}': {kafka_error_text(exc)}"
            ) from exc
        for ck in result.topic_partitions or []:
            if ck.error is not None:
                raise CliError(
                    f"cannot reset the offset of group '{group}' for partition "
                    f"{ck.topic}-{ck.partition}: {kafka_error_text(ck.error)}"
                )

    def delete(self, groups: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """(deleted groups, {failed group: reason})."""
        from confluent_kafka import KafkaException

        futures = self.admin.delete_consumer_groups(list(groups), request_timeout=self.timeout)
        deleted: list[str] = []
        failed: dict[str, str] = {}
        for group in groups:
            try:
                futures[group].result()
            except KafkaException as exc:
                failed[group] = kafka_error_text(exc)
                continue
            deleted.append(group)
        return deleted, failed
