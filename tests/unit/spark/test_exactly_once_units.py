"""The pure parts of the exactly-once sink (``spark_connector/exactly_once/``): the sink
log's records and files, the source offsets read from Spark's offset log, the option
validation that runs when a writer is created, and the sink's names (which transactions are
its own)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from spark_connector.exactly_once.offsets import source_offsets
from spark_connector.exactly_once.settings import (
    SLOTS,
    ExactlyOnce,
    ExactlyOnceError,
    Rewrite,
    SinkOptions,
    parse_sink_options,
    sink_dir_name,
)
from spark_connector.exactly_once.sink_log import (
    KEEP_BATCHES,
    BatchRecord,
    RunRecord,
    SinkLog,
    TaskEntry,
    new_run_name,
)
from spark_connector.kafka.transactions import OpenTransaction

pytestmark = pytest.mark.unit

# The first two lines of a Spark 4.2 offsets/<N> file (trimmed conf).
SPARK_HEADER = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1795593873442,"conf":'
    '{"spark.sql.shuffle.partitions":"2","spark.sql.streaming.multipleWatermarkPolicy":"min"}}\n'
)


# --- BatchRecord -----------------------------------------------------------------------------


def _record() -> BatchRecord:
    return BatchRecord(
        7,
        "prepared",
        "0001795000000000-abc",
        [
            TaskEntry(
                0,
                64,
                "open",
                OpenTransaction("millrace-ab-0-3", 12, 4),
                OpenTransaction("millrace-ab-0-3", 12, 3),
                [("out", 0, 10, 42), ("out", 1, 5, 37)],
            ),
            TaskEntry(1, 0, "empty"),
        ],
        "enricher",
        {"orders": {0: 64, 1: 65, 10: 0}, "other": {3: 9_000_000_000}},
        {"out": 2},
        2,
    )


def test_batch_record_json_round_trip() -> None:
    record = _record()
    data = json.loads(record.to_json())
    assert data["version"] == 2
    assert data["offsets"] == {"orders": {"0": 64, "1": 65, "10": 0}, "other": {"3": 9_000_000_000}}
    assert data["tasks"][0] == {
        "partition": 0,
        "attempt": 0,
        "rows": 64,
        "state": "open",
        "txn": ["millrace-ab-0-3", 12, 4],
        "wrote": ["millrace-ab-0-3", 12, 3],
        "outputs": [["out", 0, 10, 42], ["out", 1, 5, 37]],
    }
    assert BatchRecord.from_json(record.to_json()) == record
    assert record.transactional_ids() == {"millrace-ab-0-3"}
    assert record.entry(1) is not None and record.entry(5) is None


def test_records_of_the_first_format_read_with_unknown_partitions() -> None:
    """Records written before sinks had ids: ``transactions`` lists, no partitions."""
    old = BatchRecord.from_json(
        '{"batch": 3, "state": "prepared", "transactions": [["t-0-0", 1, 2], ["t-1-0", 5, 0]],'
        ' "group": "g", "offsets": {"in": {"0": 9}}}'
    )
    assert (old.batch, old.state, old.group, old.offsets) == (3, "prepared", "g", {"in": {0: 9}})
    assert [(t.partition, t.state, t.txn) for t in old.tasks] == [
        (-1, "open", OpenTransaction("t-0-0", 1, 2)),
        (-2, "open", OpenTransaction("t-1-0", 5, 0)),
    ]
    done = BatchRecord.from_json('{"batch": 0, "state": "committed", "transactions": []}')
    assert done.committed and done.tasks == []


# --- SinkLog ---------------------------------------------------------------------------------


def test_sink_log_put_get_create_and_committed_through(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path / "millrace-sink"))
    assert log.batches() == [] and log.committed_through() == -1 and log.get(0) is None
    log.put(BatchRecord(0, "committed"))
    assert log.create(_record())
    assert not log.create(BatchRecord(7, "prepared", "other run"))  # exclusive: the first wins
    assert log.get(7) == _record()
    (tmp_path / "millrace-sink" / "notes.txt").write_text("ignored")
    assert log.batches() == [0, 7]
    assert log.committed_through() == 7  # prepared counts: the next run finishes it
    assert log.latest() == _record()
    record = _record()
    record.state = "committed"
    log.put(record)
    assert log.get(7) == record
    assert sorted(os.listdir(tmp_path / "millrace-sink")) == ["0.json", "7.json", "notes.txt"]
    log.forget(7)
    log.forget(7)  # forgetting twice is fine
    assert log.committed_through() == 0


def test_sink_log_keeps_the_last_batches(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    for batch in range(KEEP_BATCHES + 5):
        log.put(BatchRecord(batch, "committed"))
    assert log.batches() == list(range(5, KEEP_BATCHES + 5))


def test_the_sink_id_is_made_once_even_by_racing_drivers(tmp_path: Path) -> None:
    ids: list[str] = []

    def make() -> None:
        ids.append(SinkLog(str(tmp_path / "s")).sink_id())

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and len(ids[0]) == 16
    int(ids[0], 16)
    assert SinkLog(str(tmp_path / "other")).sink_id() != ids[0]


def test_run_records_and_run_names_sort_by_start(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    assert log.run() is None
    first = new_run_name()
    record = RunRecord.mine(first, OpenTransaction("p-s-driver", 9, 2))
    log.put_run(record)
    assert log.run() == record
    later = new_run_name()
    assert later > first  # a later run's name is greater (zero-padded ms, then a nonce)
    assert len(first) == len(later)


def test_a_write_batch_sink_starts_above_the_batches_of_the_first_log_layout(
    tmp_path: Path,
) -> None:
    """Before sinks had their own directories, write_batch kept its records in
    ``millrace-sink/``: a sink of the new layout starts above them (the old behaviour)."""
    top = SinkLog(str(tmp_path / "millrace-sink"))
    top.put(BatchRecord(5, "committed"))
    sink = SinkLog(str(tmp_path / "millrace-sink" / "sinks" / "orders"))
    assert sink.committed_through() == 5
    sink.put(BatchRecord(6, "committed"))
    assert sink.committed_through() == 6
    assert top.legacy_through() == -1  # the streaming sink's log is itself the top level


# --- source_offsets --------------------------------------------------------------------------


def _offsets_file(checkpoint: Path, batch: int, *sources: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(SPARK_HEADER + "\n".join(sources))


def test_source_offsets_from_sparks_offset_log(tmp_path: Path) -> None:
    _offsets_file(tmp_path, 4, '{"orders": {"0": 64, "1": 65, "2": 71}}')
    assert source_offsets(str(tmp_path), 4) == {"orders": {0: 64, 1: 65, 2: 71}}
    assert source_offsets(str(tmp_path), 5) == {}  # no offsets/5


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
    assert source_offsets(str(tmp_path), 0) == {
        "a": {0: 10, 1: 7},
        "b": {1: 3},
    }


def test_source_offsets_ignore_the_header_lines(tmp_path: Path) -> None:
    """The metadata line is a JSON object too: only the lines after it are sources."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"t": {"0": 1}}\n')
    assert source_offsets(str(tmp_path), 0) == {}


