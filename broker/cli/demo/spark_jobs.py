"""The demo's Spark jobs, each a real ``spark-submit`` of a job in ``jobs/``.

Concurrency: the demo's one thread; each job is a child process waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from broker.cli.demo.events import TOPIC, quiet
from broker.cli.demo.output import progress_line, say

COUNTS_TOPIC = "demo-counts"


def spark_submit(
    script: str,
    job_args: list[str],
    run_dir: Path,
    log_name: str,
    submit_args: list[str],
    during: Callable[[int], None] | None = None,
) -> tuple[int, str]:
    """``spark-submit jobs/<script>`` in local mode (``local[2,4]``: a failed task is retried,
    as on a cluster) with a progress line; ``during(pid)`` is called every half second while
    it runs. Returns its exit code and its output (also kept in ``run_dir/<log_name>``)."""
    root = Path(__file__).resolve().parents[3]
    submit = Path(sys.executable).with_name("spark-submit")
    cmd = [
        str(submit) if submit.exists() else "spark-submit",
        "--master",
        "local[2,4]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        *submit_args,
        str(root / "jobs" / script),
        *job_args,
    ]
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    log_path = run_dir / log_name
    say(f"$ spark-submit jobs/{script} {' '.join(job_args[2:])}   (Spark output in {log_path})")
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
        started = time.monotonic()
        while proc.poll() is None:
            progress_line(f"  job running ... {time.monotonic() - started:4.0f}s")
            if during is not None:
                during(proc.pid)
            time.sleep(0.5)
    if sys.stdout.isatty():
        progress_line("")
        sys.stdout.write("\r")
    output = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        say(f"  spark-submit failed (exit {proc.returncode}):\n{output[-2000:]}")
    return proc.returncode, output


def run_stream_job(bootstrap: str, run_dir: Path) -> int:
    """``spark-submit jobs/stream_counts.py`` over the demo topic; returns its exit code."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    admin.create_topics(
        [
            NewTopic(
                COUNTS_TOPIC,
                num_partitions=1,
                replication_factor=1,
                config={"cleanup.policy": "compact", "segment.bytes": "1048576"},
            )
        ]
    )[COUNTS_TOPIC].result()
    code, _output = spark_submit(
        "stream_counts.py",
        [
            "--bootstrap",
            bootstrap,
            "--input",
            TOPIC,
            "--output",
            COUNTS_TOPIC,
            "--checkpoint",
            str(run_dir / "stream-counts-checkpoint"),
            "--group",
            "demo-counter",
            "--window",
            "1 minute",
            "--available-now",
        ],
        run_dir,
        "spark-submit.log",
        [],
    )
    return code


DELTA_ROWS = re.compile(r"topic_to_delta: the Delta table holds (\d+) rows")


def run_delta_job(bootstrap: str, run_dir: Path) -> int | None:
    """``spark-submit jobs/topic_to_delta.py``: the demo topic into a Delta table (Delta
    Lake's jars from ``make setup``); returns the table's row count, None on failure."""
    from spark_connector.session import MissingJarsError, submit_args

    try:
        delta_args = submit_args(delta=True)
    except MissingJarsError as exc:
        say(f"  {exc}")
        return None
    table = run_dir / "delta" / TOPIC
    code, output = spark_submit(
        "topic_to_delta.py",
        [
            "--bootstrap",
            bootstrap,
            "--topic",
            TOPIC,
            "--table",
            str(table),
            "--checkpoint",
            str(run_dir / "topic-to-delta-checkpoint"),
            "--decode",
            "--available-now",
        ],
        run_dir,
        "spark-submit-delta.log",
        delta_args,
    )
    match = DELTA_ROWS.search(output)
    if code != 0 or match is None:
        return None
    rows = int(match.group(1))
    say(f"  Delta table {table}: {rows:,} rows (one per event, each micro-batch written once)")
    return rows


def print_table(bootstrap: str, limit: int = 5) -> int:
    """Show ``demo-counts`` as a table (``millrace table``: the latest count of every (user,
    minute)) and return the sum of the counts."""
    import argparse

    from broker.cli.table import latest_rows

    args = argparse.Namespace(
        bootstrap_server=bootstrap,
        dir=None,
        command_config=None,
        log_level="WARNING",
        topic=COUNTS_TOPIC,
        isolation_level="read_committed",
        batch=None,  # the newest micro-batch boundary (the stream-counts job is exactly once)
        no_boundary=False,
        timeout=60.0,
    )
    rows = latest_rows(args)
    values = [json.loads(r.value) for r in rows]
    values.sort(key=lambda v: -int(v.get("count", 0)))
    say(
        f"$ millrace table --topic {COUNTS_TOPIC}   ({len(rows):,} (user, minute) rows; the largest)"
    )
    for v in values[:limit]:
        window = v.get("window") or {}
        say(f"    {v.get('key')}  {window.get('start')}  count={v.get('count')}")
    return sum(int(v.get("count", 0)) for v in values)


