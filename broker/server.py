"""The broker process: wires the services together, runs them, and shuts them down cleanly.

Start-up order: connect to ZooKeeper and create the persistent paths; read or create the
cluster id; take ``broker.id`` (or generate one from ``/brokers/seqid``); load and recover
the logs; register the ephemeral ``/brokers/ids/<id>`` (a duplicate id refuses to start);
run the controller election and bring this broker's partitions online; delete stray logs of
topics that were deleted while the broker was down; then open the listeners and start the
periodic tasks (retention, flush, checkpoints, producer expiry).

Shutdown (SIGTERM or SIGINT): stop accepting and close connections, stop the periodic tasks,
write the high-watermark checkpoints, flush and close every segment and write the recovery
point and log start offset checkpoints with the clean-shutdown marker, then close the
ZooKeeper session (which removes the broker's ephemeral znodes).

Concurrency: everything runs on one asyncio event loop; blocking ZooKeeper calls go through
the kazoo bridge, fsyncs of periodic flushes through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from broker.api.context import BrokerServices
from broker.api.dispatcher import Dispatcher
from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.controller import znodes
from broker.controller.controller import Controller
from broker.controller.zk_client import ZkClient
from broker.coordinator.producer_ids import ProducerIdManager
from broker.log.log_manager import LogManager
from broker.metadata.cache import MetadataCache
from broker.network.server import KafkaServer
from broker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class Broker:
    """One Millrace broker."""

    def __init__(self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.broker_id = config.broker_id
        self.servers: list[KafkaServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.zk: ZkClient | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.controller: Controller | None = None

    async def start(self) -> None:
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
        topic_overrides = {
            name: await zk.get_topic_config(name) for name in await zk.get_all_topics()
        }
        default = cfg.default_log_config()

        def topic_config(topic: str):  # type: ignore[no-untyped-def]
            try:
                return default.with_overrides(topic_overrides.get(topic, {}))
            except ValueError:
                return default

        self.log_manager = LogManager(
            cfg.log_dirs,
            default,
            clock=self.clock,
            broker_id=self.broker_id,
            cluster_id=cluster_id,
        )
        await asyncio.to_thread(self.log_manager.startup, topic_config)
        self.replica_manager = ReplicaManager(
            cfg, self.log_manager, clock=self.clock, broker_id=self.broker_id
        )
        metadata = MetadataCache(cluster_id)
        await zk.register_broker(
            znodes.BrokerIdZNode.create(
                self.broker_id,
                [str(x) for x in cfg.advertised_listeners],
                security_protocols={x.name: "PLAINTEXT" for x in cfg.advertised_listeners},
                rack=cfg["broker.rack"],
            ),
            # a hard-killed previous instance's ephemeral znode lives until its session
            # expires; wait that long before refusing a duplicate id
            wait_s=cfg["zookeeper.session.timeout.ms"] / 1000.0 + 2.0,
        )
        self.controller = Controller(zk, metadata, self.replica_manager, cfg, self.broker_id)
        await self.controller.startup()
        self._delete_stray_logs(metadata)
        producer_ids = ProducerIdManager(lambda: zk.allocate_producer_id_block(self.broker_id))
        services = BrokerServices(
            broker_id=self.broker_id,
            config=cfg,
            clock=self.clock,
            metadata=metadata,
            replica_manager=self.replica_manager,
            controller=self.controller,
            producer_ids=producer_ids,
        )
        dispatcher = Dispatcher(services)
        for listener in cfg.listeners:
            server = KafkaServer(
                listener.host,
                listener.port,
                dispatcher,
                listener_name=listener.name,
                max_request_bytes=cfg["socket.request.max.bytes"],
                max_queued_requests=cfg["queued.max.requests"],
                idle_timeout_s=cfg["connections.max.idle.ms"] / 1000.0,
            )
            await server.start()
            self.servers.append(server)
        self._start_periodic_tasks()
        log.info("broker %d started (cluster %s)", self.broker_id, cluster_id)

    def _delete_stray_logs(self, metadata: MetadataCache) -> None:
        assert self.log_manager is not None and self.replica_manager is not None
        for tp in list(self.log_manager.all_logs()):
            topic = metadata.topic(tp.topic)
            if topic is None or tp.partition not in topic.partitions:
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
        log.info("broker %d shutting down", self.broker_id)
        for server in self.servers:
            await server.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.replica_manager is not None:
            self.replica_manager.checkpoint_high_watermarks()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.zk is not None:
            await self.zk.close()
        log.info("broker %d stopped", self.broker_id)

    async def run_until(self, stop: asyncio.Event) -> None:
        try:
            await self.start()
            await stop.wait()
        finally:
            await self.shutdown()
