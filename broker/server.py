"""The broker process: wires the services together, runs them, and shuts them down cleanly.

Start-up order: connect to ZooKeeper and create the persistent paths; read or create the
cluster id; take ``broker.id`` (or generate one from ``/brokers/seqid``); load and recover
the logs; delete stray logs (partitions whose topic was deleted, or that were moved away,
while the broker was down); open the listeners; register the ephemeral
``/brokers/ids/<id>`` (a duplicate id refuses to start), which tells the controller to send
this broker its partitions (LeaderAndIsr) and the cluster metadata (UpdateMetadata); run the
controller election; start the periodic tasks (retention, flush, checkpoints, ISR checks).

A log directory that fails (an I/O error: disk full, EIO, read-only file system) goes
offline without stopping the broker (KIP-112; see :mod:`broker.log.log_dir_failure`): its
partitions stop here and the broker writes ``/log_dir_event_notification/log_dir_event_<seq>``
so the controller moves them elsewhere. When every log directory has failed the broker shuts
down (Kafka halts): no controlled shutdown (it leads nothing any more), nothing written to
the failed directories, and ``exit_reason`` says why (``millrace broker start`` exits 1).

Shutdown (SIGTERM or SIGINT): first a *controlled shutdown* (``controlled.shutdown.enable``):
ask the controller (ControlledShutdown) to move leadership away and stop this broker's
followers, retrying ``controlled.shutdown.max.retries`` times; then stop accepting and close
connections, stop the fetchers and periodic tasks, write the high-watermark checkpoints,
flush and close every segment and write the recovery point and log start offset checkpoints
with the clean-shutdown marker, then close the ZooKeeper session (which removes the
broker's ephemeral znodes).

Metrics (``metrics.http.listener``): the Prometheus endpoint starts first, so a scrape shows
the broker starting (``BrokerState``), and stops last; its HTTP server runs in its own thread
and reads every figure on the event loop (:mod:`broker.metrics.endpoint`).

Concurrency: everything runs on one asyncio event loop; blocking ZooKeeper calls go through
the kazoo bridge, fsyncs of periodic flushes through ``asyncio.to_thread``; the metrics
endpoint's thread only submits its snapshot to the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from broker.api.context import BrokerServices
from broker.api.dispatcher import Dispatcher
from broker.api.forwarding import FORWARDING_CLIENT_SUFFIX
from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.config_def import ConfigError
from broker.controller.channel import ControllerChannel
from broker.controller.controller import Controller, LivenessFactory
from broker.controller.liveness import BrokerLivenessWatch
from broker.coordinator.group.coordinator import GroupCoordinator
from broker.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from broker.coordinator.producer_ids import ProducerIdManager
from broker.coordinator.transaction.coordinator import TransactionCoordinator
from broker.coordinator.transaction.markers import TransactionMarkerChannel
from broker.coordinator.transaction.verifier import TransactionVerifier
from broker.log.cleaner.manager import CleanerSettings, LogCleaner
from broker.log.log_dir_failure import LogDirFailureChannel
from broker.log.log_manager import LogManager
from broker.metadata.cache import MetadataCache
from broker.metadata.topic_configs import TopicConfigManager
from broker.metrics.endpoint import MetricsEndpoint
from broker.network.broker_pool import BrokerPool
from broker.network.client import BrokerConnection
from broker.network.socket_server import SocketServer
from broker.protocol import interbroker as _interbroker
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import KafkaError
from broker.protocol.response import ConnectionInfo
from broker.quota.config_follower import QuotaConfigFollower
from broker.quota.manager import ClientQuotas, quota_settings
from broker.replication.alter_isr_manager import IsrWrite
from broker.replication.replica_manager import ReplicaManager
from broker.request_metrics import NOOP_RECORDER, MetricsRecorder, Recorder
from broker.security.authorizer import (
    KAFKA_AUTHORIZER_CLASSES,
    AclAuthorizer,
    parse_super_users,
)
from broker.security.credentials import CredentialCache
from broker.security.listener_security import (
    ListenerSecurity,
    build_listener_security,
    inter_broker_client_security,
    inter_broker_listener,
    listener_protocol,
)
from broker.security.sasl_session import SaslSession
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.client import ZkClient
from kafka_security.client_security import ClientSecurity

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_DRAIN_S = 0.25
# kio-style message classes take kio's NewTypes (i32, BrokerId, ...); built from plain ints
ib: Any = _interbroker


class BrokerState(enum.IntEnum):
    """Kafka's ``BrokerState`` values (the ``kafka.server:type=KafkaServer,name=BrokerState``
    gauge)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


