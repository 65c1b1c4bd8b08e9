"""The pure parts of the exactly-once sink (``spark_connector/exactly_once.py``): the sink
log's records and files, the source offsets read from Spark's offset log, and the option
validation that runs when a writer is created."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from spark_connector.exactly_once import (
    KEEP_BATCHES,
    BatchRecord,
    ExactlyOnce,
    ExactlyOnceError,
    SinkLog,
    exactly_once_settings,
    source_offsets,
)
from spark_connector.txn_client import OpenTransaction

pytestmark = pytest.mark.unit

# The first two lines of a Spark 4.2 offsets/<N> file (trimmed conf).
SPARK_HEADER = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1795593873442,"conf":'
    '{"spark.sql.shuffle.partitions":"2","spark.sql.streaming.multipleWatermarkPolicy":"min"}}\n'
)


# --- BatchRecord -----------------------------------------------------------------------------


def test_batch_record_json_round_trip() -> None:
    record = BatchRecord(
        7,
        "prepared",
        [OpenTransaction("millrace-ab-0-0", 12, 3), OpenTransaction("millrace-ab-2-1", 5, 0)],
        "enricher",
        {"orders": {0: 64, 1: 65, 10: 0}, "other": {3: 9_000_000_000}},
    )
    text = record.to_json()
    data = json.loads(text)
    assert data == {
        "batch": 7,
        "state": "prepared",
        "transactions": [["millrace-ab-0-0", 12, 3], ["millrace-ab-2-1", 5, 0]],
        "group": "enricher",
        "offsets": {"orders": {"0": 64, "1": 65, "10": 0}, "other": {"3": 9_000_000_000}},
    }
    assert BatchRecord.from_json(text) == record


def test_batch_record_without_group_or_offsets() -> None:
    record = BatchRecord(0, "committed")
    assert BatchRecord.from_json(record.to_json()) == record
    # a record written without the optional keys reads back with their defaults
    assert BatchRecord.from_json(
        '{"batch": 3, "state": "committed", "transactions": [["t-0-0", 1, 2]]}'
    ) == BatchRecord(3, "committed", [OpenTransaction("t-0-0", 1, 2)], None, {})


# --- SinkLog ---------------------------------------------------------------------------------


def test_sink_log_put_get_and_committed_through(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path / "millrace-sink"))
    assert log.batches() == [] and log.committed_through() == -1 and log.get(0) is None
    log.put(BatchRecord(0, "committed"))
    log.put(BatchRecord(2, "prepared", [OpenTransaction("p-0-0", 1, 0)], "g", {"t": {0: 5}}))
    (tmp_path / "millrace-sink" / "notes.txt").write_text("ignored")
    assert log.batches() == [0, 2]
    assert log.committed_through() == 2  # prepared counts: the next run finishes it
    record = log.get(2)
    assert record is not None and record.state == "prepared" and record.offsets == {"t": {0: 5}}
    record.state = "committed"
    log.put(record)
    assert log.get(2) == record
    assert sorted(os.listdir(tmp_path / "millrace-sink")) == ["0.json", "2.json", "notes.txt"]
    log.forget(2)
    log.forget(2)  # forgetting twice is fine
    assert log.committed_through() == 0


def test_sink_log_keeps_the_last_batches(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    for batch in range(KEEP_BATCHES + 5):
        log.put(BatchRecord(batch, "committed"))
    assert log.batches() == list(range(5, KEEP_BATCHES + 5))


# --- source_offsets --------------------------------------------------------------------------


def _offsets_file(checkpoint: Path, batch: int, *sources: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(SPARK_HEADER + "\n".join(sources))


def test_source_offsets_from_sparks_offset_log(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "millrace-sink")
    _offsets_file(tmp_path, 4, '{"orders": {"0": 64, "1": 65, "2": 71}}')
    assert source_offsets(log_dir, 4) == {"orders": {0: 64, 1: 65, 2: 71}}
    assert source_offsets(log_dir, 5) == {}  # no offsets/5


def test_source_offsets_of_several_sources(tmp_path: Path) -> None:
    """Every Kafka-shaped source line counts; other sources' offsets (a file source, Delta,
    the rate source, a source without an offset yet: "-") are skipped."""
    _offsets_file(
        tmp_path,
        0,
        '{"a": {"0": 10}, "b": {"1": 3}}',
        '{"logOffset":0}',
        "-",
        '{"sourceVersion":1,"reservoirId":"x","reservoirVersion":5,"index":-1}',
        "42",
        '{"c": {"0": "not an offset"}}',
        '{"a": {"1": 7}}',
    )
    assert source_offsets(str(tmp_path / "millrace-sink"), 0) == {
        "a": {0: 10, 1: 7},
        "b": {1: 3},
    }


def test_source_offsets_ignore_the_header_lines(tmp_path: Path) -> None:
    """The metadata line is a JSON object too: only the lines after it are sources."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"t": {"0": 1}}\n')
    assert source_offsets(str(tmp_path / "millrace-sink"), 0) == {}


# --- option validation -----------------------------------------------------------------------


def _settings(
    streaming: bool = True, producer: dict[str, str] | None = None, **options: str
) -> ExactlyOnce | None:
    return exactly_once_settings(options, streaming=streaming, producer_options=producer or {})


def test_at_least_once_is_the_default() -> None:
    assert _settings() is None
    assert _settings(deliveryGuarantee="at-least-once") is None
    assert _settings(deliveryguarantee=" AT-LEAST-ONCE ") is None


