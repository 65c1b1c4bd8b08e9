"""SparkSessions with the JVM pieces Millrace's Spark features use: Delta Lake and Spark's
own Kafka connector.

Platform (pinned exactly in ``pyproject.toml``): pyspark 4.2.0 with delta-spark 4.4.0.
Delta 4.4.0 declares ``pyspark>=4.0.1,<=4.2.0`` and no Delta release supports Spark 4.3
(delta-spark 4.1.0 with pyspark 4.3 fails every read with ``NoSuchMethodError``), so the
pair is pinned rather than ranged: a range lets pip fall back to a broken pair.

The jars come from Maven Central through ``make setup`` into the project's ignored JVM
cache (``.cache/jvm/delta``: ``delta-spark_2.13-4.4.0.jar`` and ``delta-storage-4.4.0.jar``;
``.cache/jvm/spark-kafka``: ``spark-sql-kafka-0-10_2.13-4.2.0.jar`` and its dependencies),
and are handed to Spark with ``spark.jars``. ``--packages`` / ``spark.jars.packages`` is
not used: its Ivy resolver reaches for repositories this project's machines cannot reach.
``MILLRACE_JVM_CACHE`` points elsewhere when the cache lives outside the checkout (for
example on a cluster's shared disk).

Example::

    from spark_connector.session import delta_session

    spark = delta_session("events-to-delta")          # local[*] unless --master says
    (spark.read.format("millrace").option("kafka.bootstrap.servers", bs)
         .option("subscribe", "events").load()
         .write.format("delta").mode("append").save("/tmp/events-delta"))

``spark.jars`` must be set before the session's JVM starts: configure the builder
(:func:`configure`) before the first ``getOrCreate()`` of the process. Under
``spark-submit`` the JVM is already running when the Python driver starts, so the jars must
be on its command line instead; ``python -m spark_connector.session`` prints those
arguments (:func:`submit_args`), and :func:`delta_session` says so when they are missing.

Concurrency: plain functions; ``getOrCreate`` is Spark's own (one session per process).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DELTA_CATALOG",
    "DELTA_EXTENSIONS",
    "DELTA_VERSION",
    "JVM_CACHE_ENV",
    "SPARK_VERSION",
    "MissingJarsError",
    "configure",
    "delta_session",
    "jars",
    "jvm_cache_dir",
    "submit_args",
]

SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"
JVM_CACHE_ENV = "MILLRACE_JVM_CACHE"
DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DELTA_DIR = "delta"
SPARK_KAFKA_DIR = "spark-kafka"


class MissingJarsError(FileNotFoundError):
    """The jars a session needs are not in the JVM cache; the message says what to run."""


def jvm_cache_dir() -> Path:
    """``$MILLRACE_JVM_CACHE``, else the checkout's ``.cache/jvm`` (where ``make setup``
    puts the jars)."""
    override = os.environ.get(JVM_CACHE_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / ".cache" / "jvm"


def _jars_in(directory: Path, what: str) -> list[str]:
    found = sorted(str(p) for p in directory.glob("*.jar"))
    if not found:
        raise MissingJarsError(
            f"{what} jars not found in {directory}: run `make setup` (it fetches them from "
            f"Maven Central), or set {JVM_CACHE_ENV} to the directory that holds "
            f"{DELTA_DIR}/ and {SPARK_KAFKA_DIR}/"
        )
    return found


def jars(
    *, delta: bool = True, spark_kafka: bool = False, cache_dir: Path | None = None
) -> list[str]:
    """Paths of the jars for ``spark.jars``: Delta Lake's and/or Spark's Kafka connector's.

    Raises MissingJarsError naming the directory when a requested set is absent."""
    base = cache_dir if cache_dir is not None else jvm_cache_dir()
    out: list[str] = []
    if delta:
        out += _jars_in(base / DELTA_DIR, f"Delta Lake {DELTA_VERSION}")
    if spark_kafka:
        out += _jars_in(base / SPARK_KAFKA_DIR, f"Spark's Kafka connector {SPARK_VERSION}")
    return out


def configure(
    builder: Any,
    *,
    delta: bool = True,
    spark_kafka: bool = False,
    cache_dir: Path | None = None,
    extra_jars: list[str] | None = None,
) -> Any:
    """Put the jars on ``builder`` (a ``SparkSession.Builder``) with ``spark.jars`` and, for
    Delta, its SQL extension and catalog; returns the builder."""
    paths = [*jars(delta=delta, spark_kafka=spark_kafka, cache_dir=cache_dir)]
    paths += extra_jars or []
    if paths:
        builder = builder.config("spark.jars", ",".join(paths))
    if delta:
        builder = builder.config("spark.sql.extensions", DELTA_EXTENSIONS).config(
            "spark.sql.catalog.spark_catalog", DELTA_CATALOG
        )
    return builder


def submit_args(
    *, delta: bool = True, spark_kafka: bool = False, cache_dir: Path | None = None
) -> list[str]:
    """``spark-submit`` arguments that put the same jars and Delta settings on a job."""
    args = ["--jars", ",".join(jars(delta=delta, spark_kafka=spark_kafka, cache_dir=cache_dir))]
    if delta:
        args += [
            "--conf",
            f"spark.sql.extensions={DELTA_EXTENSIONS}",
            "--conf",
            f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}",
        ]
    return args


def _has_class(session: Any, name: str) -> bool:
    jvm = session.sparkContext._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        return False
    return True


def delta_session(
    app_name: str = "millrace",
    *,
    master: str | None = None,
    spark_kafka: bool = False,
    conf: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> Any:
    """A SparkSession with Delta Lake (and optionally Spark's Kafka connector) and the
    ``millrace`` format registered. ``master`` defaults to what ``spark-submit`` set, else
    ``local[*]``; ``conf`` adds Spark settings."""
    from pyspark.sql import SparkSession

    import spark_connector

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = configure(builder, delta=True, spark_kafka=spark_kafka, cache_dir=cache_dir)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not _has_class(session, DELTA_EXTENSIONS):
        raise MissingJarsError(
            "Delta Lake's classes are not on this Spark driver's classpath. Under spark-submit "
            "the jars must be on its command line: spark-submit "
            + " ".join(submit_args())
            + " ... (python -m spark_connector.session prints these arguments)"
        )
    spark_connector.register(session)
    return session


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_connector.session [--kafka] [--no-delta]``: print the spark-submit
    arguments for the jars in the JVM cache, one per line."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m spark_connector.session", description=main.__doc__)
    p.add_argument("--kafka", action="store_true", help="also Spark's own Kafka connector")
    p.add_argument("--no-delta", action="store_true", help="without Delta Lake")
    args = p.parse_args(argv)
    try:
        out = submit_args(delta=not args.no_delta, spark_kafka=args.kafka)
    except MissingJarsError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
