"""The transaction state machine of one transactional id (Kafka 3.9's ``TransactionMetadata``
and the decisions of its ``TransactionCoordinator``), pure and clock-free: every time is an
argument, nothing here does I/O.

Theory of operation (KIP-98; checklist section 18)
--------------------------------------------------
A transactional id owns one producer id and its epoch. ``InitProducerId`` bumps the epoch
(fencing every older instance of the producer: "zombies"); if a transaction was still
``Ongoing`` it is first aborted with a bumped epoch (``PrepareEpochFence`` -> ``PrepareAbort``)
and the client retries. ``AddPartitionsToTxn`` / ``AddOffsetsToTxn`` move the transaction to
``Ongoing`` and record its partitions; ``EndTxn`` moves it to ``PrepareCommit`` or
``PrepareAbort``; once the coordinator has written the commit/abort markers to every partition
it moves to ``CompleteCommit`` / ``CompleteAbort``. Idle transactional ids expire (``Dead``)::

    Empty/CompleteCommit/CompleteAbort --add partitions--> Ongoing --end(commit)--> PrepareCommit
    Ongoing --end(abort) | timeout | InitProducerId--> PrepareAbort
    PrepareCommit --markers written--> CompleteCommit;  PrepareAbort --> CompleteAbort
    Empty/Complete* --InitProducerId--> Empty (epoch + 1);  Empty/Complete* --expire--> Dead

Every change is two-phase, as in Kafka: ``prepare_*`` computes the target
(:class:`TxnTransit`) and marks the metadata *pending* (so no other change can start), the
coordinator writes the target to ``__transaction_state`` with acks=all, and only then
``complete`` applies it (or ``cancel_pending`` forgets it when the write failed). A
transition that is not legal raises :class:`IllegalTransitionError`: that is a bug, never a
client error; client errors are returned as ``ErrorCode`` values by the ``plan_*``
functions, which hold the coordinator's decisions for each request.

Only transaction version 0 is implemented (what ZooKeeper-mode Kafka 3.9 runs): the epoch
is bumped by InitProducerId and by fencing, not by every EndTxn (KIP-890 part 2).

Two-phase commit (KIP-939): a transaction whose timeout is :data:`TWO_PHASE_TIMEOUT_MS`
(InitProducerId with ``Enable2Pc``) is never aborted by the coordinator's timer. InitProducerId
with ``KeepPreparedTxn`` on an Ongoing transaction keeps it (Ongoing -> Ongoing, the epoch
bumped so the producer that wrote it is fenced, the partitions and start time unchanged) and
remembers the producer id and epoch the transaction was written with (the *ongoing* pair,
which the response returns); the new epoch may then only end it. The ongoing pair is cleared
when the transaction completes.

Concurrency: a :class:`TransactionMetadata` is owned by the coordinator and used from the
broker's event loop only.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TWO_PHASE_TIMEOUT_MS",
    "IllegalTransitionError",
    "TransactionMetadata",
    "TransactionResult",
    "TxnState",
    "TxnTransit",
    "plan_add_partitions",
    "plan_complete",
    "plan_end_txn",
    "plan_init_producer_id",
    "verify_partitions",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue
TWO_PHASE_TIMEOUT_MS = 2**31 - 1  # Integer.MAX_VALUE: a KIP-939 transaction's timeout


class TxnState(enum.Enum):
    """Kafka's transaction states; the value is the id written to ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def id(self) -> int:
        return int(self.value)

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions / ListTransactions report (``"CompleteCommit"``)."""
        return _NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        try:
            return cls(state_id)
        except ValueError:
            raise ValueError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for state, display in _NAMES.items():
            if display == name:
                return state
        return None


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

# target state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class TransactionResult(enum.Enum):
    """How a transaction ends; the value is the control record type of its marker."""

    ABORT = 0
    COMMIT = 1


class IllegalTransitionError(Exception):
    """A transition the state machine forbids: a coordinator bug, not a client error."""


_NO_ONGOING = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch of a producer id free so it can always fence it."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The target of one state change (what is written to ``__transaction_state``).

    ``previous_producer_id`` is the producer id before the change (Kafka's
    ``prevProducerId``)."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH
    kept: bool = False
    """An Ongoing -> Ongoing change by InitProducerId with ``KeepPreparedTxn`` (KIP-939)."""


class TransactionMetadata:
    """The state of one transactional id (see the module docstring for the rules).

    Concurrency: owned by the coordinator; event loop thread only.
    """

    __slots__ = (
        "failed_epoch_fence",
        "last_producer_epoch",
        "ongoing_producer_epoch",
        "ongoing_producer_id",
        "partitions",
        "pending",
        "previous_producer_id",
        "producer_epoch",
        "producer_id",
        "start_ms",
        "state",
        "timeout_ms",
        "transactional_id",
        "update_ms",
    )

    def __init__(
        self,
        transactional_id: str,
        *,
        producer_id: int,
        timeout_ms: int,
        update_ms: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
        previous_producer_id: int = NO_PRODUCER_ID,
        state: TxnState = TxnState.EMPTY,
        partitions: Iterable[TopicPartition] = (),
        start_ms: int = -1,
        ongoing_producer_id: int = NO_PRODUCER_ID,
        ongoing_producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = previous_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions: set[TopicPartition] = set(partitions)
        self.start_ms = start_ms
        self.update_ms = update_ms
        self.pending: TxnState | None = None
        # a fence whose bumped epoch may not have reached the log: do not bump again
        self.failed_epoch_fence = False
        # KIP-939: the producer id and epoch a kept transaction was written with
        self.ongoing_producer_id = ongoing_producer_id
        self.ongoing_producer_epoch = ongoing_producer_epoch

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, pid={self.producer_id}, "
            f"epoch={self.producer_epoch}, state={self.state.display_name}, "
            f"pending={self.pending.display_name if self.pending else None}, "
            f"partitions={sorted(self.partitions)})"
        )

    # --- queries -----------------------------------------------------------------------

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT)

    @property
    def two_phase(self) -> bool:
        """A KIP-939 transaction: never aborted by the timeout."""
        return self.timeout_ms == TWO_PHASE_TIMEOUT_MS

    def timed_out(self, now_ms: int) -> bool:
        """An Ongoing transaction open longer than its timeout (and not being changed);
        never a two-phase-commit one."""
        return (
            not self.two_phase
            and self.pending is None
            and self.state is TxnState.ONGOING
            and self.start_ms + self.timeout_ms < now_ms
        )

    def should_expire(self, now_ms: int, expiration_ms: int) -> bool:
        """Idle for ``transactional.id.expiration.ms`` with no transaction in progress."""
        return (
            self.pending is None
            and self.state.expiration_allowed
            and self.update_ms <= now_ms - expiration_ms
        )

    # --- prepare (compute the target, mark pending) --------------------------------------

    def _prepare(
        self,
        state: TxnState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        start_ms: int | None = None,
        update_ms: int,
        ongoing: tuple[int, int] | None = None,
        kept: bool = False,
    ) -> TxnTransit:
        if self.pending is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: preparing {state.display_name} while "
                f"{self.pending.display_name} is pending"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state.display_name} -> "
                f"{state.display_name} is not a legal transition"
            )
        transit = TxnTransit(
            producer_id=self.producer_id if producer_id is None else producer_id,
            previous_producer_id=self.producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=(
                self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch
            ),
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions if partitions is None else partitions),
            start_ms=self.start_ms if start_ms is None else start_ms,
            update_ms=update_ms,
            ongoing_producer_id=(self.ongoing_producer_id if ongoing is None else ongoing[0]),
            ongoing_producer_epoch=(self.ongoing_producer_epoch if ongoing is None else ongoing[1]),
            kept=kept,
        )
        if transit.producer_id < 0:
            raise IllegalTransitionError(f"illegal producer id {transit.producer_id}")
        if state is not TxnState.DEAD and transit.producer_epoch < 0:
            raise IllegalTransitionError(f"illegal producer epoch {transit.producer_epoch}")
        self.pending = state
        return transit

    def prepare_fence_epoch(self, now_ms: int) -> TxnTransit:
        """Ongoing -> PrepareEpochFence with the epoch bumped (not bumped again after a
        fence whose write failed). Never written to the log: :func:`plan_end_txn` turns it
        into PrepareAbort."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError("cannot fence a producer at the maximum epoch")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            TxnState.PREPARE_EPOCH_FENCE,
            producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            update_ms=self.update_ms,
        )

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | ErrorCode:
        """InitProducerId on a settled transaction: -> Empty with epoch + 1 (KIP-360: a
        retry of a successful bump returns the same epoch; a stale expected epoch is fenced)."""
        if self.epoch_exhausted:
            raise IllegalTransitionError(f"producer {self.producer_id} has no epochs left")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch in (NO_PRODUCER_EPOCH, expected_epoch):
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retried bump
        else:
            return ErrorCode.producer_fenced
        return self._prepare(
            TxnState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            timeout_ms=timeout_ms,
            partitions=(),
            start_ms=-1,
            update_ms=now_ms,
            ongoing=_NO_ONGOING,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """-> Empty with a new producer id at epoch 0 (the old one's epochs are used up)."""
        if self.has_pending_transaction:
            raise IllegalTransitionError("cannot rotate producer ids inside a transaction")
        return self._prepare(
            TxnState.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=(),
            start_ms=-1,
            update_ms=now_ms,
            ongoing=_NO_ONGOING,
        )

    def prepare_keep_prepared(self, timeout_ms: int, now_ms: int) -> TxnTransit:
        """InitProducerId with ``KeepPreparedTxn`` on an Ongoing transaction (KIP-939): keep
        it, bump the epoch (fencing the producer that wrote it), set the timeout (the two-phase
        one with ``Enable2Pc``), and remember the pair it was written with."""
        if self.state is not TxnState.ONGOING:
            raise IllegalTransitionError(
                f"{self.transactional_id}: keeping a transaction in state {self.state.display_name}"
            )
        if self.epoch_exhausted:
            raise IllegalTransitionError(f"producer {self.producer_id} has no epochs left")
        ongoing = (
            (self.ongoing_producer_id, self.ongoing_producer_epoch)
            if self.ongoing_producer_id != NO_PRODUCER_ID
            else (self.producer_id, self.producer_epoch)
        )
        return self._prepare(
            TxnState.ONGOING,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            update_ms=now_ms,
            ongoing=ongoing,
            kept=True,
        )

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now_ms: int) -> TxnTransit:
        """-> Ongoing with ``added`` joined to the transaction (its start time is set when
        the transaction begins)."""
        settled = self.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT)
        return self._prepare(
            TxnState.ONGOING,
            partitions=self.partitions | set(added),
            start_ms=now_ms if settled else self.start_ms,
            update_ms=now_ms,
        )

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int) -> TxnTransit:
        if state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise IllegalTransitionError(f"not an end state: {state.display_name}")
        return self._prepare(state, update_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort (markers written)."""
        target = (
            TxnState.COMPLETE_COMMIT
            if self.state is TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        self.failed_epoch_fence = False
        return self._prepare(
            target,
            last_producer_epoch=self.producer_epoch,
            partitions=(),
            update_ms=now_ms,
            ongoing=_NO_ONGOING,
        )

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(TxnState.DEAD, partitions=(), update_ms=self.update_ms)

    # --- complete / cancel -----------------------------------------------------------------

    def cancel_pending(self) -> None:
        """The write of the pending change failed: nothing changes."""
        self.pending = None

    def complete(self, transit: TxnTransit) -> None:
        """Apply ``transit`` once it is in ``__transaction_state`` (Kafka's
        completeTransitionTo, with its consistency checks)."""
        if self.pending is None or self.pending is not transit.state:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {transit.state.display_name} but "
                f"pending is {self.pending.display_name if self.pending else None}"
            )
        state = transit.state
        same_producer = (
            transit.producer_id == self.producer_id
            and transit.producer_epoch == self.producer_epoch
        )
        if state is TxnState.EMPTY:
            bump_ok = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id
            )
            if (
                (transit.producer_epoch != self.producer_epoch and not bump_ok)
                or transit.partitions
                or transit.start_ms != -1
            ):
                self._fail(transit)
            self.timeout_ms = transit.timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.previous_producer_id = transit.previous_producer_id
            self.producer_id = transit.producer_id
        elif state is TxnState.ONGOING and transit.kept:
            if (
                self.state is not TxnState.ONGOING
                or transit.producer_id != self.producer_id
                or transit.producer_epoch != self.producer_epoch + 1
                or transit.partitions != self.partitions
                or transit.start_ms != self.start_ms
            ):
                self._fail(transit)
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.timeout_ms = transit.timeout_ms
        elif state is TxnState.ONGOING:
            if (
                not same_producer
                or not self.partitions <= transit.partitions
                or self.timeout_ms != transit.timeout_ms
            ):
                self._fail(transit)
            self.start_ms = transit.start_ms
            self.partitions |= transit.partitions
        elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if (
                not same_producer
                or self.partitions != transit.partitions
                or self.timeout_ms != transit.timeout_ms
                or self.start_ms != transit.start_ms
            ):
                self._fail(transit)
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if not same_producer or self.timeout_ms != transit.timeout_ms or transit.start_ms == -1:
                self._fail(transit)
            self.start_ms = transit.start_ms
            self.partitions.clear()
        else:  # Dead or PrepareEpochFence are never completed
            self._fail(transit)
        self.ongoing_producer_id = transit.ongoing_producer_id
        self.ongoing_producer_epoch = transit.ongoing_producer_epoch
        self.update_ms = transit.update_ms
        self.pending = None
        self.state = state

    def _fail(self, transit: TxnTransit) -> None:
        raise IllegalTransitionError(
            f"{self!r} cannot complete the transition to {transit}: unexpected metadata"
        )

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition whose marker can never be written (its topic was deleted)."""
        if self.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise IllegalTransitionError(
                f"{self.transactional_id}: removing {tp} in state {self.state.display_name}"
            )
        self.partitions.discard(tp)


# --- the coordinator's decisions (pure) -----------------------------------------------------


def needs_new_producer_id(meta: TransactionMetadata, expected: tuple[int, int] | None) -> bool:
    """Whether InitProducerId must rotate to a new producer id (the epochs are used up)."""
    settled = meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
    return (
        settled
        and meta.pending is None
        and meta.epoch_exhausted
        and (expected is None or expected[1] == meta.producer_epoch)
    )


def plan_init_producer_id(
    meta: TransactionMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    now_ms: int,
    new_producer_id: int | None = None,
    *,
    keep_prepared: bool = False,
) -> TxnTransit | ErrorCode:
    """InitProducerId for a transactional id (Kafka's prepareInitProducerIdTransit).

    ``expected`` is the request's (producer id, epoch) when the client sent one (KIP-360).
    Returns the target to write, or an error. A target in state PrepareEpochFence means the
    open transaction must be aborted first (the client is told CONCURRENT_TRANSACTIONS and
    retries). ``new_producer_id`` must be given when :func:`needs_new_producer_id` says so.
    """
    refusal = _init_refusal(meta, expected)
    if refusal is not None:
        return refusal
    state = meta.state
    if state in (TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT, TxnState.EMPTY):
        if needs_new_producer_id(meta, expected):
            if new_producer_id is None:
                raise ValueError("a new producer id is needed for this InitProducerId")
            return meta.prepare_producer_id_rotation(
                new_producer_id, timeout_ms, now_ms, record_last_epoch=expected is not None
            )
        return meta.prepare_increment_epoch(
            timeout_ms, None if expected is None else expected[1], now_ms
        )
    if state is TxnState.ONGOING:
        if not keep_prepared:
            return meta.prepare_fence_epoch(now_ms)
        if meta.epoch_exhausted:
            return ErrorCode.invalid_txn_state
        return meta.prepare_keep_prepared(timeout_ms, now_ms)
    raise IllegalTransitionError(
        f"{meta.transactional_id}: found in state {state.display_name}, which is never stored"
    )


def _init_refusal(meta: TransactionMetadata, expected: tuple[int, int] | None) -> ErrorCode | None:
    """The error of an InitProducerId to refuse at once (None: plan it): a transition under
    way, a fenced (producer id, epoch), or a transaction being ended."""
    if meta.pending is not None:
        return ErrorCode.concurrent_transactions
    if expected is not None:
        pid, epoch = expected
        valid = (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or pid == meta.producer_id
            or (pid == meta.previous_producer_id and epoch_exhausted(epoch))
        )
        if not valid:
            return ErrorCode.producer_fenced
    if meta.state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
        return ErrorCode.concurrent_transactions
    return None


def plan_add_partitions(
    meta: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> TxnTransit | ErrorCode:
    """AddPartitionsToTxn / AddOffsetsToTxn: the target, or an error (``ErrorCode.none``
    when every partition is already in the ongoing transaction: nothing to write)."""
    parts = set(partitions)
    if meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if meta.producer_epoch != producer_epoch:
        return ErrorCode.producer_fenced
    if meta.pending is not None:
        return ErrorCode.concurrent_transactions
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return ErrorCode.concurrent_transactions
    if meta.state is TxnState.ONGOING and parts <= meta.partitions:
        return ErrorCode.none
    return meta.prepare_add_partitions(parts, now_ms)


def verify_partitions(
    meta: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn with ``verify_only`` (KIP-890 part 1): is each partition in the
    transaction? TRANSACTION_ABORTABLE for one that is not."""
    parts = list(partitions)
    error: ErrorCode | None = None
    if meta is None or meta.producer_id != producer_id:
        error = ErrorCode.invalid_producer_id_mapping
    elif meta.producer_epoch != producer_epoch:
        error = ErrorCode.producer_fenced
    elif meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        error = ErrorCode.concurrent_transactions
    if error is not None:
        return dict.fromkeys(parts, error)
    assert meta is not None
    return {
        tp: ErrorCode.none if tp in meta.partitions else ErrorCode.transaction_abortable
        for tp in parts
    }


def plan_end_txn(
    meta: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    *,
    from_client: bool,
    now_ms: int,
) -> TxnTransit | ErrorCode:
    """EndTxn (or the coordinator's own abort after a fence or a timeout): the
    PrepareCommit/PrepareAbort target, or an error. ``ErrorCode.none`` answers a retry of
    an EndTxn that already completed (nothing to write).

    For an abort after :meth:`TransactionMetadata.prepare_fence_epoch` (``from_client``
    False with the fenced epoch), the bumped epoch becomes the metadata's epoch now, as in
    Kafka, so that the fence holds even if the write fails (``failed_epoch_fence``)."""
    if meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    valid_epoch = (not from_client or producer_epoch == meta.producer_epoch) and (
        producer_epoch >= meta.producer_epoch
    )
    if not valid_epoch:
        return ErrorCode.producer_fenced
    fencing = meta.pending is TxnState.PREPARE_EPOCH_FENCE
    if meta.pending is not None and not fencing:
        return ErrorCode.concurrent_transactions
    state = meta.state
    if state is TxnState.ONGOING:
        return _prepare_end(meta, producer_epoch, result, fencing=fencing, now_ms=now_ms)
    retried = _ended_answer(state, result)
    if retried is not None:
        return retried
    if state is TxnState.EMPTY:
        return ErrorCode.invalid_txn_state
    raise IllegalTransitionError(
        f"{meta.transactional_id}: found in state {state.display_name}, which is never stored"
    )


def _prepare_end(
    meta: TransactionMetadata,
    producer_epoch: int,
    result: TransactionResult,
    *,
    fencing: bool,
    now_ms: int,
) -> TxnTransit:
    """The PrepareCommit/PrepareAbort target of an ongoing transaction (after a fence: the
    bumped epoch made the metadata's now)."""
    target = (
        TxnState.PREPARE_COMMIT if result is TransactionResult.COMMIT else TxnState.PREPARE_ABORT
    )
    if fencing:
        if target is not TxnState.PREPARE_ABORT:
            raise IllegalTransitionError("a fenced transaction can only be aborted")
        meta.pending = None
        meta.producer_epoch = producer_epoch
        meta.last_producer_epoch = NO_PRODUCER_EPOCH
    return meta.prepare_abort_or_commit(target, now_ms)


_ENDING_RESULTS = {
    TxnState.COMPLETE_COMMIT: TransactionResult.COMMIT,
    TxnState.COMPLETE_ABORT: TransactionResult.ABORT,
    TxnState.PREPARE_COMMIT: TransactionResult.COMMIT,
    TxnState.PREPARE_ABORT: TransactionResult.ABORT,
}
"""The result of a transaction being ended (Prepare*) or ended (Complete*) in each state."""


def _ended_answer(state: TxnState, result: TransactionResult) -> ErrorCode | None:
    """EndTxn of a transaction being or already ended: NONE for a retry after success,
    CONCURRENT_TRANSACTIONS while it ends, INVALID_TXN_STATE for the other result; None in
    other states."""
    ending = _ENDING_RESULTS.get(state)
    if ending is None:
        return None
    if ending is not result:
        return ErrorCode.invalid_txn_state
    if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        return ErrorCode.none  # a retry after success succeeds
    return ErrorCode.concurrent_transactions


def plan_complete(
    meta: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    now_ms: int,
) -> TxnTransit | ErrorCode:
    """After PrepareCommit/PrepareAbort was written: the CompleteCommit/CompleteAbort target
    (written once every marker is), or an error if the transaction moved on meanwhile."""
    if meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if meta.producer_epoch != producer_epoch:
        return ErrorCode.producer_fenced
    if meta.pending is not None:
        return ErrorCode.concurrent_transactions
    expected = (
        TxnState.PREPARE_COMMIT if result is TransactionResult.COMMIT else TxnState.PREPARE_ABORT
    )
    if meta.state is not expected:
        return ErrorCode.invalid_txn_state
    return meta.prepare_complete(now_ms)