@pytest.mark.parametrize(
    ("streaming", "options", "producer", "message"),
    [
        (
            True,
            {"deliveryGuarantee": "exactly_once"},
            {},
            "option 'deliveryGuarantee' is 'exactly_once'; use 'at-least-once' (the default) "
            "or 'exactly-once'",
        ),
        (
            False,
            {"commitOffsetsToGroup": "g"},
            {},
            "option 'commitOffsetsToGroup' commits the source offsets in the output's "
            "transaction and needs 'deliveryGuarantee=exactly-once'",
        ),
        (
            True,
            {"deliveryGuarantee": "exactly-once"},
            {},
            "'deliveryGuarantee=exactly-once' needs option 'checkpointLocation'",
        ),
        (
            False,
            {"deliveryGuarantee": "exactly-once", "batchId": "3"},
            {},
            "'deliveryGuarantee=exactly-once' needs option 'checkpointLocation'",
        ),
        (
            True,
            {"deliveryGuarantee": "exactly-once", "checkpointLocation": "hdfs://nn:8020/c"},
            {},
            "option 'checkpointLocation' is 'hdfs://nn:8020/c': exactly-once keeps its commit "
            "log next to Spark's checkpoint and needs a local or mounted file system path",
        ),
        (
            True,
            {"deliveryGuarantee": "exactly-once", "checkpointLocation": "s3a://bucket/c"},
            {},
            "needs a local or mounted file system path",
        ),
        (
            True,
            {"deliveryGuarantee": "exactly-once", "checkpointLocation": "/c"},
            {"transactional.id": "mine"},
            "option 'kafka.transactional.id' is not supported with exactly-once: the sink "
            "chooses one id per task (set 'transactionalIdPrefix' to choose their prefix)",
        ),
        (
            True,
            {"deliveryGuarantee": "exactly-once", "checkpointLocation": "/c"},
            {"transaction.timeout.ms": "15m"},
            "option 'kafka.transaction.timeout.ms' is '15m': an integer is needed",
        ),
        (
            False,
            {"deliveryGuarantee": "exactly-once", "batchId": "x", "checkpointLocation": "/c"},
            {},
            "option 'batchId' is 'x': an integer is needed",
        ),
        (
            True,
            {
                "deliveryGuarantee": "exactly-once",
                "checkpointLocation": "/c",
                "commitOffsetsToGroup": " ",
            },
            {},
            "option 'commitOffsetsToGroup' must name a consumer group",
        ),
        (
            False,
            {"deliveryGuarantee": "exactly-once", "commitOffsetsToGroup": "g"},
            {},
            "option 'commitOffsetsToGroup' needs the source offsets of a micro-batch: use it "
            "on a streaming write or with write_batch(...) in foreachBatch",
        ),
    ],
)
def test_settings_that_cannot_work_name_the_option(
    streaming: bool, options: dict[str, str], producer: dict[str, str], message: str
) -> None:
    with pytest.raises(ExactlyOnceError) as info:
        _settings(streaming, producer, **options)
    assert message in str(info.value)


def test_streaming_settings(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    eos = _settings(
        deliveryGuarantee="Exactly-Once",
        checkpointLocation=str(checkpoint),
        commitOffsetsToGroup="enricher",
    )
    assert eos is not None
    digest = hashlib.sha1(str(checkpoint.resolve()).encode()).hexdigest()[:16]
    assert eos == ExactlyOnce(
        prefix=f"millrace-{digest}",
        log_dir=str(checkpoint.resolve() / "millrace-sink"),
        group="enricher",
        timeout_ms=900_000,
        committed_through=-1,
        batch_id=None,
    )
    assert eos.transactional_id(3, 1) == f"millrace-{digest}-3-1"
    assert eos.offsets_transactional_id == f"millrace-{digest}-offsets"
    # the same directory as a file: URI (either spelling) gets the same prefix and log
    for uri in (f"file://{checkpoint}", f"file:{checkpoint}"):
        same = _settings(deliveryGuarantee="exactly-once", checkpointLocation=uri)
        assert same is not None and (same.prefix, same.log_dir) == (eos.prefix, eos.log_dir)
    # the highest batch of the sink log (prepared or committed) is what tasks skip
    SinkLog(str(eos.log_dir)).put(BatchRecord(4, "prepared"))
    again = _settings(deliveryGuarantee="exactly-once", checkpointLocation=str(checkpoint))
    assert again is not None and again.committed_through == 4


def test_prefix_timeout_and_batch_id_options(tmp_path: Path) -> None:
    eos = _settings(
        False,
        {"transaction.timeout.ms": "60000"},
        deliveryGuarantee="exactly-once",
        checkpointLocation=str(tmp_path),
        batchId="12",
        transactionalIdPrefix="orders-sink",
    )
    assert eos is not None
    assert (eos.prefix, eos.timeout_ms, eos.batch_id) == ("orders-sink", 60_000, 12)
    assert eos.log_dir == str(tmp_path.resolve() / "millrace-sink")


def test_a_batch_write_gets_a_random_prefix_and_no_log() -> None:
    first = _settings(False, deliveryGuarantee="exactly-once")
    second = _settings(False, deliveryGuarantee="exactly-once")
    assert first is not None and second is not None
    assert first.log_dir is None and first.batch_id is None and first.committed_through == -1
    assert first.prefix.startswith("millrace-write-") and first.prefix != second.prefix


def test_relative_and_tilde_checkpoints_resolve_as_spark_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark (Hadoop's Path) resolves a relative checkpoint location against the working
    directory and does not expand ``~``: the sink's log and the offsets it reads must be in
    the directory Spark uses."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for location, expected in (
        ("ckpt", tmp_path / "ckpt"),
        ("~/ckpt", tmp_path / "~" / "ckpt"),
    ):
        eos = _settings(deliveryGuarantee="exactly-once", checkpointLocation=location)
        assert eos is not None
        assert eos.log_dir == str(expected.resolve() / "millrace-sink"), location
