"""Planning an exactly-once write on the driver (``docs/exactly-once.md``, step 1).

Spark creates a writer on both sides of a write: in the Python process that plans the batch
(the writer is then pickled into the tasks) and, for a streaming write, again in the process
that commits it. :func:`open_sink` is what both need (the sink's id, read or made; the brokers
checked: transaction APIs, ``transaction.max.timeout.ms``, two-phase commit).
:func:`plan_batch` is the planning side's alone, done when the writer is pickled for the
tasks: a batch the log holds but has not committed is examined (which of its Spark
partitions must be written again), and the sink's leftover transactions are fenced (never on
the commit side, where the batch's own transactions are open and not yet recorded).

The log is only read here; every change to it is the committer's (step 3). The brokers'
answers that do not change (API versions, limits) are cached per bootstrap for a minute, so a
one-second trigger does not ask them every batch.

Concurrency: called on one driver thread at a time; the cache is guarded by a lock.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from spark_connector.exactly_once.settings import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    ExactlyOnce,
    ExactlyOnceError,
    Rewrite,
    SinkOptions,
)
from spark_connector.exactly_once.sink_log import (
    COMMITTED,
    DONE,
    FAILED,
    LOST,
    OPEN,
    BatchRecord,
    SinkLog,
    TaskEntry,
)
from spark_connector.kafka.markers import ABORT, COMMIT, marker_outcome
from spark_connector.kafka.transactions import TransactionState, TxnClient, TxnError

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = [
    "BrokerFacts",
    "broker_facts",
    "entry_outcome",
    "fence_leftovers",
    "open_sink",
    "plan_batch",
    "plan_rewrite",
]

log = logging.getLogger(__name__)

_FACTS_TTL_S = 60.0
_facts: dict[str, tuple[float, BrokerFacts]] = {}
_facts_lock = threading.Lock()


class BrokerFacts:
    """What the brokers offer the sink: missing transaction APIs, ``transaction.max.timeout.
    ms`` (None: not told), and two-phase commit (KIP-939)."""

    __slots__ = ("max_timeout_ms", "missing", "two_phase")

    def __init__(self, missing: list[str], max_timeout_ms: int | None, two_phase: bool) -> None:
        self.missing = missing
        self.max_timeout_ms = max_timeout_ms
        self.two_phase = two_phase


def broker_facts(client: TxnClient, bootstrap: str) -> BrokerFacts:
    """The brokers' :class:`BrokerFacts` (cached a minute per bootstrap)."""
    now = time.monotonic()
    with _facts_lock:
        cached = _facts.get(bootstrap)
        if cached is not None and cached[0] > now:
            return cached[1]
    missing = client.check_support()
    raw = client.broker_config("transaction.max.timeout.ms") if not missing else None
    facts = BrokerFacts(
        missing,
        int(raw) if raw is not None and raw.strip().lstrip("-").isdigit() else None,
        not missing and client.supports_two_phase(),
    )
    with _facts_lock:
        _facts[bootstrap] = (now + _FACTS_TTL_S, facts)
    return facts


def _timeout(opts: SinkOptions, facts: BrokerFacts) -> int:
    """The transaction timeout to use: the option, checked against the brokers' maximum
    (the default is lowered to it)."""
    limit = facts.max_timeout_ms
    if limit is None or opts.timeout_ms <= limit:
        return opts.timeout_ms
    if opts.timeout_set:
        raise ExactlyOnceError(
            f"option 'kafka.transaction.timeout.ms' is {opts.timeout_ms}, above the brokers' "
            f"transaction.max.timeout.ms ({limit}): set kafka.transaction.timeout.ms to at most "
            f"{limit}, or raise transaction.max.timeout.ms on the brokers"
        )
    log.info(
        "millrace sink: the brokers' transaction.max.timeout.ms is %d: using it as the "
        "transaction timeout (the default is %d)",
        limit,
        DEFAULT_TRANSACTION_TIMEOUT_MS,
    )
    return limit


def entry_outcome(client: TxnClient, task: TaskEntry, state: TransactionState | None) -> str:
    """Where a recorded open transaction stands: ``DONE`` (committed, or committing),
    ``OPEN`` (still open, ours), ``LOST`` (aborted, fenced, or gone). When its id has moved on
    to a newer producer since, the coordinator cannot tell how it ended: the markers on its
    output partitions do (:func:`~spark_connector.kafka.markers.marker_outcome`)."""
    assert task.txn is not None
    if state is not None and state.holds(task.txn):
        # PrepareAbort, CompleteAbort, Empty: aborted
        return _COORDINATOR_OUTCOMES.get(state.state, LOST)
    if state is None or not state.state or not task.outputs:
        return LOST
    moved_on = state.producer_id != task.txn.producer_id or (
        state.producer_epoch > task.txn.producer_epoch
    )
    if not moved_on:
        return LOST
    return _markers_outcome(client, task)


_COORDINATOR_OUTCOMES = {"CompleteCommit": DONE, "PrepareCommit": DONE, "Ongoing": OPEN}
"""The outcome of a recorded transaction the coordinator still holds, by its state (any
other state: aborted, ``LOST``)."""


