"""The fault harness's checkers (tests/fault/checks.py) on hand-made histories: a clean
history passes with the right counts, and each anomaly they exist to catch is counted."""

from __future__ import annotations

import pytest

from tests.fault.checks import (
    Ack,
    Seen,
    TxnRecord,
    anomalies,
    check_consumer_views,
    check_group,
    check_producers,
    check_transactions,
    parse_txn_value,
)

pytestmark = pytest.mark.unit


def _log(*values: tuple[int, int, str]) -> list[Seen]:
    return [Seen(p, o, v) for p, o, v in values]


def test_producers_clean_history() -> None:
    acks = [Ack("a", 0, 0, 0), Ack("a", 1, 0, 1), Ack("b", 0, 1, 0)]
    final = _log((0, 0, "a:0"), (0, 1, "a:1"), (1, 0, "b:0"), (1, 1, "b:1"))
    counts = check_producers(acks, final)
    assert counts["acknowledged"] == 3
    assert counts["unacknowledged_written"] == 1  # b:1 was written, its ack never came
    assert anomalies(counts) == {}


def test_producers_lost_duplicated_misplaced_and_reordered() -> None:
    acks = [Ack("a", 0, 0, 0), Ack("a", 1, 0, 1), Ack("a", 2, 0, 2), Ack("a", 3, 0, 3)]
    final = _log((0, 0, "a:0"), (0, 1, "a:2"), (0, 2, "a:1"), (0, 3, "a:1"))
    counts = check_producers(acks, final)
    assert counts["lost"] == 1  # a:3 nowhere
    assert counts["duplicated"] == 1  # a:1 twice
    assert counts["offset_mismatch"] == 3  # a:1, a:2 and a:3 are not where acked
    assert counts["reordered"] == 2  # both copies of a:1 come after a:2 on partition 0


def test_consumer_views_agree_and_move_forward() -> None:
    final = _log((0, 0, "x"), (0, 1, "y"))
    views = {"c0": _log((0, 0, "x"), (0, 1, "y")), "c1": _log((0, 0, "x"))}
    assert anomalies(check_consumer_views(views, final)) == {}


def test_consumer_views_catch_disagreement_and_going_back() -> None:
    final = _log((0, 0, "x"), (0, 1, "y"))
    views = {
        "c0": _log((0, 0, "x"), (0, 1, "y"), (0, 0, "x")),  # went back to offset 0
        "c1": _log((0, 1, "z"), (0, 2, "w")),  # disagrees at 1; offset 2 never existed
    }
    counts = check_consumer_views(views, final)
    assert counts["nonmonotonic"] == 1
    assert counts["inconsistent"] == 2


def test_group_commits_and_skips() -> None:
    processed = [(0, 0), (0, 1), (0, 2), (1, 0)]
    commits = [(0, 2), (0, 3), (1, 1)]
    assert anomalies(check_group(processed, commits, {0: 3, 1: 1})) == {}
    counts = check_group(processed, commits, {0: 2, 1: 3})
    assert counts["lost_commits"] == 1  # partition 0 committed 3, ended at 2
    assert counts["skipped"] == 2  # partition 1 offsets 1 and 2 never processed


def test_transactions_clean_and_each_anomaly() -> None:
    outcomes = {("t", 1): "committed", ("t", 2): "aborted", ("t", 3): "unknown"}
    written = {("t", 1): 2, ("t", 2): 1, ("t", 3): 1}
    good = [TxnRecord(0, 0, "t", 1, 0, 0), TxnRecord(0, 1, "t", 1, 0, 1)]
    assert anomalies(check_transactions(outcomes, written, good, {0: 2})) == {}

    bad = [
        TxnRecord(0, 5, "t", 2, 0, 2),  # an aborted transaction's record
        TxnRecord(0, 6, "t", 1, 0, 0),  # txn 1 after txn 2 on the partition; one of 2 only
        TxnRecord(0, 7, "t", 3, 0, 0),  # source (0, 0) copied twice
    ]
    counts = check_transactions(outcomes, written, bad, {0: 4}, live_views=[bad[0]])
    assert counts["aborted_reads"] == 2  # final read and the live reader
    assert counts["committed_missing"] == 1
    assert counts["duplicated"] == 1
    assert counts["lost"] == 2  # source offsets 1 and 3 below the committed 4
    assert counts["txn_order_violations"] == 1


def test_parse_txn_value() -> None:
    assert parse_txn_value(2, 9, "copier-0:12:3:45") == TxnRecord(2, 9, "copier-0", 12, 3, 45)
    assert parse_txn_value(0, 0, "junk") is None


def test_producers_acknowledgement_without_an_offset_is_not_a_mismatch() -> None:
    """librdkafka acknowledges a record whose own response was lost, without an offset,
    once a later record of the partition is acknowledged: still checked for presence."""
    acks = [Ack("a", 0, 0, None), Ack("a", 1, 0, 1)]
    counts = check_producers(acks, _log((0, 0, "a:0"), (0, 1, "a:1")))
    assert anomalies(counts) == {} and counts["acknowledged_without_offset"] == 1
    assert check_producers(acks, _log((0, 1, "a:1")))["lost"] == 1


def test_producers_copy_sent_again_under_a_bumped_epoch_is_the_clients() -> None:
    """librdkafka#4953: after an epoch bump the client sends unacknowledged records again
    with fresh sequence numbers; the log shows the later copy under a newer epoch of the
    same producer id. Counted apart; a copy under the same epoch stays a duplicate."""
    acks = [Ack("a", 0, 0, 0), Ack("a", 1, 0, 3), Ack("a", 2, 0, 4)]
    final = _log((0, 0, "a:0"), (0, 1, "a:1"), (0, 2, "b:0"), (0, 3, "a:1"), (0, 4, "a:2"))
    origins = {(0, 0): (7, 0), (0, 1): (7, 0), (0, 2): (8, 0), (0, 3): (7, 1), (0, 4): (7, 1)}
    counts = check_producers(acks, final, origins)
    assert counts["resent_after_client_epoch_bump"] == 1
    assert anomalies(counts) == {}
    same_epoch = {**origins, (0, 3): (7, 0)}
    counts = check_producers(acks, final, same_epoch)
    assert counts["resent_after_client_epoch_bump"] == 0
    assert anomalies(counts) == {"duplicated": 1}
    assert anomalies(check_producers(acks, final)) == {"duplicated": 1}
