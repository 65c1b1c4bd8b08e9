"""The checkers: what each workload's history must satisfy, as counts (pure functions).

Every checker takes what the clients recorded during the run (acknowledgements, what each
consumer saw, commits, transaction outcomes) and what is in the cluster afterwards (a
final read of each topic from offset 0 once every fault is healed), and returns a dict of
counts: the figures ``RELIABILITY.md`` shows. A count whose name is in :data:`ANOMALIES`
must be 0 for the run to pass; the others describe the run.

Value formats written by the workloads (``tests/fault/workloads.py``):

* producers: ``"<producer>:<seq>"``, ``seq`` counting from 0 per producer instance;
* transactional copies: ``"<txid>:<txn>:<src partition>:<src offset>"`` (``txn`` counts
  the copier's transactions).

Concurrency: pure functions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

# Counts that are bugs when non-zero.
ANOMALIES = frozenset(
    {
        "lost",
        "duplicated",
        "offset_mismatch",
        "reordered",
        "lost_commits",
        "skipped",
        "aborted_reads",
        "committed_missing",
        "txn_order_violations",
        "nonmonotonic",
        "inconsistent",
        "client_errors",  # a workload thread died: its guarantees went unchecked
    }
)


class Ack(NamedTuple):
    """An acknowledged record: who wrote it, and where the broker said it went."""

    producer: str
    seq: int
    partition: int
    offset: int | None  # None: acknowledged without an offset (see check_producers)
    at: float = 0.0  # wall-clock time the acknowledgement arrived (for post-mortems)


class Seen(NamedTuple):
    """A record as a consumer (or the final read) saw it."""

    partition: int
    offset: int
    value: str


def anomalies(counts: Mapping[str, int]) -> dict[str, int]:
    """The non-zero anomaly counts of a checker's result."""
    return {k: v for k, v in counts.items() if k in ANOMALIES and v}


def _producer_seq(value: str) -> tuple[str, int] | None:
    producer, sep, seq = value.rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return producer, int(seq)


