"""The driver side of the exactly-once sink (``docs/exactly-once.md``, steps 3 and 4): commit
a micro-batch's task transactions and then its offsets, or abort them.

:meth:`Committer.commit` runs the steps in order: claim the sink for this driver run (or
fail as a zombie driver), skip a committed batch, check the tasks' partition counts, prepare
every task transaction (KIP-939 take-over on Millrace, DescribeTransactions elsewhere) and
create the batch record, open the driver transaction (a fresh epoch of the driver id, and the
run checked again), end the task transactions in parallel, wait until their markers are
written, commit the batch's progress records (its boundary for readers,
:mod:`~spark_connector.exactly_once.boundaries`) and the source offsets with the driver
transaction, and fence the sink's leftovers.
:meth:`Committer.commit_write` is the same without a log for a plain ``df.write``;
:meth:`Committer.abort` gives a batch up.

Every failure that leaves the batch unfinished raises :class:`ExactlyOnceError` (or
:class:`DriverFenced`) naming the batch, the Spark partitions and topic-partitions concerned,
and what happens on restart; none leaves offsets ahead of output.

Every connection (transaction coordinators, the driver's producer, markers, progress records)
carries the sink's ``security`` (the writer's ``kafka.security.protocol`` / ``kafka.ssl.*`` /
``kafka.sasl.*`` options, :mod:`spark_connector.kafka.security`).

Concurrency: a committer is used by one driver thread; the parallel EndTxn calls run in a
small thread pool, each thread with its own :class:`TxnClient`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from spark_connector.exactly_once.boundaries import (
    Boundary,
    ProgressLog,
    ensure_progress_topic,
    next_cut,
    produce_boundaries,
)
from spark_connector.exactly_once.offsets import source_offsets
from spark_connector.exactly_once.planning import entry_outcome, fence_leftovers
from spark_connector.exactly_once.settings import ExactlyOnce, ExactlyOnceError
from spark_connector.exactly_once.sink_log import (
    COMMITTED,
    DONE,
    EMPTY,
    FAILED,
    LOST,
    OPEN,
    PARTIAL,
    PREPARED,
    BatchRecord,
    RunRecord,
    SinkLog,
    TaskEntry,
)
from spark_connector.kafka.producer import BatchProducer, ProduceError
from spark_connector.kafka.topics import end_offsets
from spark_connector.kafka.transactions import OpenTransaction, TxnClient, TxnError
from spark_connector.write.outcome import TaskTransaction

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = ["ABORT_LINGER_S", "FAULT_ENV", "Committer", "DriverFenced"]

log = logging.getLogger(__name__)

T = TypeVar("T")

ABORT_LINGER_S = 5.0  # how long abort() keeps fencing transactions cancelled tasks open
_RETIRED_TTL_S = 60.0
_retired: dict[tuple[str, str], float] = {}
# (bootstrap, topic) -> until when the topic is known to have a live boundary
_bounded: dict[tuple[str, str], float] = {}
"""(bootstrap, topic) -> until when the topic is known to have no live boundary (sinks with
``batchBoundaries=false``); guarded by the GIL (plain dict operations)."""
_PARALLEL = 8
_COMPLETE_WAIT_S = 120.0

FAULT_ENV = "MILLRACE_SINK_FAULT_PAUSE"
"""Fault injection for tests: ``<point>[@<batch>]=<seconds>[,...]`` makes the committer sleep
at ``prepared`` (batch recorded as prepared, nothing ended), ``ended`` (every task transaction
but the last ended), ``boundaries`` (every task transaction committed and its markers written,
the driver transaction not yet) or ``committed`` (batch recorded as committed), in every batch
or only in batch ``<batch>``, so a test can kill the driver or a broker exactly there. Unset in
production."""


def _fault_pause(point: str, batch: int | None = None) -> None:
    import os

    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    for item in spec.split(","):
        name, _, seconds = item.partition("=")
        name, _, only = name.strip().partition("@")
        if name != point or (only and (batch is None or int(only) != batch)):
            continue
        log.warning(
            "millrace sink: fault injection: pausing %s s at %r of batch %s", seconds, point, batch
        )
        time.sleep(float(seconds or 0))


class DriverFenced(ExactlyOnceError):
    """Another driver run took the sink over: this one is a zombie and must stop."""


def _partitions_text(entries: Iterable[TaskEntry]) -> str:
    parts = []
    for t in sorted(entries, key=lambda t: t.partition):
        outputs = ", ".join(f"{topic}[{p}]" for topic, p, _f, _e in t.outputs) or "no output"
        parts.append(f"Spark partition {t.partition} ({t.rows} rows to {outputs})")
    return "; ".join(parts)


class Committer:
    """Commits (or aborts) the transactions of one sink's batches on the driver (see the
    module docstring)."""

    def __init__(
        self,
        eos: ExactlyOnce,
        bootstrap: str,
        run: str,
        *,
        timeout_s: float = 120.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.eos = eos
        self.bootstrap = bootstrap
        self.security = security
        """TLS and SASL of every connection (transaction coordinators, the driver's
        producer, markers, progress records)."""
        self.run = run
        self.timeout_s = timeout_s
        self.log = SinkLog(eos.log_dir) if eos.log_dir is not None else None
        #: how long the last committed batch took to become visible (first EndTxn to last)
        self.visibility_ms = 0.0

    def _client(self) -> TxnClient:
        return TxnClient(self.bootstrap, timeout_s=self.timeout_s, security=self.security)

    # --- parallel requests -----------------------------------------------------------------

    def _parallel(self, items: Sequence[T], call: Callable[[TxnClient, T], object]) -> list[object]:
        """``call(client, item)`` for every item, at most :data:`_PARALLEL` at once, each
        thread with its own client; exceptions are returned, not raised."""
        if not items:
            return []
        local = threading.local()
        clients: list[TxnClient] = []
        lock = threading.Lock()

        def run(item: T) -> object:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = self._client()
                with lock:
                    clients.append(client)
            try:
                return call(client, item)
            except Exception as exc:  # noqa: BLE001 - reported to the caller per item
                return exc

        try:
            with ThreadPoolExecutor(max_workers=min(_PARALLEL, len(items))) as pool:
                return list(pool.map(run, items))
        finally:
            for client in clients:
                client.close()

    # --- step 3.1: the driver run ----------------------------------------------------------

    def _claim(self, client: TxnClient, sink_log: SinkLog) -> RunRecord:
        """This run's record in ``run.json``: taken over from an older run (fencing its
        driver transaction), or :class:`DriverFenced` when a newer run owns the sink."""
        current = sink_log.run()
        if current is not None and current.run == self.run:
            return current
        if current is not None and current.run > self.run:
            raise self._zombie(current)
        driver = client.init_producer(self.eos.driver_transactional_id, self.eos.timeout_ms)
        mine = RunRecord.mine(self.run, driver)
        sink_log.put_run(mine)
        now = sink_log.run()
        if now is not None and now.run != self.run:
            raise self._zombie(now)
        log.info(
            "millrace sink %s: driver run %s owns the sink (driver producer %d epoch %d)",
            self.eos.base,
            self.run,
            driver.producer_id,
            driver.producer_epoch,
        )
        return mine

    def _zombie(self, owner: RunRecord) -> DriverFenced:
        return DriverFenced(
            f"another driver (run {owner.run} on host {owner.host}, pid {owner.pid}) took "
            f"the exactly-once sink in {self.eos.log_dir} over: this driver is a zombie and "
            "stops without committing anything (two queries must not share a checkpoint)"
        )

    # --- step 3.3: the batch record --------------------------------------------------------

    def _counts(
        self, reports: Sequence[TaskTransaction], previous: BatchRecord | None
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        for report in reports:
            for topic, n in report.counts:
                if counts.setdefault(topic, n) != n:
                    raise ExactlyOnceError(
                        f"topic '{topic}' changed its partition count during the batch (tasks "
                        f"saw {counts[topic]} and {n} partitions): nothing of the batch is "
                        "visible; restart the query to write it again"
                    )
        if previous is not None and not self.eos.options.accept_partition_change:
            for topic, n in counts.items():
                before = previous.counts.get(topic)
                if before is not None and before != n:
                    raise ExactlyOnceError(
                        f"output topic '{topic}' has {n} partitions, but batch "
                        f"{previous.batch} was written with {before}: keys now go to other "
                        "partitions (a compacted topic would keep the old values of the "
                        "keys that moved). Nothing of this batch is visible. Write to a new "
                        "topic, or restart the query with option "
                        "acceptPartitionCountChange=true to accept the change"
                    )
        return counts

    def _new_record(self, batch: int, reports: Sequence[TaskTransaction]) -> BatchRecord:
        previous = None
        if self.log is not None:
            earlier = [b for b in self.log.batches() if b < batch]
            previous = self.log.get(earlier[-1]) if earlier else None
        counts = self._counts(reports, previous)
        offsets: dict[str, dict[int, int]] = {}
        group = self.eos.group
        checkpoint = self.eos.options.checkpoint
        if group is not None and checkpoint is not None:
            offsets = source_offsets(checkpoint, batch)
            if not offsets:
                log.warning(
                    "millrace sink: batch %d has no Kafka source offsets in the checkpoint; "
                    "nothing is committed to group %s",
                    batch,
                    group,
                )
        tasks = [
            TaskEntry(
                r.partition,
                r.rows,
                OPEN if r.transaction is not None else EMPTY,
                r.transaction,
                r.transaction,
                list(r.outputs),
                r.attempt,
            )
            for r in sorted(reports, key=lambda r: r.partition)
        ]
        return BatchRecord(
            batch, PREPARED, self.run, tasks, group, offsets, counts, partitions=len(reports)
        )

    # --- step 3.4: prepare -----------------------------------------------------------------

    def _prepare(self, client: TxnClient, entries: list[TaskEntry]) -> list[TaskEntry]:
        """Check (and on Millrace take over for two-phase commit) each open entry's
        transaction: it must still be open and the task's own. Returns the lost entries."""
        todo = [t for t in entries if t.state == OPEN and t.txn is not None]
        if not todo:
            return []
        if self.eos.two_phase:
            results = self._parallel(todo, _take_over)
            lost = []
            for task, result in zip(todo, results, strict=True):
                if isinstance(result, TxnError) and result.code == 53:
                    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: two-phase commit is off
                    log.warning(
                        "millrace sink: the brokers refuse two-phase commit (%s): the batch's "
                        "transactions stay subject to transaction.timeout.ms",
                        result,
                    )
                    return self._verify(client, todo)
                if isinstance(result, Exception):
                    raise result
                assert isinstance(result, OpenTransaction)
                if result.producer_id < 0:
                    lost.append(task)
                else:
                    task.txn = result
            return lost
        return self._verify(client, todo)

    def _verify(self, client: TxnClient, todo: list[TaskEntry]) -> list[TaskEntry]:
        states = client.describe_many(t.txn.transactional_id for t in todo if t.txn is not None)
        lost = []
        for task in todo:
            assert task.txn is not None and task.wrote is not None
            state = states.get(task.txn.transactional_id)
            covered = {(topic, p) for topic, p, _f, _e in task.outputs}
            if (
                state is None
                or state.state != "Ongoing"
                or not state.holds(task.wrote)
                or not covered <= state.partitions
            ):
                lost.append(task)
        return lost

    def _abort_entries(self, entries: Iterable[TaskEntry]) -> None:
        """EndTxn(abort) for our own open transactions (best effort: a lost one may already
        be aborted or fenced)."""
        todo = [t for t in entries if t.state == OPEN and t.txn is not None]
        for task, result in zip(todo, self._parallel(todo, _abort), strict=True):
            if isinstance(result, Exception):
                log.info("millrace sink: aborting %s: %s", task.txn, result)

    def _abort_reports(self, reports: Iterable[TaskTransaction]) -> None:
        self._abort_entries(
            TaskEntry(r.partition, r.rows, OPEN, r.transaction, r.transaction)
            for r in reports
            if r.transaction is not None and not r.skipped
        )

    def _lost_before_visible(self, batch: int, lost: list[TaskEntry]) -> ExactlyOnceError:
        return ExactlyOnceError(
            f"batch {batch}: the transaction of {_partitions_text(lost)} is no longer open "
            "(a zombie task fenced it, or the brokers aborted it after transaction.timeout.ms); "
            "nothing of the batch is visible: restart the query to write the batch again"
        )

    # --- step 3: commit --------------------------------------------------------------------

    def commit(self, batch: int, reports: Sequence[TaskTransaction]) -> BatchRecord | None:
        """Commit batch ``batch`` (see the module docstring); the batch's record (None when
        a replay wrote nothing and the log has no record either)."""
        assert self.log is not None, "commit() needs a sink log; commit_write() has none"
        sink_log = self.log
        with self._client() as client:
            try:
                run = self._claim(client, sink_log)
            except DriverFenced:
                self._abort_reports(reports)
                raise
            record = sink_log.get(batch)
            if record is not None and record.committed:
                return record
            written = [r for r in reports if not r.skipped]
            if record is None:
                if not written:
                    return None  # a replay of a batch an older sink version finished
                record = self._create(client, sink_log, batch, written, run)
                if record.committed:
                    return record
            else:
                record = self._merge(client, sink_log, record, written, run)
            self._finish(client, sink_log, record, run)
            _fault_pause("committed", batch)
            try:
                fence_leftovers(client, self.eos, record.transactional_ids(), self.eos.timeout_ms)
            except TxnError as exc:
                # the batch is committed; a leftover only delays read_committed readers until
                # the next batch's clean-up or its transaction timeout
                log.warning("millrace sink: clean-up of leftover transactions failed: %s", exc)
            return record

    def _create(
        self,
        client: TxnClient,
        sink_log: SinkLog,
        batch: int,
        reports: Sequence[TaskTransaction],
        run: RunRecord,
    ) -> BatchRecord:
        """Steps 3.3 and 3.4 for a batch the log does not hold yet."""
        try:
            record = self._new_record(batch, reports)
        except ExactlyOnceError:
            self._abort_reports(reports)
            raise
        lost = self._prepare(client, record.tasks)
        if lost:
            self._abort_entries(t for t in record.tasks if t not in lost)
            raise self._lost_before_visible(batch, lost)
        if sink_log.create(record):
            _fault_pause("prepared", batch)
            return record
        theirs = sink_log.get(batch)
        self._abort_entries(record.tasks)  # ours: the other driver's record wins
        if theirs is None:
            raise ExactlyOnceError(f"batch {batch}: its record vanished while being created")
        if theirs.run > run.run:
            raise self._zombie(sink_log.run() or run)
        return theirs

    def _settle(self, client: TxnClient, record: BatchRecord) -> None:
        """Bring a pending record's open entries up to date: committed (``DONE``) or lost
        (``LOST``) since, as the coordinators (or the markers) tell."""
        todo = [t for t in record.tasks if t.state == OPEN and t.txn is not None]
        if not todo:
            return
        states = client.describe_many(t.txn.transactional_id for t in todo if t.txn is not None)
        for task in todo:
            assert task.txn is not None
            outcome = entry_outcome(client, task, states.get(task.txn.transactional_id))
            if outcome != OPEN:
                task.state = outcome

    def _merge(
        self,
        client: TxnClient,
        sink_log: SinkLog,
        record: BatchRecord,
        reports: Sequence[TaskTransaction],
        run: RunRecord,
    ) -> BatchRecord:
        """A pending record and the replay's reports: the rewritten Spark partitions replace
        their lost entries (after the row-count check); the rest of the record stands."""
        if record.state == FAILED:
            self._abort_reports(reports)
            raise ExactlyOnceError(record.error)
        if not reports:
            return record
        self._settle(client, record)
        if not any(t.state == DONE for t in record.tasks):
            # nothing of the batch became visible: the replay's output replaces it all
            self._abort_entries(record.tasks)
            sink_log.forget(record.batch)
            return self._create(client, sink_log, record.batch, reports, run)
        replaced: list[TaskEntry] = []
        for report in reports:
            entry = record.entry(report.partition)
            if entry is None or entry.state != LOST:
                self._abort_reports([report])  # not a partition to rewrite
                continue
            if report.rows != entry.rows:
                self._abort_reports(reports)
                raise ExactlyOnceError(
                    f"batch {record.batch}: the replay of Spark partition {report.partition} "
                    f"wrote {report.rows} rows where the first run wrote {entry.rows}: the "
                    "query is not deterministic, so the lost output of the batch cannot be "
                    "written again exactly. Its output is visible except "
                    f"{_partitions_text([entry])}; source offsets of the batch: "
                    f"{json.dumps(record.offsets)}"
                )
            entry.state = OPEN if report.transaction is not None else EMPTY
            entry.txn = entry.wrote = report.transaction
            entry.outputs = list(report.outputs)
            entry.attempt = report.attempt
            replaced.append(entry)
        lost = self._prepare(client, replaced)
        if lost:
            self._abort_entries(t for t in replaced if t not in lost)
            for task in lost:
                task.state = LOST
            sink_log.put(record)
            raise ExactlyOnceError(
                f"batch {record.batch}: the rewritten transaction of {_partitions_text(lost)} "
                "is no longer open; restart the query to write it again"
            )
        record.state = PREPARED
        record.error = ""
        sink_log.put(record)
        return record

    # --- steps 3.5 to 3.9 ------------------------------------------------------------------

    def _end(self, entries: list[TaskEntry]) -> list[TaskEntry]:
        """EndTxn(commit) for the open entries, in parallel; returns those lost. Entries whose
        commit succeeded become ``DONE``."""
        todo = [t for t in entries if t.state == OPEN and t.txn is not None]
        lost = []
        results = self._parallel(todo, _commit)
        for task, result in zip(todo, results, strict=True):
            if result is None:
                task.state = DONE
                continue
            if isinstance(result, TxnError) and result.code in (47, 48, 49, 90):
                with self._client() as client:
                    outcome = entry_outcome(
                        client,
                        task,
                        client.describe(task.txn.transactional_id),  # type: ignore[union-attr]
                    )
                if outcome == DONE:
                    task.state = DONE
                    continue
                lost.append(task)
                continue
            assert isinstance(result, Exception)
            raise ExactlyOnceError(
                f"cannot commit the transaction of {_partitions_text([task])}: {result}; the "
                "batch is prepared: restarting the query finishes it"
            ) from result
        return lost

    def _wait_complete(self, client: TxnClient, entries: list[TaskEntry]) -> None:
        """Wait until every committed entry's markers are written (DescribeTransactions says
        CompleteCommit, or its id has moved on to a newer producer since)."""
        waiting = {t.txn.transactional_id: t.txn for t in entries if t.state == DONE and t.txn}
        deadline = time.monotonic() + _COMPLETE_WAIT_S
        delay = 0.005
        while waiting:
            states = client.describe_many(waiting)
            for txn_id, txn in list(waiting.items()):
                state = states.get(txn_id)
                if state is None:
                    continue
                moved_on = state.producer_id != txn.producer_id or (
                    state.producer_epoch > txn.producer_epoch
                )
                if moved_on or (state.holds(txn) and state.state == "CompleteCommit"):
                    del waiting[txn_id]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise ExactlyOnceError(
                    f"transactions {sorted(waiting)} were committed but their markers were not "
                    f"all written within {_COMPLETE_WAIT_S:.0f} s; the batch is prepared: "
                    "restarting the query finishes it"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _deleted_outputs(self, client: TxnClient, record: BatchRecord) -> list[str]:
        topics = {topic for t in record.tasks for topic, _p, _f, _e in t.outputs}
        if not topics:
            return []
        counts = client.partition_counts(topics)
        return sorted(t for t, n in counts.items() if n == 0)

    # --- steps 3.5 and 3.8: the driver transaction ------------------------------------------

    def _open_driver(self, sink_log: SinkLog | None) -> BatchProducer:
        """Step 3.5: a fresh epoch of the driver id (its InitProducerId also aborts a driver
        transaction a dead commit left open), then the run checked again: a driver whose run
        is no longer the newest stops here, before ending anything."""
        try:
            producer = BatchProducer(
                self.bootstrap,
                transactional_id=self.eos.driver_transactional_id,
                transaction_timeout_ms=self.eos.timeout_ms,
                request_timeout_ms=int(self.timeout_s * 1000),
                client_id="millrace-spark-sink-driver",
                security=self.security,
            )
        except ProduceError as exc:
            raise ExactlyOnceError(
                f"cannot open the driver transaction {self.eos.driver_transactional_id}: {exc}; "
                "nothing of the batch was ended: restarting the query finishes it"
            ) from exc
        if sink_log is not None:
            now = sink_log.run()
            if now is not None and now.run != self.run:
                producer.close()
                raise self._zombie(now)
        return producer

    def _boundaries(
        self, client: TxnClient, batch: int, tasks: Iterable[TaskEntry], counts: dict[str, int]
    ) -> list[Boundary]:
        """The batch's progress records: the cut of every topic it wrote (see
        :func:`~spark_connector.exactly_once.boundaries.next_cut`), read once its markers are
        written."""
        written: dict[str, dict[int, int]] = {}
        for task in tasks:
            if task.state != DONE:
                continue
            for topic, p, _first, end in task.outputs:
                parts = written.setdefault(topic, {})
                parts[p] = max(parts.get(p, 0), end)
        if not written:
            return []
        if not self.eos.options.boundaries:
            return self._retirements(client, written)
        now_ms = int(time.time() * 1000)
        out = []
        with ProgressLog(
            self.bootstrap, timeout_s=self.timeout_s, cluster=client.cluster
        ) as progress:
            for topic, ends in sorted(written.items()):
                stable = end_offsets(client.cluster, topic, read_committed=True)
                partitions = max(counts.get(topic, 0), len(stable), max(ends) + 1)
                cut = next_cut(progress.latest(topic), partitions, ends, stable)
                out.append(Boundary(topic, self.eos.base, batch, now_ms, cut))
        return out

    def _start_boundaries(
        self,
        client: TxnClient,
        driver: BatchProducer,
        batch: int,
        tasks: Iterable[TaskEntry],
        counts: dict[str, int],
    ) -> None:
        """Step 3.6, before any of the batch's output is visible: a topic the batch writes
        that has no live boundary yet (the sink's first batch there, or boundaries turned on
        again) gets one of batch ``batch - 1`` at its last stable offsets now, committed in a
        driver transaction of its own. Readers then stop there until the batch's own boundary
        is committed, instead of seeing its task transactions commit one by one. Topics
        known to have a boundary are looked up again once a minute per process."""
        if not self.eos.options.boundaries:
            return
        now = time.monotonic()
        topics = sorted(
            {
                topic
                for task in tasks
                if task.state in (OPEN, DONE)
                for topic, *_ in task.outputs
                if _bounded.get((self.bootstrap, topic), 0.0) < now
            }
        )
        if not topics:
            return
        todo = []
        with ProgressLog(
            self.bootstrap, timeout_s=self.timeout_s, cluster=client.cluster
        ) as progress:
            for topic in topics:
                if progress.latest(topic) is not None:
                    _bounded[(self.bootstrap, topic)] = now + _RETIRED_TTL_S
                    continue
                stable = end_offsets(client.cluster, topic, read_committed=True)
                partitions = max(counts.get(topic, 0), len(stable))
                cut = next_cut(None, partitions, {}, stable)
                todo.append(Boundary(topic, self.eos.base, batch - 1, int(time.time() * 1000), cut))
        if not todo:
            return
        txn = OpenTransaction(
            self.eos.driver_transactional_id, driver.producer_id, driver.producer_epoch
        )
        try:
            produce_boundaries(driver, todo, ensure_progress_topic(client.cluster))
            client.end(txn, commit=True)
            # visible (markers written) before any of the batch is
            self._wait_complete(client, [TaskEntry(-1, 0, DONE, txn)])
        except (ProduceError, TxnError) as exc:
            raise ExactlyOnceError(
                f"the first boundary of {', '.join(b.topic for b in todo)} could not be "
                f"committed: {exc}; nothing of batch {batch} is visible yet: restarting the "
                "query finishes it"
            ) from exc
        driver.transaction_ended()
        for b in todo:
            _bounded[(self.bootstrap, b.topic)] = now + _RETIRED_TTL_S
        log.info(
            "millrace sink %s: first boundary (batch %d) of %s",
            self.eos.base,
            batch - 1,
            ", ".join(b.topic for b in todo),
        )

    def _retirements(self, client: TxnClient, topics: Iterable[str]) -> list[Boundary]:
        """``batchBoundaries=false``: a tombstone for each topic whose newest progress record
        is a live boundary (readers must not stop at it any more); looked up once a minute
        per topic and process."""
        now = time.monotonic()
        todo = [t for t in topics if _retired.get((self.bootstrap, t), 0.0) < now]
        if not todo:
            return []
        out = []
        with ProgressLog(
            self.bootstrap, timeout_s=self.timeout_s, cluster=client.cluster
        ) as progress:
            for topic in sorted(todo):
                if progress.latest(topic) is not None:
                    out.append(Boundary.retirement(topic))
                else:
                    _retired[(self.bootstrap, topic)] = now + _RETIRED_TTL_S
        return out

    def _commit_driver(
        self,
        client: TxnClient,
        sink_log: SinkLog | None,
        driver: BatchProducer,
        boundaries: list[Boundary],
        group: str | None,
        offsets: dict[str, dict[int, int]],
    ) -> BatchProducer:
        """Step 3.8: the progress records and the source offsets in the driver transaction,
        committed. A driver transaction fenced by an older run's commit (its InitProducerId
        came after ours) is started again while the run is still the newest. Returns the
        producer used last (the caller closes it)."""
        if not boundaries and not (group and offsets):
            return driver
        for attempt in range(1, 4):
            txn = OpenTransaction(
                self.eos.driver_transactional_id, driver.producer_id, driver.producer_epoch
            )
            try:
                if boundaries:
                    produce_boundaries(driver, boundaries, ensure_progress_topic(client.cluster))
                if group and offsets:
                    client.add_offsets_to_txn(txn, group)
                    client.txn_offset_commit(txn, group, offsets)
                client.end(txn, commit=True)
                return driver
            except (ProduceError, TxnError) as exc:
                if not exc.fenced or attempt == 3:
                    raise ExactlyOnceError(
                        f"the output of the batch is visible, but its driver transaction "
                        f"failed: {exc}; restarting the query commits its progress and offsets"
                    ) from exc
                log.info("millrace sink: the driver transaction was fenced (%s): again", exc)
                driver.close()
                driver = self._open_driver(sink_log)
        return driver

    def _finish(
        self, client: TxnClient, sink_log: SinkLog, record: BatchRecord, run: RunRecord
    ) -> None:
        """Steps 3.5 to 3.9 for a prepared record."""
        eos = self.eos
        driver = self._open_driver(sink_log)
        try:
            started = time.monotonic()
            open_entries = [t for t in record.tasks if t.state == OPEN]
            if open_entries:
                self._start_boundaries(client, driver, record.batch, record.tasks, record.counts)
            if len(open_entries) > 1:
                first, last = open_entries[:-1], open_entries[-1:]
                lost = self._end(first)
                _fault_pause("ended", record.batch)
                lost += self._end(last)
            else:
                lost = self._end(open_entries)
            lost += [t for t in record.tasks if t.state == LOST and t not in lost]
            self._wait_complete(client, record.tasks)
            self.visibility_ms = (time.monotonic() - started) * 1000.0
            deleted = self._deleted_outputs(client, record)
            if lost or deleted:
                self._unfinished(sink_log, record, lost, deleted)
            boundaries = self._boundaries(client, record.batch, record.tasks, record.counts)
            _fault_pause("boundaries", record.batch)
            offsets = record.offsets if record.group is not None else {}
            driver = self._commit_driver(
                client, sink_log, driver, boundaries, record.group, offsets
            )
        finally:
            driver.close()
        record.state = COMMITTED
        sink_log.put(record)
        log.info(
            "millrace sink %s: batch %d visible through %d transaction(s) within %.1f ms%s%s",
            eos.base,
            record.batch,
            sum(1 for t in record.tasks if t.state == DONE),
            self.visibility_ms,
            f", boundary of {', '.join(b.topic for b in boundaries)}" if boundaries else "",
            f", offsets committed to {record.group}" if record.group and record.offsets else "",
        )

    def _unfinished(
        self,
        sink_log: SinkLog,
        record: BatchRecord,
        lost: list[TaskEntry],
        deleted: list[str],
    ) -> None:
        """Steps 3.7/3.9: output missing. Never commits the offsets nor a boundary (the driver
        transaction holds nothing yet); always raises."""
        for task in lost:
            task.state = LOST
        visible = [
            t
            for t in record.tasks
            if t.state == DONE and any(topic not in deleted for topic, *_ in t.outputs)
        ]
        source = json.dumps(record.offsets) if record.offsets else "{}"
        if not visible:
            sink_log.forget(record.batch)
            what = (
                f"output topic(s) {deleted} were deleted"
                if deleted
                else f"the transactions of {_partitions_text(lost)} were aborted"
            )
            raise ExactlyOnceError(
                f"batch {record.batch}: {what} and nothing of the batch is visible: restart "
                "the query to write it again"
            )
        if deleted:
            record.state = FAILED
            record.error = (
                f"batch {record.batch}: output topic(s) {deleted} were deleted while the batch "
                "was committed: their part of its output is gone while the rest is visible, "
                f"and its source offsets ({source}) were not committed. To write the whole "
                f"batch again, delete {sink_log.dir / f'{record.batch}.json'} (its other "
                "output is then written twice) or restart from a new checkpoint"
            )
            sink_log.put(record)
            raise ExactlyOnceError(record.error)
        record.state = PARTIAL
        outputs = sorted({f"{topic}[{p}]" for t in lost for topic, p, _f, _e in t.outputs})
        record.error = (
            f"batch {record.batch} is partly visible: the brokers aborted the transactions of "
            f"{_partitions_text(lost)} before the driver committed them (it was down longer "
            f"than transaction.timeout.ms, {self.eos.timeout_ms} ms); missing output in "
            f"{', '.join(outputs) or 'no partition'}; source offsets of the batch: {source} "
            "(not committed). Restart the query: the replay writes exactly those Spark "
            "partitions again (their row counts are checked) and then commits the offsets"
        )
        sink_log.put(record)
        raise ExactlyOnceError(record.error)

    # --- df.write ----------------------------------------------------------------------------

    def commit_write(self, reports: Sequence[TaskTransaction]) -> None:
        """A plain ``df.write``: every task transaction, or none (no log, no offsets); its
        boundary (batch 0 of the write's own sink id) is committed after them."""
        entries = [
            TaskEntry(r.partition, r.rows, OPEN, r.transaction, r.transaction, list(r.outputs))
            for r in reports
            if r.transaction is not None
        ]
        with self._client() as client:
            lost = self._prepare(client, entries)
            if lost:
                self._abort_entries(t for t in entries if t not in lost)
                raise ExactlyOnceError(
                    f"the write's transaction of {_partitions_text(lost)} is no longer open "
                    "(fenced, or aborted after transaction.timeout.ms): nothing was written"
                )
            driver = self._open_driver(None)
            try:
                counts: dict[str, int] = {}
                for r in reports:
                    counts.update(r.counts)
                self._start_boundaries(client, driver, 0, entries, counts)
                started = time.monotonic()
                lost = self._end(entries)
                if lost:
                    raise ExactlyOnceError(
                        f"the write is partly visible: the transaction of "
                        f"{_partitions_text(lost)} was aborted by the brokers before it could "
                        "be committed"
                    )
                self._wait_complete(client, entries)
                self.visibility_ms = (time.monotonic() - started) * 1000.0
                boundaries = self._boundaries(client, 0, entries, counts)
                driver = self._commit_driver(client, None, driver, boundaries, None, {})
            finally:
                driver.close()
            try:
                fence_leftovers(client, self.eos, set(), self.eos.timeout_ms)
            except TxnError as exc:
                log.warning("millrace sink: clean-up of leftover transactions failed: %s", exc)

    # --- step 4: abort ---------------------------------------------------------------------

    def abort(self, batch: int | None, reports: Sequence[TaskTransaction]) -> None:
        """Spark gave the batch up: abort its transactions, unless it is already prepared
        (then the next run finishes it)."""
        pending: BatchRecord | None = None
        if self.log is not None and batch is not None:
            pending = self.log.get(batch)
            if (
                pending is not None
                and not pending.committed
                and pending.state != FAILED
                and not any(r.transaction is not None and not r.skipped for r in reports)
            ):
                log.warning(
                    "millrace sink: batch %d is %s; the next run finishes it", batch, pending.state
                )
                return
        keep = pending.transactional_ids() if pending is not None else set()
        self._abort_reports(reports)
        deadline = time.monotonic() + ABORT_LINGER_S
        with self._client() as client:
            while True:
                try:
                    fence_leftovers(client, self.eos, keep, self.eos.timeout_ms)
                except TxnError as exc:
                    log.warning("millrace sink: aborting leftover transactions failed: %s", exc)
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.5)


# --- per-transaction calls (run in the pool) -------------------------------------------------


def _take_over(client: TxnClient, task: TaskEntry) -> OpenTransaction:
    """KIP-939 take-over of ``task``'s transaction: the new owning pair, or a pair with
    producer id -1 when the open transaction is not the one the task wrote (lost)."""
    assert task.txn is not None and task.wrote is not None
    taken = client.take_over(task.txn.transactional_id)
    ongoing = (taken.ongoing_producer_id, taken.ongoing_producer_epoch)
    if ongoing == (task.wrote.producer_id, task.wrote.producer_epoch):
        return taken.owner
    if taken.ongoing_producer_id >= 0:
        # an open transaction that is not the task's (a zombie's): abort it
        try:
            client.end(taken.owner, commit=False)
        except TxnError as exc:
            log.info("millrace sink: aborting a stray transaction: %s", exc)
    return OpenTransaction(task.txn.transactional_id, -1, -1)


def _commit(client: TxnClient, task: TaskEntry) -> None:
    assert task.txn is not None
    client.end(task.txn, commit=True)


def _abort(client: TxnClient, task: TaskEntry) -> None:
    assert task.txn is not None
    client.end(task.txn, commit=False)