def _markers_outcome(client: TxnClient, task: TaskEntry) -> str:
    """``DONE`` or ``LOST``, as the markers on the task's output partitions tell (``LOST``
    when none of them can tell)."""
    assert task.txn is not None
    for topic, partition, first, _end in task.outputs:
        try:
            outcome = marker_outcome(
                client.cluster.bootstrap_text,
                topic,
                partition,
                first,
                task.txn.producer_id,
                security=client.cluster.security,
            )
        except RuntimeError as exc:
            log.warning("millrace sink: %s", exc)
            continue
        if outcome == COMMIT:
            return DONE
        if outcome == ABORT:
            return LOST
    return LOST


def plan_rewrite(client: TxnClient, record: BatchRecord) -> Rewrite | None:
    """The Spark partitions of a pending (not committed) ``record`` to write again: those
    whose transaction is lost (aborted by the brokers, fenced); None when every one is still
    open or committed (the committer finishes the batch)."""
    if record.state == COMMITTED:
        return None
    if record.state == FAILED:
        raise ExactlyOnceError(record.error or f"batch {record.batch} failed")
    states = client.describe_many(
        t.txn.transactional_id for t in record.tasks if t.state == OPEN and t.txn is not None
    )
    lost: set[int] = set()
    visible = False
    for task in record.tasks:
        if task.state == DONE:
            visible = True
        elif task.state == LOST:
            lost.add(task.partition)
        elif task.state == OPEN and task.txn is not None:
            outcome = entry_outcome(client, task, states.get(task.txn.transactional_id))
            if outcome == DONE:
                visible = True
            elif outcome == LOST:
                lost.add(task.partition)
    if not lost:
        return None
    if any(p < 0 for p in lost) or not visible:
        # nothing of the batch is visible (or the record is too old to name partitions):
        # write it all again
        if visible:
            raise ExactlyOnceError(
                f"batch {record.batch} was partly committed by an older version of the sink "
                "and part of it was aborted by the brokers; its Spark partitions are not "
                "recorded, so it cannot be completed automatically"
            )
        return Rewrite(record.batch, all=True)
    return Rewrite(record.batch, all=False, partitions=frozenset(lost))


def fence_leftovers(client: TxnClient, eos: ExactlyOnce, keep: set[str], timeout_ms: int) -> int:
    """Fence every open transaction of the sink's tasks not in ``keep`` (dead or losing task
    attempts): InitProducerId aborts it and stops its producer. Returns how many."""
    leftovers = client.list_transactions(lambda i: eos.is_task_id(i) and i not in keep)
    if leftovers:
        log.info("millrace sink %s: aborting %d leftover transactions", eos.base, len(leftovers))
        client.fence(leftovers, timeout_ms)
    return len(leftovers)


def open_sink(
    opts: SinkOptions,
    bootstrap: str,
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> ExactlyOnce:
    """The sink's settings when a writer is created, on either side of Spark's write (the
    planning and the commit): the sink id (made the first time), the brokers checked (their
    answers cached), the transaction timeout. Raises :class:`ExactlyOnceError` when the
    brokers make exactly-once impossible, and
    :class:`~spark_connector.kafka.transactions.TxnError` when they do not answer.
    ``security``: TLS and SASL of the connections."""
    log_ = SinkLog(opts.log_dir) if opts.log_dir is not None else None
    sink_id = log_.sink_id() if log_ is not None else uuid.uuid4().hex[:16]
    with TxnClient(bootstrap, timeout_s=timeout_s, security=security) as client:
        facts = broker_facts(client, bootstrap)
    if facts.missing:
        raise ExactlyOnceError(
            f"'deliveryGuarantee=exactly-once' needs Kafka transactions, and the brokers at "
            f"{bootstrap} lack {', '.join(facts.missing)}: use brokers of Kafka 3.0 or "
            "later (or Millrace), or write with deliveryGuarantee=at-least-once"
        )
    return ExactlyOnce(opts, sink_id, -1, None, facts.two_phase, _timeout(opts, facts))


def plan_batch(
    eos: ExactlyOnce, bootstrap: str, security: ClientSecurity | None = None
) -> ExactlyOnce:
    """Step 1 of ``docs/exactly-once.md`` for the tasks of one batch (the planning side
    only): what the log holds (``committed_through``), the pending batch's partitions to
    write again, and the sink's leftover transactions fenced."""
    if eos.log_dir is None:
        return eos
    log_ = SinkLog(eos.log_dir)
    pending = log_.latest()
    rewrite = None
    keep: set[str] = set()
    with TxnClient(bootstrap, timeout_s=30.0, security=security) as client:
        if pending is not None and not pending.committed:
            rewrite = plan_rewrite(client, pending)
            keep = pending.transactional_ids()
            log.info(
                "millrace sink: batch %d is %s in the log: %s",
                pending.batch,
                pending.state,
                "its commit finishes it"
                if rewrite is None
                else (
                    "every Spark partition is written again"
                    if rewrite.all
                    else f"Spark partitions {sorted(rewrite.partitions)} are written again"
                ),
            )
        planned = replace(eos, committed_through=log_.committed_through(), rewrite=rewrite)
        try:
            fence_leftovers(client, planned, keep, eos.timeout_ms)
        except TxnError as exc:
            log.warning("millrace sink: clean-up of leftover transactions failed: %s", exc)
    return planned