# --- exactly once, with a crash --------------------------------------------------------------

ENRICHED_TOPIC = "demo-enriched"
ENRICH_GROUP = "demo-enricher"
ENRICH_PREFIX = "demo-enrich"


def python_workers(root_pid: int) -> list[int]:
    """Spark's Python workers under ``root_pid``: the processes forked by a
    ``pyspark.daemon`` (the daemon itself is left alone)."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdlines[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])

    def under_root(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == root_pid:
                return True
            pid = parents.get(pid, 1)
            seen += 1
        return False

    return [
        pid
        for pid, ppid in parents.items()
        if "pyspark.daemon" in cmdlines.get(ppid, "") and under_root(pid)
    ]


def task_workers(root_pid: int) -> list[int]:
    """The executors' Python workers under ``root_pid``: forked by the ``pyspark.daemon`` of
    ``pyspark.worker`` (they run tasks; a forked worker keeps its daemon's command line).
    The daemons of the driver's planning and commit workers (``pyspark.daemon
    pyspark.sql.worker.*``: a Python data source's read planner, its streaming sink's commit
    and abort) are left out: killing those fails the driver's step itself, which Spark
    does not retry."""
    out = []
    for pid in python_workers(root_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if [a for a in args if a][-1:] == [b"pyspark.worker"]:
            out.append(pid)
    return out


def _kill_once_mid_write(bootstrap: str) -> Callable[[int], None]:
    """A ``during`` callback: the first time a write task of the job holds an open
    transaction, SIGKILL the executors' Python workers (Spark retries their tasks). Only
    the executors' (:func:`task_workers`): the driver's commit of a micro-batch also runs
    in a forked Python worker, while the tasks' transactions are still open, and killing it
    failed the batch (Spark aborts it and stops the query) in about one demo run in ten."""
    from spark_connector.kafka.transactions import TxnClient

    state = {"killed": False}

    def during(pid: int) -> None:
        if state["killed"]:
            return
        try:
            with TxnClient(bootstrap, timeout_s=5.0) as client:
                open_txns = client.list_ongoing(ENRICH_PREFIX + "-")
        except Exception:  # noqa: BLE001 - the cluster is busy; try again next tick
            return
        if not open_txns:
            return
        workers = task_workers(pid)
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        if workers:
            state["killed"] = True
            if sys.stdout.isatty():
                sys.stdout.write("\n")
            say(
                f"  ! killed {len(workers)} Python worker(s) while {len(open_txns)} write "
                "transaction(s) were open: Spark retries their tasks"
            )

    return during


def run_enrich_job(bootstrap: str, run_dir: Path, records: int) -> bool:
    """``spark-submit jobs/enrich_exactly_once.py`` (exactly-once, offsets committed with the
    output), its Python workers killed once mid-write; checks the output holds every event
    exactly once and the group's offsets are at the input's end."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker.cli.demo.events import PARTITIONS

    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    admin.create_topics([NewTopic(ENRICHED_TOPIC, PARTITIONS, 1)])[ENRICHED_TOPIC].result()
    code, _output = spark_submit(
        "enrich_exactly_once.py",
        [
            "--bootstrap",
            bootstrap,
            "--input",
            TOPIC,
            "--output",
            ENRICHED_TOPIC,
            "--group",
            ENRICH_GROUP,
            "--checkpoint",
            str(run_dir / "enrich-checkpoint"),
            "--max-offsets-per-trigger",
            str(max(records // 4, 1)),
            "--option",
            f"transactionalIdPrefix={ENRICH_PREFIX}",
            "--available-now",
        ],
        run_dir,
        "spark-submit-enrich.log",
        [],
        during=_kill_once_mid_write(bootstrap),
    )
    if code != 0:
        return False
    consumer = Consumer(
        quiet(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "millrace-demo-reader",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
    )
    ids: set[int] = set()
    duplicates = 0
    try:
        consumer.assign([TopicPartition(ENRICHED_TOPIC, p, 0) for p in range(PARTITIONS)])
        ended: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                ended.add(msg.partition() or 0)
                continue
            value = (msg.value() or b"").split(b"|", 1)[0].lower()
            event_id = int(json.loads(value)["id"])
            if event_id in ids:
                duplicates += 1
            ids.add(event_id)
    finally:
        consumer.close()
    group = Consumer(quiet({"bootstrap.servers": bootstrap, "group.id": ENRICH_GROUP}))
    try:
        offsets = group.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        group.close()
    behind = sum(max(o.offset, 0) for o in offsets)
    say(
        f"  {ENRICHED_TOPIC}: {len(ids):,} distinct events of {records:,}, {duplicates:,} "
        f"duplicates (read_committed); group {ENRICH_GROUP} committed {behind:,} of {records:,}"
    )
    return len(ids) == records and duplicates == 0 and behind == records
