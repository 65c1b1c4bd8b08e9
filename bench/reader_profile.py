"""Where a ``format("millrace")`` reading task spends its time, with each fetcher: py-spy
profiles of the task and of the broker serving it.

What runs: one Millrace broker (``millrace cluster up``), a 1-partition topic loaded with
``--records`` 100-byte records by kafka-producer-perf-test (acks=1), then for each fetcher
(``librdkafka``: a confluent-kafka consumer per task, the path before issue 16; ``direct``:
record batches fetched and decoded into Arrow natively) a child process that runs
:func:`spark_connector.read.consumer.read_range` over the whole partition, exactly what a Spark task
runs minus Spark, sampled by py-spy from its start (``hotspots.launch_profiled``), while a
second py-spy samples the broker (``hotspots.start``). The broker's CPU seconds per GB read
come from ``/proc`` around each read.

Output: Markdown on stdout and in ``benchmarks/reader-profile.md`` (rows/s, broker CPU per GB,
then the top functions of each profile). Progress goes to stderr.

Reproduce: ``.venv/bin/python -m bench.reader_profile --records 5000000``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench import hotspots, perf_tools
from bench.basics import progress
from bench.common import ROOT
from bench.procstat import cpu_seconds
from bench.systems import MillraceSystem

FETCHERS = ("librdkafka", "direct")


def _child(bootstrap: str, topic: str, records: int, fetcher: str, result: Path) -> None:
    """Read the whole partition as one task would; write rows and seconds to ``result``."""

    from spark_connector.read.consumer import read_range, record_schema
    from spark_connector.read.options import parse_read_options
    from spark_connector.read.planner import OffsetRange

    schema = record_schema()
    options = parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "fetcher": fetcher},
        streaming=False,
    )
    t0 = time.perf_counter()
    rows = sum(b.num_rows for b in read_range(options, OffsetRange(topic, 0, 0, records), schema))
    seconds = time.perf_counter() - t0
    if rows != records:
        raise SystemExit(f"{fetcher}: read {rows} rows, expected {records}")
    result.write_text(f"{rows} {seconds}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "reader-profile.md")
    ap.add_argument(
        "--child", nargs=5, metavar=("BOOTSTRAP", "TOPIC", "RECORDS", "FETCHER", "RESULT")
    )
    a = ap.parse_args()
    if a.child:
        _child(a.child[0], a.child[1], int(a.child[2]), a.child[3], Path(a.child[4]))
        return
    parts = [
        "# Where a reading task spends its time",
        f"One task reading {a.records:,} records of 100 bytes from a 1-partition topic on one "
        "Millrace broker, outside Spark (`read_range`, what a Spark task runs). py-spy samples "
        "the task from its start and the broker meanwhile (200 samples/s, on-CPU only). "
        "Reproduce: `.venv/bin/python -m bench.reader_profile "
        f"--records {a.records}`.",
    ]
    with tempfile.TemporaryDirectory(prefix="millrace-reader-profile-") as tmp:
        system = MillraceSystem(Path(tmp) / "cluster", 1)
        try:
            topic = "reader-profile"
            system.create_topic(topic, 1, 1)
            progress(f"loading {a.records:,} records")
            perf_tools.producer_perf(system.bootstrap, topic, a.records, props={"acks": "1"})
            for fetcher in FETCHERS:
                progress(f"reading with fetcher={fetcher} under py-spy")
                task_raw = Path(tmp) / f"task-{fetcher}.txt"
                broker_raw = Path(tmp) / f"broker-{fetcher}.txt"
                cmd = [sys.executable, "-m", "bench.reader_profile", "--child"]
                result = Path(tmp) / f"result-{fetcher}.txt"
                cmd += [system.bootstrap, topic, str(a.records), fetcher, str(result)]
                broker_cpu = cpu_seconds(system.pids[0])
                broker_spy = hotspots.start(system.pids[0], broker_raw)
                task = hotspots.launch_profiled(cmd, task_raw)
                task.wait()  # py-spy exits when the task does
                hotspots.stop(task)
                hotspots.stop(broker_spy)
                broker_cpu = cpu_seconds(system.pids[0]) - broker_cpu
                if not result.exists():
                    raise SystemExit(f"fetcher={fetcher}: the reading task failed")
                fields = result.read_text().split()
                rows, seconds = int(fields[0]), float(fields[1])
                gb = a.records * 100 / 1e9
                parts.append(
                    f"## fetcher={fetcher}\n\n{rows / seconds:,.0f} rows/s in one task "
                    f"({seconds:.2f} s); broker CPU {broker_cpu:.2f} s "
                    f"({broker_cpu / gb:.1f} s per GB of values)."
                )
                parts.append("### The task\n\n" + hotspots.render(hotspots.summarize(task_raw)))
                parts.append("### The broker\n\n" + hotspots.render(hotspots.summarize(broker_raw)))
        finally:
            system.stop()
    text = "\n\n".join(parts) + "\n"
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
