"""The pure transaction state machine (``broker/coordinator/transaction/state.py``): each
request's decision as Kafka 3.9's TransactionCoordinator makes it, and a Hypothesis state
machine that drives random request sequences against a model of what clients rely on."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.coordinator.transaction.state import (
    MAX_PRODUCER_EPOCH,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionResult,
    TxnState,
    TxnTransit,
    needs_new_producer_id,
    plan_add_partitions,
    plan_complete,
    plan_end_txn,
    plan_init_producer_id,
    verify_partitions,
)
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def new_meta(pid: int = 100, timeout_ms: int = 60_000) -> TransactionMetadata:
    return TransactionMetadata("txn", producer_id=pid, timeout_ms=timeout_ms, update_ms=T0)


def apply(meta: TransactionMetadata, plan: TxnTransit | ErrorCode) -> TxnTransit:
    assert isinstance(plan, TxnTransit), plan
    meta.complete(plan)
    return plan


def init(meta: TransactionMetadata, now: int = T0, expected: tuple[int, int] | None = None) -> None:
    apply(meta, plan_init_producer_id(meta, meta.timeout_ms, expected, now))


def run_txn(meta: TransactionMetadata, result: TransactionResult, now: int = T0) -> None:
    apply(meta, plan_add_partitions(meta, meta.producer_id, meta.producer_epoch, {A0}, now))
    apply(
        meta,
        plan_end_txn(
            meta, meta.producer_id, meta.producer_epoch, result, from_client=True, now_ms=now
        ),
    )
    apply(meta, plan_complete(meta, meta.producer_id, meta.producer_epoch, result, now))


def test_state_ids_and_names_match_kafka() -> None:
    assert [(s.id, s.display_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert TxnState.from_name("CompleteAbort") is TxnState.COMPLETE_ABORT
    assert TxnState.from_name("Nope") is None


def test_first_init_gives_epoch_zero_and_each_init_bumps() -> None:
    meta = new_meta()
    init(meta)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (100, 0, TxnState.EMPTY)
    init(meta)
    assert meta.producer_epoch == 1 and meta.last_producer_epoch == -1


def test_commit_then_abort_round_trip() -> None:
    meta = new_meta()
    init(meta)
    run_txn(meta, TransactionResult.COMMIT, T0 + 5)
    assert meta.state is TxnState.COMPLETE_COMMIT and not meta.partitions
    assert meta.start_ms == T0 + 5
    run_txn(meta, TransactionResult.ABORT, T0 + 9)
    assert meta.state is TxnState.COMPLETE_ABORT


def test_add_partitions_errors_and_idempotence() -> None:
    meta = new_meta()
    init(meta)
    assert plan_add_partitions(meta, 99, 0, {A0}, T0) is ErrorCode.invalid_producer_id_mapping
    assert plan_add_partitions(meta, 100, 5, {A0}, T0) is ErrorCode.producer_fenced
    apply(meta, plan_add_partitions(meta, 100, 0, {A0, A1}, T0 + 1))
    assert plan_add_partitions(meta, 100, 0, {A1}, T0 + 2) is ErrorCode.none  # already in
    transit = plan_add_partitions(meta, 100, 0, {B0}, T0 + 3)
    assert isinstance(transit, TxnTransit) and transit.start_ms == T0 + 1
    assert plan_add_partitions(meta, 100, 0, {B0}, T0 + 3) is ErrorCode.concurrent_transactions
    meta.complete(transit)
    assert meta.partitions == {A0, A1, B0}


def test_end_txn_retry_after_success_succeeds_and_wrong_result_is_invalid() -> None:
    meta = new_meta()
    init(meta)
    run_txn(meta, TransactionResult.COMMIT)
    assert (
        plan_end_txn(meta, 100, 0, TransactionResult.COMMIT, from_client=True, now_ms=T0)
        is ErrorCode.none
    )
    assert (
        plan_end_txn(meta, 100, 0, TransactionResult.ABORT, from_client=True, now_ms=T0)
        is ErrorCode.invalid_txn_state
    )


def test_end_txn_while_markers_are_written_is_concurrent() -> None:
    meta = new_meta()
    init(meta)
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    apply(meta, plan_end_txn(meta, 100, 0, TransactionResult.COMMIT, from_client=True, now_ms=T0))
    assert (
        plan_end_txn(meta, 100, 0, TransactionResult.COMMIT, from_client=True, now_ms=T0)
        is ErrorCode.concurrent_transactions
    )
    assert (
        plan_end_txn(meta, 100, 0, TransactionResult.ABORT, from_client=True, now_ms=T0)
        is ErrorCode.invalid_txn_state
    )
    assert plan_init_producer_id(meta, 60_000, None, T0) is ErrorCode.concurrent_transactions


def test_end_txn_on_empty_is_invalid_state() -> None:
    meta = new_meta()
    init(meta)
    assert (
        plan_end_txn(meta, 100, 0, TransactionResult.COMMIT, from_client=True, now_ms=T0)
        is ErrorCode.invalid_txn_state
    )


def test_init_during_ongoing_fences_and_aborts_with_bumped_epoch() -> None:
    meta = new_meta()
    init(meta)
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    fence = plan_init_producer_id(meta, 60_000, None, T0 + 1)
    assert isinstance(fence, TxnTransit) and fence.state is TxnState.PREPARE_EPOCH_FENCE
    assert fence.producer_epoch == 1
    abort = plan_end_txn(
        meta, 100, fence.producer_epoch, TransactionResult.ABORT, from_client=False, now_ms=T0 + 1
    )
    assert isinstance(abort, TxnTransit) and abort.state is TxnState.PREPARE_ABORT
    assert abort.producer_epoch == 1 and meta.producer_epoch == 1
    meta.complete(abort)
    # the zombie (epoch 0) is fenced everywhere now
    assert plan_add_partitions(meta, 100, 0, {A0}, T0) is ErrorCode.producer_fenced
    assert (
        plan_end_txn(meta, 100, 0, TransactionResult.COMMIT, from_client=True, now_ms=T0)
        is ErrorCode.producer_fenced
    )
    apply(meta, plan_complete(meta, 100, 1, TransactionResult.ABORT, T0 + 2))
    init(meta, T0 + 3)  # the client's retry of InitProducerId
    assert meta.producer_epoch == 2 and meta.state is TxnState.EMPTY


def test_failed_fence_write_does_not_bump_twice() -> None:
    meta = new_meta()
    init(meta)
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    fence = meta.prepare_fence_epoch(T0)
    abort = plan_end_txn(
        meta, 100, fence.producer_epoch, TransactionResult.ABORT, from_client=False, now_ms=T0
    )
    assert isinstance(abort, TxnTransit)
    meta.cancel_pending()  # the write failed
    meta.failed_epoch_fence = True
    again = meta.prepare_fence_epoch(T0 + 1)
    assert again.producer_epoch == 1


def test_timeout_detection() -> None:
    meta = new_meta(timeout_ms=1000)
    init(meta)
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    assert not meta.timed_out(T0 + 1000)
    assert meta.timed_out(T0 + 1001)


def test_expiration_only_when_settled_and_idle() -> None:
    meta = new_meta()
    init(meta, T0)
    assert not meta.should_expire(T0 + 999, 1000)
    assert meta.should_expire(T0 + 1000, 1000)
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    assert not meta.should_expire(T0 + 10**9, 1000)


def test_kip360_expected_epoch() -> None:
    meta = new_meta()
    init(meta)  # epoch 0
    init(meta, expected=(100, 0))  # epoch 1, last 0
    assert (meta.producer_epoch, meta.last_producer_epoch) == (1, 0)
    init(meta, expected=(100, 0))  # a retry of the bump: same epoch
    assert meta.producer_epoch == 1
    assert plan_init_producer_id(meta, 60_000, (100, 7), T0) is ErrorCode.producer_fenced
    assert plan_init_producer_id(meta, 60_000, (555, 1), T0) is ErrorCode.producer_fenced


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    meta = new_meta()
    init(meta)
    meta.producer_epoch = MAX_PRODUCER_EPOCH - 1
    assert needs_new_producer_id(meta, None)
    with pytest.raises(ValueError, match="new producer id"):
        plan_init_producer_id(meta, 60_000, None, T0)
    apply(meta, plan_init_producer_id(meta, 60_000, None, T0, new_producer_id=200))
    assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (200, 0, 100)


def test_verify_partitions() -> None:
    meta = new_meta()
    init(meta)
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    assert verify_partitions(meta, 100, 0, [A0, A1]) == {
        A0: ErrorCode.none,
        A1: ErrorCode.transaction_abortable,
    }
    assert verify_partitions(meta, 100, 9, [A0]) == {A0: ErrorCode.producer_fenced}
    assert verify_partitions(None, 100, 0, [A0]) == {A0: ErrorCode.invalid_producer_id_mapping}


def test_illegal_transitions_raise() -> None:
    meta = new_meta()
    init(meta)
    with pytest.raises(IllegalTransitionError):
        meta.prepare_abort_or_commit(TxnState.PREPARE_COMMIT, T0)  # from Empty
    apply(meta, plan_add_partitions(meta, 100, 0, {A0}, T0))
    transit = meta.prepare_abort_or_commit(TxnState.PREPARE_ABORT, T0)
    with pytest.raises(IllegalTransitionError):
        meta.prepare_dead()  # another change is pending
    meta.complete(transit)
    with pytest.raises(IllegalTransitionError):
        meta.complete(transit)  # nothing pending
    with pytest.raises(IllegalTransitionError):
        meta.prepare_add_partitions({A1}, T0)  # PrepareAbort -> Ongoing
    meta.remove_partition(A0)  # a deleted topic's marker is dropped while preparing
    assert not meta.partitions
    init(fresh := new_meta())
    with pytest.raises(IllegalTransitionError):
        fresh.remove_partition(A0)


class TransactionMachine(RuleBasedStateMachine):
    """Random requests against one transactional id. Model: what a client may rely on."""

    def __init__(self) -> None:
        super().__init__()
        self.meta = new_meta()
        self.now = T0
        self.next_pid = 1000
        self.epochs_seen: dict[int, int] = {}
        self.committed_txns = 0
        self.client = (-1, -1)  # the latest (pid, epoch) InitProducerId returned

    def _write(self, plan: TxnTransit | ErrorCode, fail: bool) -> bool:
        if not isinstance(plan, TxnTransit):
            return False
        if fail:
            self.meta.cancel_pending()
            return False
        self.meta.complete(plan)
        return True

    @rule(dt=st.integers(0, 100_000))
    def tick(self, dt: int) -> None:
        self.now += dt

    @rule(fail=st.booleans(), use_expected=st.booleans())
    def init_producer_id(self, fail: bool, use_expected: bool) -> None:
        m = self.meta
        expected = self.client if use_expected and self.client[0] >= 0 else None
        new_pid = None
        if needs_new_producer_id(m, expected):
            new_pid = self.next_pid
            self.next_pid += 1
        plan = plan_init_producer_id(m, m.timeout_ms, expected, self.now, new_pid)
        if isinstance(plan, TxnTransit) and plan.state is TxnState.PREPARE_EPOCH_FENCE:
            abort = plan_end_txn(
                m,
                plan.producer_id,
                plan.producer_epoch,
                TransactionResult.ABORT,
                from_client=False,
                now_ms=self.now,
            )
            assert isinstance(abort, TxnTransit)
            if fail:
                m.cancel_pending()
                m.failed_epoch_fence = True
            else:
                m.complete(abort)
            return
        if self._write(plan, fail):
            self.client = (m.producer_id, m.producer_epoch)

    @rule(
        parts=st.sets(st.sampled_from([A0, A1, B0]), min_size=1),
        fail=st.booleans(),
        stale=st.booleans(),
    )
    def add_partitions(self, parts: set[TopicPartition], fail: bool, stale: bool) -> None:
        pid, epoch = self.client
        if stale:
            epoch -= 1
        before = set(self.meta.partitions)
        plan = plan_add_partitions(self.meta, pid, epoch, parts, self.now)
        if stale and epoch != self.meta.producer_epoch:
            assert plan in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_id_mapping)
        if self._write(plan, fail):
            assert self.meta.state is TxnState.ONGOING
            assert self.meta.partitions == before | parts

    @rule(commit=st.booleans(), fail=st.booleans())
    def end_txn(self, commit: bool, fail: bool) -> None:
        pid, epoch = self.client
        result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        plan = plan_end_txn(self.meta, pid, epoch, result, from_client=True, now_ms=self.now)
        self._write(plan, fail)

    @precondition(lambda self: self.meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT))
    @rule(fail=st.booleans())
    def markers_written(self, fail: bool) -> None:
        m = self.meta
        result = (
            TransactionResult.COMMIT
            if m.state is TxnState.PREPARE_COMMIT
            else TransactionResult.ABORT
        )
        plan = plan_complete(m, m.producer_id, m.producer_epoch, result, self.now)
        if self._write(plan, fail) and result is TransactionResult.COMMIT:
            self.committed_txns += 1

    @rule()
    def coordinator_times_out(self) -> None:
        m = self.meta
        if not m.timed_out(self.now):
            return
        fence = m.prepare_fence_epoch(self.now)
        abort = plan_end_txn(
            m,
            fence.producer_id,
            fence.producer_epoch,
            TransactionResult.ABORT,
            from_client=False,
            now_ms=self.now,
        )
        assert isinstance(abort, TxnTransit)
        m.complete(abort)
        assert m.state is TxnState.PREPARE_ABORT

    @invariant()
    def epochs_never_go_back(self) -> None:
        m = self.meta
        seen = self.epochs_seen.get(m.producer_id, -1)
        assert m.producer_epoch >= seen
        self.epochs_seen[m.producer_id] = m.producer_epoch

    @invariant()
    def settled_states_hold_no_partitions(self) -> None:
        m = self.meta
        assert m.pending is None  # every rule completes or cancels what it prepares
        if m.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            assert not m.partitions
        if m.state is TxnState.ONGOING:
            assert m.partitions and m.start_ms >= 0
        assert m.state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)

    @invariant()
    def a_fenced_client_is_refused(self) -> None:
        m = self.meta
        pid, epoch = self.client
        if pid == m.producer_id and epoch < m.producer_epoch:
            assert plan_add_partitions(m, pid, epoch, {A0}, self.now) is ErrorCode.producer_fenced


TransactionMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestTransactionMachine = pytest.mark.property(TransactionMachine.TestCase)
