"""Transactions as the cleaner meets them, reading a log in offset order (Kafka's
``CleanedTransactionMetadata``).

The cleaner is given the aborted transactions of the range it reads (from the ``.txnindex``
files, ordered by first offset). Reading a batch first *opens* every aborted transaction
that starts at or before the batch's last offset. Then:

* a transactional data batch of a producer with an open aborted transaction belongs to that
  transaction: it is discarded (and noted, so the abort marker is kept while data of the
  transaction remains); one of a producer without one belongs to a transaction that will
  commit, which is noted so the commit marker is kept while its data remains;
* an abort marker closes the producer's aborted transaction. If this round met data of that
  transaction, the marker must stay (the data may still be in segments not rewritten yet) and
  the transaction is written to the cleaned segment's ``.txnindex``; otherwise the marker is
  *discardable*;
* a commit marker is discardable when this round met none of the transaction's data;
* an empty control batch (one a previous round emptied) is discardable.

A discardable marker is not dropped at once: like a tombstone it is stamped with a delete
horizon and removed by a round after ``delete.retention.ms`` (see ``batch_filter``).

Concurrency: owned by one cleaning round.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.log.transaction_index import AbortedTxn
from broker.protocol.control_records import ControlType

__all__ = ["CleanedTransactions"]


@dataclass(slots=True)
class _OpenAbort:
    txn: AbortedTxn
    data_seen: bool = False


class CleanedTransactions:
    """Aborted/committed transaction bookkeeping of one cleaning round."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._pending: deque[AbortedTxn] = deque()
        self._seen_first: set[tuple[int, int]] = set()
        self._open_aborts: dict[int, _OpenAbort] = {}
        self._open_commits: set[int] = set()
        self.add_aborted(aborted)
        #: where kept aborted transactions go (the ``.txnindex`` of the segment being written)
        self.on_kept_abort: Callable[[AbortedTxn], None] | None = None

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        """More aborted transactions, in first-offset order (duplicates are ignored)."""
        for txn in sorted(aborted, key=lambda t: t.first_offset):
            ident = (txn.producer_id, txn.first_offset)
            if ident not in self._seen_first:
                self._seen_first.add(ident)
                self._pending.append(txn)

    def _open_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._open_aborts.setdefault(txn.producer_id, _OpenAbort(txn))

    def on_data_batch(self, producer_id: int, transactional: bool, last_offset: int) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction."""
        self._open_up_to(last_offset)
        if not transactional:
            return False
        found = self._open_aborts.get(producer_id)
        if found is not None:
            found.data_seen = True
            return True
        self._open_commits.add(producer_id)
        return False

    def on_control_batch(
        self, producer_id: int, last_offset: int, control_type: ControlType | None
    ) -> bool:
        """A control batch was read (``control_type`` None: it has no record); True when it
        is discardable."""
        self._open_up_to(last_offset)
        if control_type is None:
            return True
        if control_type is ControlType.ABORT:
            found = self._open_aborts.pop(producer_id, None)
            if found is not None and found.data_seen:
                if self.on_kept_abort is not None:
                    self.on_kept_abort(found.txn)
                return False
            return True
        if control_type is ControlType.COMMIT:
            if producer_id in self._open_commits:
                self._open_commits.discard(producer_id)
                return False
            return True
        return False
