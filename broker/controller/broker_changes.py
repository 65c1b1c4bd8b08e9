"""The controller's handling of brokers that start, fail and restart (Kafka's
``processBrokerChange``, ``onBrokerFailure``, ``onBrokerStartup``; KIP-380's broker epochs).

Theory of operation. The live brokers are ``/brokers/ids``; a broker's epoch is the czxid of
its registration. A change of the children is an event: brokers that went are failed (their
replicas offline, the partitions they led elect another in-sync leader, they leave every
ISR), new brokers are started (told the cluster's metadata and their partitions; their
replicas follow and rejoin the ISR once caught up), and a broker whose epoch changed
(restarted, or its session expired, in between two reads) is both: failed *while not
counted live*, so that it is neither re-elected nor kept in an ISR on the strength of what
it held before, then started.

A bounce during a controller fail-over is seen by nobody: the new controller reads the new
registration. :func:`restarted_since_last_write` finds such brokers afterwards, and
:meth:`BrokerChanges.fail_over_unseen_bounces` handles them as bounces.

Concurrency: the controller's event task only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.controller.context import ControllerContext
from broker.controller.liveness import BrokerLivenessWatch
from broker.controller.requests import ControllerRequestSender
from broker.controller.state_driver import StateDriver
from broker.controller.state_machines import ReplicaState
from broker.controller.topic_deletion import TopicDeletionManager
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.interface import ZkOperations

log = logging.getLogger("broker.controller.controller")


def restarted_since_last_write(
    states: Mapping[TopicPartition, znodes.PartitionState],
    state_zxids: Mapping[TopicPartition, int],
    broker_epochs: Mapping[int, int],
) -> set[int]:
    """The live brokers (``broker_epochs``) registered after the last write (``state_zxids``,
    -1: unknown, skipped) of a partition state whose ISR holds them: they restarted (or lost
    their session) since that leader/ISR was decided. A broker epoch and a state's zxid are
    zxids of the same ZooKeeper ensemble, so they compare. (Found by the fault harness: a
    leader restarted during a fail-over, whose recovery had cut its log, kept leading and
    its followers truncated acknowledged records to match it.)"""
    bounced: set[int] = set()
    for tp, st in states.items():
        written = state_zxids.get(tp, -1)
        if written < 0:
            continue
        for broker_id in st.isr:
            epoch = broker_epochs.get(broker_id)
            if epoch is not None and epoch > written:
                bounced.add(broker_id)
    return bounced


class BrokerChanges:
    """Live brokers and what their arrivals, failures and bounces change."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkOperations,
        driver: StateDriver,
        requests: ControllerRequestSender,
        deletion: TopicDeletionManager,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.driver = driver
        self.requests = requests
        self.deletion = deletion
        self.liveness: BrokerLivenessWatch | None = None
        """Set by the controller while it is active (None: detection by session expiry only)."""

    async def fail_over_unseen_bounces(self) -> None:
        """At fail-over, once the partition states are loaded: the brokers that restarted
        while no controller watched are handled as bounces."""
        ctx = self.ctx
        bounced = restarted_since_last_write(ctx.states, ctx.state_zxids, ctx.broker_epochs)
        if bounced:
            log.warning(
                "controller: brokers %s restarted after their partitions' last leader/ISR "
                "change (while no controller was watching): handled as failed, then started",
                sorted(bounced),
            )
            await self.on_bounce(bounced)

    async def refresh_live_brokers(self, at_failover: bool = False) -> tuple[set[int], set[int]]:
        """Re-read ``/brokers/ids``; returns (new or bounced brokers, dead or bounced). A
        fenced broker's registration (the epoch it was fenced at) is not counted live; a new
        registration of it (a restart) is. ``at_failover``: this controller just took over
        (the registrations it finds are not new: see :meth:`_sync_liveness`)."""
        ctx = self.ctx
        ids = set(await self.zk.get_broker_ids())
        new: set[int] = set()
        dead = set(ctx.live_brokers) - ids
        for broker_id in set(ctx.fenced) - ids:
            del ctx.fenced[broker_id]  # its session expired at last
        for broker_id in sorted(ids):
            await self._read_registration(broker_id, new, dead)
        for broker_id in dead - new:
            ctx.live_brokers.pop(broker_id, None)
            ctx.broker_epochs.pop(broker_id, None)
        for broker_id in dead:
            ctx.shutting_down.discard(broker_id)
        self._update_channel(new, dead)
        self._sync_liveness(fresh=set() if at_failover else new)
        return new, dead

    async def _read_registration(self, broker_id: int, new: set[int], dead: set[int]) -> None:
        """Read broker ``broker_id``'s registration: record it live (unless fenced), adding
        it to ``new`` if it is, and to ``dead`` if it went or bounced (both then)."""
        ctx = self.ctx
        epoch = await self.zk.get_broker_epoch(broker_id)
        node = await self.zk.get_broker(broker_id)
        if node is None or epoch is None:
            if broker_id in ctx.live_brokers:
                dead.add(broker_id)
            return
        if self._still_fenced(broker_id, epoch, node):
            return
        if broker_id in ctx.live_brokers and ctx.broker_epochs.get(broker_id) != epoch:
            dead.add(broker_id)  # bounced: treat as a failure then a start-up
            new.add(broker_id)
        elif broker_id not in ctx.live_brokers:
            new.add(broker_id)
        ctx.live_brokers[broker_id] = node
        ctx.broker_epochs[broker_id] = epoch

    def _still_fenced(self, broker_id: int, epoch: int, node: znodes.BrokerIdZNode) -> bool:
        """Whether the registration (``epoch``) is the one the broker was fenced at (then it
        stays watched as dead); a new registration of a fenced broker (a restart) unfences
        it."""
        ctx = self.ctx
        fenced_at = ctx.fenced.get(broker_id)
        if fenced_at is None:
            return False
        if fenced_at == epoch:
            if self.liveness is not None:
                host, port = ctx.address(node)
                self.liveness.watch(broker_id, epoch, host, port, dead=True)
            return True
        del ctx.fenced[broker_id]  # restarted: a new registration
        return False

    def _update_channel(self, new: set[int], dead: set[int]) -> None:
        """The request channel drops the dead (and bounced) brokers, then adds the new."""
        channel = self.requests.channel
        if channel is None:
            return
        for broker_id in dead:
            channel.remove_broker(broker_id)
        for broker_id in sorted(new):
            host, port = self.ctx.address(self.ctx.live_brokers[broker_id])
            channel.add_broker(broker_id, host, port)

    def _sync_liveness(self, fresh: set[int] | frozenset[int] = frozenset()) -> None:
        """Watch every live broker but the controller's own, and the fenced ones. The
        ``fresh`` registrations (made while this controller is active) get the watch's grace
        period: a Kafka broker registers before it listens. The ones found at fail-over do
        not: one of them may be the dead controller, never to be seen listening."""
        liveness = self.liveness
        if liveness is None:
            return
        ctx = self.ctx
        for broker_id, node in ctx.live_brokers.items():
            if broker_id != self.requests.controller_id:
                host, port = ctx.address(node)
                epoch = ctx.broker_epochs[broker_id]
                liveness.watch(broker_id, epoch, host, port, grace=broker_id in fresh)
        liveness.keep_only(
            (set(ctx.live_brokers) | set(ctx.fenced)) - {self.requests.controller_id}
        )

    async def on_unreachable(self, broker_id: int, epoch: int) -> None:
        """The liveness watch found the broker's process gone (docs/failover.md): if its
        registration still has ``epoch``, fence it and fail it over now, as the expiry of its
        session would later; a changed registration goes the broker-change way."""
        ctx = self.ctx
        if ctx.broker_epochs.get(broker_id) != epoch or broker_id == self.requests.controller_id:
            return
        if await self.zk.get_broker_epoch(broker_id) != epoch:
            await self.on_change()
            return
        log.warning(
            "controller: broker %d (epoch %d) died (its port refuses connections): fenced, "
            "its leaderships move now",
            broker_id,
            epoch,
        )
        ctx.fenced[broker_id] = epoch
        ctx.live_brokers.pop(broker_id, None)
        ctx.broker_epochs.pop(broker_id, None)
        ctx.shutting_down.discard(broker_id)
        ctx.replicas_on_offline_dirs.pop(broker_id, None)
        if self.requests.channel is not None:
            self.requests.channel.remove_broker(broker_id)
        await self.on_failure({broker_id})

    async def on_reachable(self, broker_id: int, epoch: int) -> None:
        """A fenced broker answers again: if its registration is still the fenced one, the
        report was false (the process lives): start it again (it follows, catches up and
        rejoins the ISR). A new registration goes the broker-change way."""
        ctx = self.ctx
        if ctx.fenced.get(broker_id) != epoch:
            return
        node = await self.zk.get_broker(broker_id)
        if node is None or await self.zk.get_broker_epoch(broker_id) != epoch:
            await self.on_change()
            return
        log.warning(
            "controller: fenced broker %d (epoch %d) is alive: started again", broker_id, epoch
        )
        del ctx.fenced[broker_id]
        ctx.live_brokers[broker_id] = node
        ctx.broker_epochs[broker_id] = epoch
        if self.requests.channel is not None:
            host, port = ctx.address(node)
            self.requests.channel.add_broker(broker_id, host, port)
        self._sync_liveness()
        await self.on_startup({broker_id})

    async def on_change(self) -> None:
        """``/brokers/ids`` changed: fail the brokers that went, start the new ones, and
        fail then start the ones that bounced (a new broker epoch)."""
        new, dead = await self.refresh_live_brokers()
        for broker_id in new | dead:  # a restarted broker reports its offline dirs again
            self.ctx.replicas_on_offline_dirs.pop(broker_id, None)
        bounced = new & dead
        if bounced:
            log.info("controller: brokers %s restarted", sorted(bounced))
            await self.on_bounce(bounced)
            new, dead = new - bounced, dead - bounced
        if dead:
            log.info("controller: brokers %s failed", sorted(dead))
            await self.on_failure(dead)
        if new:
            log.info("controller: brokers %s started", sorted(new))
            await self.on_startup(new)

    async def on_bounce(self, bounced: set[int]) -> None:
        """Brokers that restarted: as Kafka's controller does with a bounced broker, run
        the failure step without them among the live brokers (leaders elected elsewhere,
        out of every ISR), then the start-up step (they follow and catch up)."""
        ctx = self.ctx
        saved = {b: (ctx.live_brokers[b], ctx.broker_epochs[b]) for b in bounced}
        for b in bounced:
            del ctx.live_brokers[b]
            del ctx.broker_epochs[b]
        try:
            await self.on_failure(bounced)
        finally:
            for b, (node, epoch) in saved.items():
                ctx.live_brokers[b] = node
                ctx.broker_epochs[b] = epoch
        await self.on_startup(bounced)

    async def on_failure(self, dead: set[int]) -> None:
        """Kafka's ``onBrokerFailure``: the brokers' replicas offline, their partitions led
        elsewhere, out of every ISR."""
        ctx = self.ctx
        self.driver.replicas_to(
            [
                (tp, r)
                for tp, a in ctx.assignments.items()
                for r in a.replicas
                if r in dead
                and ctx.replica_states.state((tp, r)) is not ReplicaState.NonExistentReplica
            ],
            ReplicaState.OfflineReplica,
        )
        self.driver.mark_offline(tp for tp, st in ctx.states.items() if st.leader in dead)
        initialized, elected = await self.driver.trigger_online()
        just_elected = set(elected)  # thousands of partitions: no list lookups
        shrunk = await self.driver.remove_from_isr(
            tp
            for tp, st in ctx.states.items()
            if tp not in just_elected and any(r in dead for r in st.isr)
        )
        changed = sorted({*elected, *shrunk})
        self.requests.leader_and_isr(changed + initialized, new=initialized)
        # as Kafka's OfflineReplica transitions: every partition with a replica on a dead
        # broker, so its offline replicas are current everywhere
        hosted = {tp for tp, a in ctx.assignments.items() if any(r in dead for r in a.replicas)}
        self.requests.update_metadata(sorted(hosted | {*changed, *initialized}))

    async def on_startup(self, new: set[int]) -> None:
        """Kafka's ``onBrokerStartup``: metadata to and about the brokers, their replicas
        online (as followers that catch up), their partitions' state sent to them."""
        ctx = self.ctx
        self.requests.update_metadata(None, brokers=sorted(new))
        self.requests.update_metadata([], brokers=sorted(set(ctx.live_brokers) - new))
        hosted = [tp for tp, a in ctx.assignments.items() if any(r in new for r in a.replicas)]
        self.driver.replicas_started(
            [(tp, r) for tp in hosted for r in ctx.assignments[tp].replicas if r in new],
            ctx.live_brokers,
        )
        initialized, changed = await self.driver.trigger_online()
        self.requests.leader_and_isr(changed)
        changed_set = set(changed)
        self.requests.leader_and_isr(
            [tp for tp in hosted if tp not in changed_set], only=new, new=initialized
        )
        # as Kafka's OnlineReplica transitions: the new broker's replicas are online again
        self.requests.update_metadata(sorted({*changed, *initialized, *hosted}))
        await self.deletion.resume()
