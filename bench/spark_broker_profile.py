"""Where a Millrace broker spends its CPU serving Spark's own JVM connector
(``format("kafka")``): a py-spy profile of the broker during one ``count()``.

What runs: one Millrace broker (``millrace cluster up``), a 2-partition topic loaded with
``--records`` 100-byte records by kafka-producer-perf-test (acks=1), a Spark ``local[2]``
session (as workload 5 of ``bench.compare``) that counts the topic once to warm up, then
again while py-spy samples the broker (200 samples/s, on-CPU only). The broker's CPU seconds
come from ``/proc`` around the measured count. Spark's connector polls in slices of
``max.poll.records`` (500) and asks ListOffsets twice per poll, so a count of N records is
N / 250 ListOffsets besides the fetches: both show in the profile.

Output: Markdown on stdout and in ``benchmarks/spark-broker-profile.md``. Progress goes to
stderr. Reproduce: ``.venv/bin/python -m bench.spark_broker_profile --records 4000000``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench import hotspots, perf_tools, spark_workload
from bench.basics import progress
from bench.common import ROOT
from bench.procstat import cpu_seconds
from bench.systems import MillraceSystem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=4_000_000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "spark-broker-profile.md")
    a = ap.parse_args()
    if a.records <= 0:
        raise SystemExit(f"--records must be positive, got {a.records}")
    with tempfile.TemporaryDirectory(prefix="millrace-spark-broker-profile-") as tmp:
        system = MillraceSystem(Path(tmp) / "cluster", 1)
        try:
            topic = "spark-broker-profile"
            system.create_topic(topic, 2, 1)
            progress(f"loading {a.records:,} records")
            perf_tools.producer_perf(
                system.bootstrap, topic, a.records, 100, {"acks": "1", "linger.ms": "5"}
            )
            spark = spark_workload.session()
            progress('warm-up count with format("kafka")')
            spark_workload.count(spark, "kafka", system.bootstrap, topic, a.records)
            raw = Path(tmp) / "broker.txt"
            pid = system.pids[0]
            spy = hotspots.start(pid, raw)
            time.sleep(1.0)  # py-spy attached
            progress('count with format("kafka") under py-spy')
            cpu0 = cpu_seconds(pid)
            seconds = spark_workload.count(spark, "kafka", system.bootstrap, topic, a.records)
            cpu = cpu_seconds(pid) - cpu0
            hotspots.stop(spy)
            spark.stop()
        finally:
            system.stop()
        gb = a.records * 100 / 1e9
        text = "\n\n".join(
            [
                '# The Millrace broker serving Spark\'s format("kafka")',
                f"`count()` of {a.records:,} records of 100 bytes (2 partitions, Spark "
                f"`local[2]`): {a.records / seconds:,.0f} rows/s; broker CPU {cpu:.2f} s "
                f"({cpu / gb:.2f} s per GB of values). py-spy on the broker during the count, "
                "200 samples/s, on-CPU samples only. Reproduce: "
                f"`.venv/bin/python -m bench.spark_broker_profile --records {a.records}`.",
                hotspots.render(hotspots.summarize(raw)),
            ]
        )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