def _resent_after_epoch_bump(
    final: list[Seen], origins: Mapping[tuple[int, int], tuple[int, int]]
) -> set[tuple[int, int]]:
    """The later copies of a duplicated value that the same producer id wrote under a newer
    producer epoch than the first copy: librdkafka's idempotent producer, after an
    OUT_OF_ORDER_SEQUENCE_NUMBER on one partition, bumps its epoch and sends every record it
    has no acknowledgement for again with fresh sequence numbers, including records a leader
    had appended (confluentinc/librdkafka#4953, open; the same happens against Apache Kafka).
    No broker can recognise such a copy: the idempotence key (producer id, epoch, sequence)
    is new."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for rec in final:
        where[rec.value].append((rec.partition, rec.offset))
    out: set[tuple[int, int]] = set()
    for locations in where.values():
        if len(locations) < 2:
            continue
        locations.sort()
        first = origins.get(locations[0])
        for loc in locations[1:]:
            later = origins.get(loc)
            if (
                first is not None
                and later is not None
                and later[0] == first[0]
                and later[1] > first[1]
            ):
                out.add(loc)
    return out


def check_producers(
    acks: Iterable[Ack],
    final: Iterable[Seen],
    origins: Mapping[tuple[int, int], tuple[int, int]] | None = None,
) -> dict[str, int]:
    """Workload 1 (idempotent producers, acks=all): every acknowledged record is in the
    final log exactly once, at the offset its acknowledgement named; each producer's records
    keep their order within a partition; no offset holds two values.

    ``origins`` maps (partition, offset) to the (producer id, producer epoch) of the batch
    holding it, read from the log: a copy the client itself sent again under a bumped epoch
    (:func:`_resent_after_epoch_bump`) is counted as ``resent_after_client_epoch_bump``,
    not as a duplicate or a reordering the broker made."""
    acks = list(acks)
    final = list(final)
    resent = _resent_after_epoch_bump(final, origins) if origins else set()
    at: dict[tuple[int, int], str] = {}
    copies: Counter[str] = Counter()
    for rec in final:
        at[(rec.partition, rec.offset)] = rec.value
        copies[rec.value] += 1
    acked_values = {f"{a.producer}:{a.seq}" for a in acks}
    lost = sum(1 for v in acked_values if copies[v] == 0)
    duplicated = sum(n - 1 for n in copies.values() if n > 1) - len(resent)
    # an idempotent producer acknowledges a record whose own response was lost once a later
    # one of the partition is acknowledged (it must have been written first): no offset
    without_offset = sum(1 for a in acks if a.offset is None or a.offset < 0)
    mismatch = sum(
        1
        for a in acks
        if a.offset is not None
        and a.offset >= 0
        and at.get((a.partition, a.offset)) != f"{a.producer}:{a.seq}"
    )
    reordered = 0
    last: dict[tuple[str, int], int] = {}
    for rec in sorted(final, key=lambda r: (r.partition, r.offset)):
        parsed = _producer_seq(rec.value)
        if parsed is None or (rec.partition, rec.offset) in resent:
            continue
        key = (parsed[0], rec.partition)
        if key in last and parsed[1] < last[key]:
            reordered += 1
        last[key] = max(parsed[1], last.get(key, -1))
    return {
        "acknowledged": len(acks),
        "read_back": len(final),
        "lost": lost,
        "duplicated": duplicated,
        "offset_mismatch": mismatch,
        "reordered": reordered,
        "unacknowledged_written": sum(1 for v in copies if v not in acked_values),
        "acknowledged_without_offset": without_offset,
        "resent_after_client_epoch_bump": len(resent),
    }


def check_consumer_views(
    views: Mapping[str, Iterable[Seen]], final: Iterable[Seen]
) -> dict[str, int]:
    """Workload 4 (the consumers' view): each consumer sees offsets of a partition in
    increasing order, and no two readers (the consumers, and the final read) ever disagree
    on the record at an offset (Jepsen's "inconsistent offsets")."""
    truth: dict[tuple[int, int], str] = {(r.partition, r.offset): r.value for r in final}
    seen_at: dict[tuple[int, int], set[str]] = defaultdict(set)
    nonmonotonic = 0
    reads = 0
    for records in views.values():
        prev: dict[int, int] = {}
        for rec in records:
            reads += 1
            if rec.partition in prev and rec.offset <= prev[rec.partition]:
                nonmonotonic += 1
            prev[rec.partition] = rec.offset
            seen_at[(rec.partition, rec.offset)].add(rec.value)
    inconsistent = 0
    for key, values in seen_at.items():
        if len(values) > 1 or (key in truth and truth[key] not in values) or key not in truth:
            inconsistent += 1
    return {
        "consumers": len(views),
        "records_read": reads,
        "nonmonotonic": nonmonotonic,
        "inconsistent": inconsistent,
    }


def check_group(
    processed: Iterable[tuple[int, int]],
    commits: Iterable[tuple[int, int]],
    final_committed: Mapping[int, int],
) -> dict[str, int]:
    """Workload 2 (a consumer group committing after processing): no acknowledged commit is
    lost (the group's final committed offset of a partition is at least every offset a
    commit of it was acknowledged for), and no record below the committed offset was
    skipped (every offset in ``[0, committed)`` was processed by some member)."""
    done: dict[int, set[int]] = defaultdict(set)
    copies: Counter[tuple[int, int]] = Counter()
    for partition, offset in processed:
        done[partition].add(offset)
        copies[(partition, offset)] += 1
    best: dict[int, int] = {}
    n_commits = 0
    for partition, offset in commits:
        n_commits += 1
        best[partition] = max(offset, best.get(partition, -1))
    lost_commits = sum(1 for p, o in best.items() if final_committed.get(p, -1) < o)
    skipped = 0
    for p, committed in final_committed.items():
        skipped += sum(1 for o in range(max(committed, 0)) if o not in done[p])
    return {
        "records_processed": sum(copies.values()),
        "commits_acknowledged": n_commits,
        "lost_commits": lost_commits,
        "skipped": skipped,
        "processed_twice": sum(n - 1 for n in copies.values() if n > 1),
    }


class TxnRecord(NamedTuple):
    """A record of the transactional copy's output, parsed."""

    partition: int
    offset: int
    txid: str
    txn: int
    src_partition: int
    src_offset: int


def parse_txn_value(partition: int, offset: int, value: str) -> TxnRecord | None:
    parts = value.rsplit(":", 3)
    if len(parts) != 4 or not all(p.lstrip("-").isdigit() for p in parts[1:]):
        return None
    return TxnRecord(partition, offset, parts[0], int(parts[1]), int(parts[2]), int(parts[3]))


def check_transactions(
    outcomes: Mapping[tuple[str, int], str],
    written: Mapping[tuple[str, int], int],
    output: Iterable[TxnRecord],
    source_committed: Mapping[int, int],
    live_views: Iterable[TxnRecord] = (),
) -> dict[str, int]:
    """Workload 3 (consume-transform-produce with the offsets in the transaction), read
    with read_committed: no record of an aborted transaction is ever read (Jepsen's G1a,
    in the final read or by a live read_committed consumer), every committed transaction's
    records are all there, no source record is copied twice or lost below the group's
    committed offsets, and on each output partition a copier's transactions appear in the
    order they committed.

    ``outcomes`` maps (txid, txn) to ``committed``, ``aborted`` or ``unknown`` (the commit
    call failed: either is allowed); ``written`` to the number of records the transaction
    produced."""
    output = list(output)
    aborted_reads = sum(1 for r in output if outcomes.get((r.txid, r.txn)) == "aborted")
    aborted_reads += sum(1 for r in live_views if outcomes.get((r.txid, r.txn)) == "aborted")
    per_txn: Counter[tuple[str, int]] = Counter((r.txid, r.txn) for r in output)
    committed_missing = sum(
        max(0, written.get(key, 0) - per_txn[key])
        for key, outcome in outcomes.items()
        if outcome == "committed"
    )
    sources: Counter[tuple[int, int]] = Counter((r.src_partition, r.src_offset) for r in output)
    duplicated = sum(n - 1 for n in sources.values() if n > 1)
    lost = 0
    for p, committed in source_committed.items():
        lost += sum(1 for o in range(max(committed, 0)) if (p, o) not in sources)
    order = 0
    last: dict[tuple[int, str], int] = {}
    for r in sorted(output, key=lambda r: (r.partition, r.offset)):
        key = (r.partition, r.txid)
        if key in last and r.txn < last[key]:
            order += 1
        last[key] = max(r.txn, last.get(key, -1))
    counted = Counter(outcomes.values())
    return {
        "transactions_committed": counted["committed"],
        "transactions_aborted": counted["aborted"],
        "transactions_unknown": counted["unknown"],
        "records_read_committed": len(output),
        "aborted_reads": aborted_reads,
        "committed_missing": committed_missing,
        "duplicated": duplicated,
        "lost": lost,
        "txn_order_violations": order,
    }
