"""Driver-side Kafka look-ups for planning: which partitions a subscription covers, their
earliest / latest offsets, and offsets for timestamps.

Speaks only the standard Kafka protocol through confluent-kafka (librdkafka): Metadata and
ListOffsets (``offsets_for_times`` with -2 / -1 / a timestamp, one request per leader for all
partitions). No group is joined and nothing is committed. The security options reach
librdkafka under its names (:meth:`~spark_connector.read.options.ReadOptions.client_config`); a
secured cluster's login is first checked with the connector's own client
(:func:`~spark_connector.kafka.security.check_login`), so a wrong password fails at once
instead of after librdkafka's timeout. A subscribed topic the user may not describe raises
:class:`~spark_connector.kafka.errors.AuthorizationError` (Kafka leaves such topics out of a
listing of all topics, which would read as an empty topic).

Concurrency and pickling: a :class:`KafkaMetadataClient` wraps one librdkafka handle; use it
from one thread, close it when done (it is a context manager), never pickle it. A batch read
creates one per planning call on the driver, a streaming query one for its life (in Spark's
streaming source runner); executors never use this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import TracebackType

from spark_connector.read.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from spark_connector.read.options import (
    METADATA_TIMEOUT_OPTION,
    OffsetKind,
    OffsetSpec,
    ReadOptions,
)

FIRST_RECONNECT_BACKOFF_MS = 20
"""librdkafka's ``reconnect.backoff.ms`` for the driver's look-ups (a ``kafka.`` option
overrides it): see :func:`lookup_config`."""


class KafkaMetadataClient:
    """Partition listing and offset look-ups for one :class:`ReadOptions`. Not thread-safe."""

    def __init__(self, options: ReadOptions) -> None:
        from confluent_kafka import Consumer

        from spark_connector.kafka.security import check_login

        self._options = options
        self._timeout_s = options.metadata_timeout_ms / 1000
        check_login(options.bootstrap_servers, options.kafka_params, min(self._timeout_s, 30.0))
        self._consumer = Consumer(lookup_config(options))

    def _unreachable(self, exc: Exception, started: float) -> RuntimeError:
        """The error of a look-up no broker answered, naming the servers, the time waited
        and the option that sets it."""
        import time

        return RuntimeError(
            f"no broker of kafka.bootstrap.servers={self._options.bootstrap_servers!r} answered "
            f"the driver's metadata request in {time.monotonic() - started:.0f} s "
            f"(librdkafka: {exc}). Check the address and that the brokers run; option "
            f"'{METADATA_TIMEOUT_OPTION}' sets how long to wait (now "
            f"{self._options.metadata_timeout_ms} ms)"
        )

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaMetadataClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- partitions --------------------------------------------------------------------

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every (non-internal for patterns) topic the cluster knows, with its partitions."""
        import time

        from confluent_kafka import KafkaException

        started = time.monotonic()
        try:
            md = self._consumer.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            raise self._unreachable(exc, started) from exc
        out: dict[str, list[int]] = {}
        for name, topic in md.topics.items():
            if topic.error is not None:
                continue
            out[name] = sorted(topic.partitions)
        return out

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription (``subscribe`` / ``subscribePattern`` / ``assign``)
        covers right now, sorted. Topics that do not exist contribute nothing."""
        opts = self._options
        if opts.assign is not None:
            return sorted(opts.assign)
        topics = self.topic_partitions()
        if opts.subscribe is not None:
            wanted = set(opts.subscribe)
            names = [t for t in topics if t in wanted]
            for missing in sorted(wanted - set(names)):
                self._check_described(missing)
        else:
            assert opts.subscribe_pattern is not None
            pattern = re.compile(opts.subscribe_pattern)
            names = [t for t in topics if not t.startswith("__") and pattern.fullmatch(t)]
        return sorted(TopicPartition(t, p) for t in names for p in topics[t])

    def _check_described(self, topic: str) -> None:
        """Raise :class:`AuthorizationError` when ``topic`` is missing from the listing
        because the user may not describe it (asked for alone, it answers
        TOPIC_AUTHORIZATION_FAILED); a topic that does not exist is left alone."""
        from confluent_kafka import KafkaError, KafkaException

        from spark_connector.kafka.errors import AuthorizationError

        try:
            md = self._consumer.list_topics(topic, timeout=self._timeout_s)
        except KafkaException:
            return
        found = md.topics.get(topic)
        error = found.error if found is not None else None
        if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise AuthorizationError(
                f"option 'subscribe': topic '{topic}': TOPIC_AUTHORIZATION_FAILED (the user "
                "needs the READ and DESCRIBE ACLs of the topic)"
            )

    # --- offsets -------------------------------------------------------------------------

    def _list_offsets(self, query: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets for each partition: ``query`` maps to -2, -1 or a timestamp. The answer
        is an offset, or -1 where no record has a timestamp >= the one asked for."""
        if not query:
            return {}
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CKTopicPartition

        request = [CKTopicPartition(tp.topic, tp.partition, ts) for tp, ts in sorted(query.items())]
        try:
            answer = self._consumer.offsets_for_times(request, timeout=self._timeout_s)
        except KafkaException as exc:
            raise RuntimeError(f"ListOffsets failed for {sorted(query)}: {exc}") from exc
        out: dict[TopicPartition, int] = {}
        for ctp in answer:
            if ctp.error is not None:
                raise RuntimeError(
                    f"ListOffsets failed for {ctp.topic}[{ctp.partition}]: {ctp.error}"
                )
            out[TopicPartition(ctp.topic, ctp.partition)] = int(ctp.offset)
        return out

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list_offsets(dict.fromkeys(tps, EARLIEST))

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """High watermark (or last stable offset under ``kafka.isolation.level=
        read_committed``) per partition."""
        return self._list_offsets(dict.fromkeys(tps, LATEST))

    def offsets_for_times(self, stamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Earliest offset whose timestamp is >= the target, -1 where there is none."""
        return self._list_offsets(stamps)

    def group_offsets(self, tps: list[TopicPartition]) -> PartitionOffsets:
        """``startingOffsets=group``: the committed offsets of ``kafka.group.id`` (read with
        require_stable: a pending transactional commit is waited for); a partition the group
        has no offset for starts at ``startingOffsetsGroupFallback``. Offsets outside the log
        (retention moved past them) are left for the data-loss policy."""
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CKTopicPartition

        if not tps:
            return {}
        try:
            answer = self._consumer.committed(
                [CKTopicPartition(tp.topic, tp.partition) for tp in sorted(tps)],
                timeout=self._timeout_s,
            )
        except KafkaException as exc:
            raise RuntimeError(
                f"option 'startingOffsets': cannot read the committed offsets of group "
                f"{self._options.group_id!r}: {exc}"
            ) from exc
        out: PartitionOffsets = {}
        missing: list[TopicPartition] = []
        for ctp in answer:
            tp = TopicPartition(ctp.topic, ctp.partition)
            if ctp.error is not None:
                raise RuntimeError(
                    f"option 'startingOffsets': the committed offset of group "
                    f"{self._options.group_id!r} for {tp.topic}[{tp.partition}]: {ctp.error}"
                )
            if ctp.offset < 0:
                missing.append(tp)
            else:
                out[tp] = int(ctp.offset)
        if missing:
            fallback = self._options.group_fallback
            out.update(
                self.earliest(missing) if fallback is OffsetKind.EARLIEST else self.latest(missing)
            )
        return out

    # --- resolving user positions ----------------------------------------------------------

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, starting: bool
    ) -> PartitionOffsets:
        """Concrete offsets for ``spec`` on ``tps``.

        JSON offsets and per-partition timestamps must cover exactly ``tps`` (as in Spark);
        -2 / -1 become earliest / latest. A timestamp with no record at or after it resolves
        to latest for ending positions, and for starting positions fails (strategy
        ``error``) or resolves to latest (strategy ``latest``)."""
        if spec.kind is OffsetKind.EARLIEST:
            return self.earliest(tps)
        if spec.kind is OffsetKind.GROUP:
            return self.group_offsets(tps)
        if spec.kind is OffsetKind.LATEST:
            return self.latest(tps)
        if spec.kind in (OffsetKind.OFFSETS, OffsetKind.TIMESTAMPS):
            given = set(spec.offsets)
            if given != set(tps):
                missing = sorted(set(tps) - given)
                unknown = sorted(given - set(tps))
                raise ValueError(
                    f"option '{spec.option}' must specify every subscribed partition "
                    f"(use -1 for latest, -2 for earliest with offsets): missing "
                    f"{[f'{t.topic}[{t.partition}]' for t in missing]}, not subscribed or "
                    f"not existing {[f'{t.topic}[{t.partition}]' for t in unknown]}"
                )
        if spec.kind is OffsetKind.OFFSETS:
            out = dict(spec.offsets)
            earliest = self.earliest(tp for tp, o in out.items() if o == EARLIEST)
            latest = self.latest(tp for tp, o in out.items() if o == LATEST)
            out.update(earliest)
            out.update(latest)
            return out
        if spec.kind is OffsetKind.TIMESTAMP:
            assert spec.timestamp is not None
            stamps = dict.fromkeys(tps, spec.timestamp)
        else:
            stamps = dict(spec.offsets)
        found = self.offsets_for_times(stamps)
        missing_tps = [tp for tp, off in found.items() if off < 0]
        if missing_tps and starting and self._options.starting_timestamp_strategy == "error":
            tp = missing_tps[0]
            raise ValueError(
                f"option '{spec.option}': no record in {tp.topic}[{tp.partition}] has a "
                f"timestamp >= {stamps[tp]} (set startingOffsetsByTimestampStrategy=latest "
                "to start at the latest offset instead)"
            )
        found.update(self.latest(missing_tps))
        return found


def lookup_config(options: ReadOptions) -> dict[str, object]:
    """The librdkafka settings of the driver's look-up client: the read's
    (:meth:`~spark_connector.read.options.ReadOptions.client_config`) with two defaults a
    ``kafka.`` option overrides."""
    config = options.client_config()
    # A streaming query keeps its client between micro-batches: a broker closing the idle
    # connection (connections.max.idle.ms) is routine, librdkafka reconnects on the next
    # look-up, and its default "Disconnected" line on stderr would only alarm.
    config.setdefault("log.connection.close", False)
    # librdkafka (2.x) drops its bootstrap connection once the first Metadata names the
    # brokers, losing the look-up in flight on it, and sends it again only after its
    # "sparse connection" pause, half of reconnect.backoff.ms (100 ms by default): about
    # 50 ms added to a query's first look-up (its first micro-batch) in most runs. A
    # shorter first backoff makes that pause its floor, 11 ms; reconnecting to a broker
    # that is down still backs off exponentially, to reconnect.backoff.max.ms (which must
    # not be below it).
    if "reconnect.backoff.ms" not in config:
        ceiling = config.get("reconnect.backoff.max.ms")
        config["reconnect.backoff.ms"] = (
            FIRST_RECONNECT_BACKOFF_MS
            if ceiling is None
            else min(FIRST_RECONNECT_BACKOFF_MS, int(str(ceiling)))
        )
    return config
