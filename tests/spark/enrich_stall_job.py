"""Test-only variant of ``jobs/enrich_exactly_once.py`` for ``test_exactly_once_faults.py``:
the same query (``build_query`` of the real job builds and starts it), with an identity Python
UDF on the input's ``value`` that stalls chosen write tasks, so a test can inject a fault while
those tasks hold open transactions, or make Spark launch a speculative copy of a task.

``--stall-batch B --stall-seconds S`` (with ``--stall-partition P``, default every partition,
``--stall-attempt A``, default 0, ``--stall-after-rows R``, default 350): the task of
micro-batch ``B``, Spark partition ``P``, attempt ``A`` sleeps ``S`` seconds once its
``R``-th row has gone through the UDF. With the test's settings (Python workers' pipes flushed
every KiB, Arrow batches of 100 rows for the sink's writer) the UDF's first 200 rows have
reached the JVM by then, and Spark hands the writer a batch of 100 once it holds the 101st
row, so at least 100 rows are in the task's open transaction while it sleeps. Without
``--stall-batch`` the UDF is there but never sleeps (a restart of a stalled job uses that: the
query is the same, and the replayed batch does not stall again).

Every other argument is the real job's (``--bootstrap``, ``--input``, ...). Run it like the
real job: ``spark-submit tests/spark/enrich_stall_job.py ...`` with the checkout on
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jobs.enrich_exactly_once as job


def _parse_stall(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--stall-batch", type=int, default=None)
    p.add_argument("--stall-partition", type=int, default=-1, help="-1: every partition")
    p.add_argument("--stall-attempt", type=int, default=0)
    p.add_argument("--stall-after-rows", type=int, default=350)
    p.add_argument("--stall-seconds", type=float, default=0.0)
    return p.parse_known_args(argv)


def stall_transform(stall: argparse.Namespace) -> Any:
    """A function DataFrame -> DataFrame: ``value`` through the stalling identity UDF."""
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import BinaryType

    batch, partition, attempt = stall.stall_batch, stall.stall_partition, stall.stall_attempt
    after, seconds = stall.stall_after_rows, stall.stall_seconds
    rows_seen: dict[int, int] = {}  # per task attempt, in one (reused) Python worker

    def stall_value(value: bytes | None) -> bytes | None:
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (
            batch is not None
            and ctx is not None
            and ctx.attemptNumber() == attempt
            and partition in (-1, ctx.partitionId())
            and ctx.getLocalProperty("streaming.sql.batchId") == str(batch)
        ):
            n = rows_seen[ctx.taskAttemptId()] = rows_seen.get(ctx.taskAttemptId(), 0) + 1
            if n == after:
                time.sleep(seconds)
        return value

    stall_udf = udf(stall_value, BinaryType())

    def transform(df: Any) -> Any:
        return df.withColumn("value", stall_udf(col("value")))

    return transform


class _StalledReader:
    """``spark.readStream`` as ``build_query`` uses it (``format``, ``option``, ``load``);
    ``load()`` returns the source DataFrame passed through the stall UDF."""

    def __init__(self, reader: Any, transform: Any) -> None:
        self._reader = reader
        self._transform = transform

    def format(self, source: str) -> _StalledReader:
        return _StalledReader(self._reader.format(source), self._transform)

    def option(self, key: str, value: Any) -> _StalledReader:
        return _StalledReader(self._reader.option(key, value), self._transform)

    def load(self) -> Any:
        return self._transform(self._reader.load())


class _StalledSession:
    """The SparkSession, except that ``readStream`` is a :class:`_StalledReader`."""

    def __init__(self, spark: Any, transform: Any) -> None:
        self._spark = spark
        self._transform = transform

    @property
    def readStream(self) -> _StalledReader:
        return _StalledReader(self._spark.readStream, self._transform)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)


def main(argv: list[str] | None = None) -> int:
    stall, rest = _parse_stall(sys.argv[1:] if argv is None else argv)
    build_query = job.build_query

    def stalled_build_query(spark: Any, args: argparse.Namespace) -> Any:
        return build_query(_StalledSession(spark, stall_transform(stall)), args)

    job.build_query = stalled_build_query  # main() looks it up at call time
    return int(job.main(rest))


if __name__ == "__main__":
    raise SystemExit(main())