class Broker:
    """One Millrace broker."""

    def __init__(self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.broker_id = config.broker_id
        self.servers: list[SocketServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.zk: ZkClient | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.controller: Controller | None = None
        self.topic_configs: TopicConfigManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.broker_pool: BrokerPool | None = None
        self.forwarding_pool: BrokerPool | None = None
        self.log_cleaner: LogCleaner | None = None
        self.credentials: CredentialCache | None = None
        self.authorizer: AclAuthorizer | None = None
        self.quotas: ClientQuotas | None = None
        self.quota_configs: QuotaConfigFollower | None = None
        self.inter_broker_listener = ""
        self.inter_broker_security: ClientSecurity | None = None
        self.log_dir_failures = LogDirFailureChannel()
        """Where this broker's log directories go offline (KIP-112)."""
        self.exit_reason: str | None = None
        """Set when the broker stops by itself (every log directory failed)."""
        self._fatal = asyncio.Event()
        self.state = BrokerState.NOT_RUNNING
        self.metrics: Recorder = (
            MetricsRecorder() if config.metrics_listener is not None else NOOP_RECORDER
        )
        """The request path's counts (a no-op without ``metrics.http.listener``)."""
        self.metrics_endpoint: MetricsEndpoint | None = None

    async def start(self) -> None:
        cfg = self.config
        self.state = BrokerState.STARTING
        metrics_at = cfg.metrics_listener
        if metrics_at is not None:
            self.metrics_endpoint = MetricsEndpoint(self, *metrics_at)
            self.metrics_endpoint.start()
        # the listeners' security first: a bad key store or JAAS line fails start-up at once
        self.inter_broker_listener = inter_broker_listener(cfg)
        listener_security = {x.name: build_listener_security(cfg, x.name) for x in cfg.listeners}
        self.inter_broker_security = inter_broker_client_security(cfg)
        zk, cluster_id = await self._join_zookeeper()
        self.topic_configs = topic_configs = TopicConfigManager(zk, cfg)
        await topic_configs.load_all()
        await self._recover_logs(cluster_id, topic_configs)
        replica_manager = self._replica_manager(topic_configs)
        metadata = MetadataCache(cluster_id)
        replica_manager.known_partition = lambda tp: (
            metadata.partition(tp.topic, tp.partition) is not None
        )
        self.controller = Controller(
            zk,
            metadata,
            cfg,
            self.broker_id,
            topic_configs,
            channel_factory=functools.partial(
                ControllerChannel, security=self.inter_broker_security
            ),
            liveness_factory=self._liveness_factory(),
        )
        credentials = await self._start_access_control(zk)
        producer_ids = ProducerIdManager(lambda: zk.allocate_producer_id_block(self.broker_id))
        self.group_coordinator = GroupCoordinator(
            cfg, self.clock, self.broker_id, metadata, replica_manager, self.controller
        )
        replica_manager.role_listeners.append(self.group_coordinator.on_role_change)
        txn_coordinator = self._transactions(metadata, producer_ids)
        services = BrokerServices(
            broker_id=self.broker_id,
            config=cfg,
            clock=self.clock,
            metadata=metadata,
            replica_manager=replica_manager,
            controller=self.controller,
            topic_configs=topic_configs,
            producer_ids=producer_ids,
            group_coordinator=self.group_coordinator,
            txn_coordinator=txn_coordinator,
            forwarder=self._forwarding_pool(metadata),
            own_broker_epoch=zk.registered_broker_epoch,
            authorizer=self.authorizer,
            credentials=credentials,
            zk_security=zk,
            quotas=self.quotas,
            metrics=self.metrics,
        )
        dispatcher = Dispatcher(services, self.inter_broker_listener)
        self.controller.set_local_handler(dispatcher.handle_local)
        assert self.broker_pool is not None
        self.broker_pool.set_local_handler(dispatcher.handle_local)
        await self._start_listeners(dispatcher, listener_security, credentials)
        replica_manager.start()
        self.group_coordinator.start()
        txn_coordinator.start()
        await self._register(zk)
        await topic_configs.start()
        await self.controller.startup()
        self._start_periodic_tasks()
        self._forget_deleted_topics_metrics()
        self.state = BrokerState.RUNNING
        log.info("broker %d started (cluster %s)", self.broker_id, cluster_id)

    async def _join_zookeeper(self) -> tuple[ZkClient, str]:
        """Connect to ZooKeeper; return the client and the cluster id (created if none),
        this broker's id generated if not configured."""
        cfg = self.config
        self.zk = zk = ZkClient(
            cfg["zookeeper.connect"],
            session_timeout_ms=cfg["zookeeper.session.timeout.ms"],
            connection_timeout_ms=cfg["zookeeper.connection.timeout.ms"],
        )
        await zk.start()
        await zk.ensure_persistent_paths()
        cluster_id = await zk.get_or_create_cluster_id()
        if self.broker_id < 0:
            if not cfg["broker.id.generation.enable"]:
                raise SystemExit("broker.id is not set and broker.id.generation.enable=false")
            self.broker_id = await zk.generate_broker_id(cfg["reserved.broker.max.id"])
        return zk, cluster_id

    async def _recover_logs(self, cluster_id: str, topic_configs: TopicConfigManager) -> None:
        """Open (and recover) the log directories, delete stray logs, start the cleaner."""
        cfg = self.config
        self.state = BrokerState.RECOVERY
        self.log_manager = LogManager(
            cfg.log_dirs,
            cfg.default_log_config(),
            clock=self.clock,
            broker_id=self.broker_id,
            cluster_id=cluster_id,
            failure_channel=self.log_dir_failures,
        )
        await asyncio.to_thread(self.log_manager.startup, topic_configs.log_config_for)
        self.state = BrokerState.STARTING
        await self._delete_stray_logs()
        self._start_log_cleaner(topic_configs)

    def _replica_manager(self, topic_configs: TopicConfigManager) -> ReplicaManager:
        """The replica manager (following topic config changes)."""
        assert self.log_manager is not None
        self.replica_manager = replica_manager = ReplicaManager(
            self.config,
            self.log_manager,
            clock=self.clock,
            broker_id=self.broker_id,
            alter_isr=self._alter_isr,
            log_dir_event=self._propagate_log_dir_event,
            on_all_log_dirs_offline=self._halt,
            inter_broker_security=self.inter_broker_security,
            metrics=self.metrics,
        )
        topic_configs.add_listener(replica_manager.update_log_config)
        return replica_manager

    async def _start_access_control(self, zk: ZkClient) -> CredentialCache:
        """Start the SCRAM credentials, the client quotas and the ACL authorizer (if any),
        following ZooKeeper; return the credentials."""
        self.credentials = credentials = CredentialCache(zk)
        await credentials.start()
        self.quotas = ClientQuotas(quota_settings(self.config))
        self.quota_configs = QuotaConfigFollower(zk, self.quotas)
        await self.quota_configs.start()
        self.authorizer = self._authorizer(zk)
        if self.authorizer is not None:
            await self.authorizer.start()
        return credentials

    async def _start_listeners(
        self,
        dispatcher: Dispatcher,
        listener_security: dict[str, ListenerSecurity],
        credentials: CredentialCache,
    ) -> None:
        """Open a socket server on every listener."""
        cfg = self.config
        for listener in cfg.listeners:
            security = listener_security[listener.name]
            server = SocketServer(
                listener.host,
                listener.port,
                dispatcher,
                listener_name=listener.name,
                max_request_bytes=cfg["socket.request.max.bytes"],
                max_queued_requests=cfg["queued.max.requests"],
                idle_timeout_s=cfg["connections.max.idle.ms"] / 1000.0,
                ssl_context=security.ssl_context,
                on_connect=self._connection_security(security, credentials),
            )
            await server.start()
            self.servers.append(server)

    async def _register(self, zk: ZkClient) -> None:
        """Register this broker (its advertised listeners and rack) in ZooKeeper."""
        cfg = self.config
        await zk.register_broker(
            znodes.BrokerIdZNode.create(
                self.broker_id,
                [str(x) for x in cfg.advertised_listeners],
                security_protocols={
                    x.name: listener_protocol(cfg, x.name) for x in cfg.advertised_listeners
                },
                rack=cfg["broker.rack"],
            ),
            # a hard-killed previous instance's ephemeral znode lives until its session
            # expires; wait that long before refusing a duplicate id
            wait_s=cfg["zookeeper.session.timeout.ms"] / 1000.0 + 2.0,
        )

    def _forget_deleted_topics_metrics(self) -> None:
        """A topic none of whose partitions is hosted here any more loses its per-topic
        series (as Kafka removes a deleted topic's BrokerTopicMetrics)."""
        metrics, lm, rm = self.metrics, self.log_manager, self.replica_manager
        if not isinstance(metrics, MetricsRecorder) or lm is None or rm is None:
            return

        def forget(tp: TopicPartition) -> None:
            if not any(p.topic == tp.topic for p in rm.partitions):
                metrics.forget_topic(tp.topic)

        lm.deletion_listeners.append(forget)

    def _liveness_factory(self) -> LivenessFactory | None:
        """The controller's watch of broker processes (docs/failover.md), unless
        ``millrace.broker.failure.detection.enable`` is off."""
        if not self.config["millrace.broker.failure.detection.enable"]:
            return None
        security = self.inter_broker_security
        return functools.partial(
            BrokerLivenessWatch, ssl_context=security.ssl_context if security else None
        )

    def _authorizer(self, zk: ZkClient) -> AclAuthorizer | None:
        """``authorizer.class.name``: Kafka's ZooKeeper ACL authorizer (by Kafka's class name)
        or none."""
        cfg = self.config
        name = str(cfg["authorizer.class.name"] or "").strip()
        if not name:
            return None
        if name not in KAFKA_AUTHORIZER_CLASSES:
            raise ConfigError(
                f"Invalid value {name!r} for configuration authorizer.class.name: Millrace "
                f"provides Kafka's ZooKeeper ACL authorizer ({sorted(KAFKA_AUTHORIZER_CLASSES)[0]})"
            )
        return AclAuthorizer(
            zk,
            super_users=parse_super_users(cfg["super.users"]),
            allow_if_no_acl=bool(cfg["allow.everyone.if.no.acl.found"]),
        )

    def _connection_security(
        self, security: ListenerSecurity, credentials: CredentialCache
    ) -> Callable[[ConnectionInfo, asyncio.BaseTransport], None] | None:
        """What a new connection of a secured listener learns: its TLS principal, and for
        SASL its exchange state."""
        if not security.tls and not security.sasl:
            return None
        clock = self.clock

        def on_connect(info: ConnectionInfo, transport: asyncio.BaseTransport) -> None:
            if security.tls:
                ssl_object = transport.get_extra_info("ssl_object")
                der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
                info.principal = security.principal_of_certificate(der)
            if security.sasl:
                info.sasl = SaslSession(
                    security.mechanisms,
                    credentials.get,
                    security.plain_users,
                    reauth_ms=security.reauth_ms,
                    failure_delay_ms=security.failure_delay_ms,
                    clock=clock.monotonic,
                )

        return on_connect

    def _start_log_cleaner(self, topic_configs: TopicConfigManager) -> None:
        """Compaction of ``cleanup.policy=compact`` logs (``log.cleaner.*``)."""
        cfg = self.config
        lm = self.log_manager
        assert lm is not None
        if not cfg["log.cleaner.enable"] or cfg["log.cleaner.threads"] <= 0:
            return
        self.log_cleaner = cleaner = LogCleaner(
            lm.all_logs,
            cfg.log_dirs,
            CleanerSettings(
                threads=cfg["log.cleaner.threads"],
                dedupe_buffer_size=cfg["log.cleaner.dedupe.buffer.size"],
                io_buffer_size=cfg["log.cleaner.io.buffer.size"],
                io_buffer_load_factor=cfg["log.cleaner.io.buffer.load.factor"],
                io_max_bytes_per_second=cfg["log.cleaner.io.max.bytes.per.second"],
                backoff_ms=cfg["log.cleaner.backoff.ms"],
            ),
            clock=self.clock,
        )
        lm.deletion_listeners.append(cleaner.forget)
        topic_configs.add_listener(lambda _topic, _config: cleaner.wake())
        cleaner.start()

    def _forwarding_pool(self, metadata: MetadataCache) -> BrokerPool:
        """Connections that forward controller-bound admin requests (api/forwarding.py); the
        client id marks them so the controller never forwards them again."""
        self.forwarding_pool = BrokerPool(
            self.broker_id,
            _address_in(metadata),
            client_id=f"broker-{self.broker_id}{FORWARDING_CLIENT_SUFFIX}",
            security=self.inter_broker_security,
            # CreateTopics and DeleteTopics wait for the cluster's metadata on the controller
            request_timeout_s=self.config["request.timeout.ms"] / 1000.0 + 30.0,
        )
        return self.forwarding_pool

    def _transactions(
        self, metadata: MetadataCache, producer_ids: ProducerIdManager
    ) -> TransactionCoordinator:
        """The transaction coordinator, its marker channel and the partition leaders'
        verification of transactional writes, over one pool of inter-broker connections."""
        assert self.replica_manager is not None and self.controller is not None
        cfg = self.config
        rm = self.replica_manager

        self.broker_pool = pool = BrokerPool(
            self.broker_id,
            _address_in(metadata),
            client_id=f"broker-{self.broker_id}-transactions",
            security=self.inter_broker_security,
            request_timeout_s=cfg["request.timeout.ms"] / 1000.0,
        )
        markers = TransactionMarkerChannel(metadata, pool)
        self.txn_coordinator = coordinator = TransactionCoordinator(
            cfg, self.clock, self.broker_id, metadata, rm, producer_ids, self.controller, markers
        )
        rm.role_listeners.append(coordinator.on_role_change)
        rm.transactions.verifier = TransactionVerifier(self.broker_id, metadata, coordinator, pool)
        group = self.group_coordinator
        assert group is not None

        def on_marker(tp: TopicPartition, producer_id: int, commit: bool) -> None:
            if tp.topic == OFFSETS_TOPIC:
                group.complete_transaction(tp.partition, producer_id, commit)

        rm.transactions.marker_listeners.append(on_marker)
        return coordinator

    async def _alter_isr(
        self, writes: Sequence[IsrWrite], controller_epoch: int
    ) -> list[int | None]:
        """Leaders' ISR changes: conditional writes of the partition states (pipelined), then
        one ``/isr_change_notification`` naming the written partitions, so the controller
        propagates them."""
        assert self.zk is not None
        versions = await self.zk.update_partition_states(
            [
                (
                    w.tp,
                    znodes.PartitionState(
                        leader=w.leader,
                        leader_epoch=w.leader_epoch,
                        isr=w.isr,
                        controller_epoch=controller_epoch,
                    ),
                    w.zk_version,
                )
                for w in writes
            ]
        )
        written = [w.tp for w, v in zip(writes, versions, strict=True) if v is not None]
        if written:
            await self.zk.add_isr_change_notification(written)
        return versions

    async def _propagate_log_dir_event(self) -> None:
        """A log directory of this broker failed: tell the controller (Kafka's
        ``propagateLogDirEvent``)."""
        assert self.zk is not None
        name = await self.zk.propagate_log_dir_event(self.broker_id)
        log.info("wrote log dir event notification %s", name)

    def _halt(self, reason: str) -> None:
        """Stop the broker because it cannot go on (every log directory failed)."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self._fatal.set()

    async def _delete_stray_logs(self) -> None:
        """Logs of topics that no longer exist, or of partitions not assigned here."""
        assert self.log_manager is not None and self.zk is not None
        assignments: dict[str, dict[int, list[int]] | None] = {}
        for tp in list(self.log_manager.all_logs()):
            if tp.topic not in assignments:
                topic = await self.zk.get_topic(tp.topic)
                deleting = tp.topic in await self.zk.get_topics_marked_for_deletion()
                assignments[tp.topic] = None if topic is None or deleting else topic.assignment
            assignment = assignments[tp.topic]
            if assignment is None or self.broker_id not in assignment.get(tp.partition, []):
                log.info("deleting stray log %s", tp)
                self.log_manager.delete_log(tp)

    def _start_periodic_tasks(self) -> None:
        assert self.log_manager is not None and self.replica_manager is not None
        cfg = self.config
        lm = self.log_manager
        rm = self.replica_manager

        async def retention() -> None:
            lm.cleanup()

        async def flush() -> None:
            await asyncio.to_thread(lm.flush_dirty)

        async def checkpoints() -> None:
            await asyncio.to_thread(lm.checkpoint)
            rm.checkpoint_high_watermarks()

        self._tasks = [
            asyncio.create_task(self._every(cfg["log.retention.check.interval.ms"], retention)),
            asyncio.create_task(self._every(cfg["log.flush.scheduler.interval.ms"], flush)),
            asyncio.create_task(
                self._every(cfg["log.flush.offset.checkpoint.interval.ms"], checkpoints)
            ),
        ]

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await job()
            except Exception:
                log.exception("periodic task failed")

    @property
    def port(self) -> int:
        return self.servers[0].port if self.servers else -1

    async def shutdown(self) -> None:
        log.info(
            "broker %d shutting down%s",
            self.broker_id,
            f" ({self.exit_reason})" if self.exit_reason else "",
        )
        if (
            self.config["controlled.shutdown.enable"]
            and self.controller is not None
            and self.exit_reason is None
        ):
            self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
            try:
                await self._controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown failed; shutting down anyway")
        self.state = BrokerState.SHUTTING_DOWN
        await self._stop_serving()
        await self._stop_state()
        self.state = BrokerState.NOT_RUNNING
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        log.info("broker %d stopped", self.broker_id)

    async def _stop_serving(self) -> None:
        """Stop the listeners, the periodic tasks, the coordinators, the inter-broker pools,
        the log cleaner, the replica manager and the controller."""
        for server in self.servers:
            await server.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.txn_coordinator is not None:
            await self.txn_coordinator.shutdown()
        for pool in (self.broker_pool, self.forwarding_pool):
            if pool is not None:
                await pool.close()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.log_cleaner is not None:
            await self.log_cleaner.stop()
        if self.replica_manager is not None:
            await self.replica_manager.shutdown()
        if self.controller is not None:
            await self.controller.shutdown()

    async def _stop_state(self) -> None:
        """Stop following ZooKeeper (topic configs, credentials, quotas, ACLs), checkpoint the
        high watermarks, close the logs and the ZooKeeper session."""
        if self.topic_configs is not None:
            await self.topic_configs.stop()
        if self.credentials is not None:
            await self.credentials.stop()
        if self.quota_configs is not None:
            await self.quota_configs.stop()
        if self.authorizer is not None:
            await self.authorizer.stop()
        if self.replica_manager is not None:
            self.replica_manager.checkpoint_high_watermarks()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.zk is not None:
            await self.zk.close()

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away before stopping (Kafka's
        ``controlledShutdown``): retried ``controlled.shutdown.max.retries`` times while the
        controller cannot be reached or partitions remain led here."""
        assert self.zk is not None and self.controller is not None
        cfg = self.config
        zk = self.zk
        backoff = cfg["controlled.shutdown.retry.backoff.ms"] / 1000.0
        attempts = cfg["controlled.shutdown.max.retries"] + 1
        if len(await zk.get_broker_ids()) <= 1:
            return  # nobody to hand leadership to
        broker_epoch = await zk.get_broker_epoch(self.broker_id)
        for attempt in range(1, attempts + 1):
            remaining: list[object] | None = None
            controller_id = await zk.get_controller()
            try:
                if controller_id == self.broker_id:
                    remaining = list(
                        await self.controller.controlled_shutdown(
                            self.broker_id, broker_epoch if broker_epoch is not None else -1
                        )
                    )
                elif controller_id is not None:
                    node = await zk.get_broker(controller_id)
                    if node is not None and node.parsed_endpoints:
                        ep = node.endpoint(self.inter_broker_listener) or node.parsed_endpoints[0]
                        conn = BrokerConnection(
                            ep.host,
                            ep.port,
                            client_id=f"broker-{self.broker_id}",
                            request_timeout_s=cfg["controller.socket.timeout.ms"] / 1000.0,
                            security=self.inter_broker_security,
                        )
                        try:
                            await conn.connect()
                            response = await conn.request(
                                ApiKey.CONTROLLED_SHUTDOWN,
                                3,
                                ib.ControlledShutdownRequest(
                                    broker_id=self.broker_id,
                                    broker_epoch=broker_epoch if broker_epoch is not None else -1,
                                ),
                            )
                        finally:
                            await conn.close()
                        if int(response.error_code) == 0:
                            remaining = list(response.remaining_partitions)
                        else:
                            log.warning(
                                "controlled shutdown refused: error %d", int(response.error_code)
                            )
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                log.warning("controlled shutdown attempt %d failed: %s", attempt, exc)
            if remaining is not None and not remaining:
                log.info("controlled shutdown of broker %d succeeded", self.broker_id)
                await self._await_leadership_moved()
                # keep answering a moment longer: clients in the middle of a request get
                # NOT_LEADER_OR_FOLLOWER and new metadata from us, instead of a refused
                # connection they would only recover from on their next periodic refresh
                await asyncio.sleep(CONTROLLED_SHUTDOWN_DRAIN_S)
                return
            if remaining:
                log.warning(
                    "controlled shutdown attempt %d: %d partitions still led here",
                    attempt,
                    len(remaining),
                )
            if attempt < attempts:
                await asyncio.sleep(backoff)
        log.warning("controlled shutdown did not complete; proceeding with an unclean shutdown")

    async def _await_leadership_moved(self, timeout_s: float = 5.0) -> None:
        """Until the controller's StopReplica has reached this broker (no replicated
        partition is led or followed here any more)."""
        assert self.replica_manager is not None
        rm = self.replica_manager
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not any(len(p.replicas) > 1 for p in rm.partitions.values()):
                return
            await asyncio.sleep(0.01)

    async def run_until(self, stop: asyncio.Event) -> None:
        """Start, run until ``stop`` is set or the broker must stop by itself
        (``exit_reason``), then shut down."""
        try:
            await self.start()
            waits = [
                asyncio.create_task(stop.wait(), name="stop-signal"),
                asyncio.create_task(self._fatal.wait(), name="fatal-error"),
            ]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()
        finally:
            await self.shutdown()


def _address_in(metadata: MetadataCache) -> Callable[[int], tuple[str, int] | None]:
    """A broker's (host, port) from the metadata cache, for the inter-broker pools."""

    def address_of(broker_id: int) -> tuple[str, int] | None:
        broker = metadata.broker(broker_id)
        return None if broker is None else (broker.host, broker.port)

    return address_of