# --- option validation -----------------------------------------------------------------------


def _settings(
    streaming: bool = True,
    producer: dict[str, str] | None = None,
    topic: str | None = "out",
    **options: str,
) -> SinkOptions | None:
    return parse_sink_options(
        options, streaming=streaming, producer_options=producer or {}, topic=topic
    )


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
            "option 'commitOffsetsToGroup' commits the source offsets with the output's "
            "transactions and needs 'deliveryGuarantee=exactly-once'",
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
            True,
            {"deliveryGuarantee": "exactly-once", "checkpointLocation": "/c"},
            {"transaction.timeout.ms": "0"},
            "option 'kafka.transaction.timeout.ms' is 0: it must be positive",
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
        (
            True,
            {
                "deliveryGuarantee": "exactly-once",
                "checkpointLocation": "/c",
                "transactionalIdPrefix": " ",
            },
            {},
            "option 'transactionalIdPrefix' must not be empty",
        ),
        (
            True,
            {
                "deliveryGuarantee": "exactly-once",
                "checkpointLocation": "/c",
                "acceptPartitionCountChange": "maybe",
            },
            {},
            "option 'acceptPartitionCountChange' is 'maybe': true or false",
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
    opts = _settings(
        deliveryGuarantee="Exactly-Once",
        checkpointLocation=str(checkpoint),
        commitOffsetsToGroup="enricher",
    )
    assert opts == SinkOptions(
        prefix="millrace",
        log_dir=str(checkpoint.resolve() / "millrace-sink"),
        checkpoint=str(checkpoint.resolve()),
        group="enricher",
        timeout_ms=900_000,
        timeout_set=False,
        batch_id=None,
    )
    # the same directory as a file: URI (either spelling) gets the same log
    for uri in (f"file://{checkpoint}", f"file:{checkpoint}"):
        same = _settings(deliveryGuarantee="exactly-once", checkpointLocation=uri)
        assert same is not None and same.log_dir == opts.log_dir


def test_write_batch_sinks_have_a_log_each(tmp_path: Path) -> None:
    """write_batch (batchId): one log per sink, named by the sink's name or its topic."""
    base = {"deliveryGuarantee": "exactly-once", "checkpointLocation": str(tmp_path)}
    by_topic = _settings(False, topic="orders-eu", batchId="12", **base)
    named = _settings(False, topic="orders-eu", batchId="12", sinkName="audit", **base)
    odd = _settings(False, topic=None, batchId="1", sinkName="../x y", **base)
    sinks = tmp_path.resolve() / "millrace-sink" / "sinks"
    assert by_topic is not None and by_topic.log_dir == str(sinks / "orders-eu")
    assert named is not None and named.log_dir == str(sinks / "audit")
    assert odd is not None and Path(str(odd.log_dir)).parent == sinks
    assert sink_dir_name("../x y").startswith(".._x_y-") and sink_dir_name("a.b-c") == "a.b-c"
    with pytest.raises(ExactlyOnceError, match="needs name="):
        _settings(False, topic=None, batchId="1", **base)


def test_prefix_timeout_and_batch_id_options(tmp_path: Path) -> None:
    opts = _settings(
        False,
        {"transaction.timeout.ms": "60000"},
        deliveryGuarantee="exactly-once",
        checkpointLocation=str(tmp_path),
        batchId="12",
        transactionalIdPrefix="orders-sink",
    )
    assert opts is not None
    assert (opts.prefix, opts.timeout_ms, opts.timeout_set, opts.batch_id) == (
        "orders-sink",
        60_000,
        True,
        12,
    )


def test_a_batch_write_has_no_log() -> None:
    opts = _settings(False, deliveryGuarantee="exactly-once")
    assert opts is not None and opts.log_dir is None and opts.batch_id is None


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
        opts = _settings(deliveryGuarantee="exactly-once", checkpointLocation=location)
        assert opts is not None
        assert opts.log_dir == str(expected.resolve() / "millrace-sink"), location


# --- names: which transactions are the sink's own ----------------------------------------------


def _eos(prefix: str, sink_id: str, **kwargs: object) -> ExactlyOnce:
    opts = SinkOptions(prefix, "/c/millrace-sink", "/c", None, 60_000, False)
    return ExactlyOnce(opts, sink_id, **kwargs)  # type: ignore[arg-type]


def test_a_sink_owns_exactly_its_own_transactional_ids() -> None:
    """Neighbouring prefixes (``orders`` and ``orders-eu``) never match each other's ids."""
    orders = _eos("orders", "0123456789abcdef")
    orders_eu = _eos("orders-eu", "fedcba9876543210")
    ids = {
        orders.task_transactional_id(3, 17),
        orders.driver_transactional_id,
        orders_eu.task_transactional_id(3, 17),
        orders_eu.driver_transactional_id,
    }
    assert {i for i in ids if orders.owns(i)} == {
        "orders-0123456789abcdef-3-1",
        "orders-0123456789abcdef-driver",
    }
    assert {i for i in ids if orders_eu.owns(i)} == {
        "orders-eu-fedcba9876543210-3-1",
        "orders-eu-fedcba9876543210-driver",
    }
    assert orders.is_task_id("orders-0123456789abcdef-3-1")
    assert not orders.is_task_id(orders.driver_transactional_id)
    assert orders.base == "orders-0123456789abcdef"
    # a bounded number of ids: the task attempt id picks one of SLOTS slots per partition
    assert {orders.task_transactional_id(0, t) for t in range(1000)} == {
        f"orders-0123456789abcdef-0-{s}" for s in range(SLOTS)
    }


def test_which_tasks_write() -> None:
    """A batch the log holds is skipped, except the partitions to rewrite."""
    fresh = _eos("p", "0" * 16, committed_through=4)
    assert not fresh.task_writes(4, 0) and fresh.task_writes(5, 0)
    some = _eos("p", "0" * 16, committed_through=4, rewrite=Rewrite(4, False, frozenset({1})))
    assert some.task_writes(4, 1) and not some.task_writes(4, 0) and not some.task_writes(3, 1)
    every = _eos("p", "0" * 16, committed_through=4, rewrite=Rewrite(4, True))
    assert every.task_writes(4, 0) and every.task_writes(4, 9)
    no_log = ExactlyOnce(SinkOptions("p", None, None, None, 60_000, False), "1" * 16)
    assert no_log.task_writes(0, 0)
