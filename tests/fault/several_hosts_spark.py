"""The several-hosts run's Spark job (``tests/fault/several_hosts.py``), submitted with
``spark-submit`` on the client host: it reads ``--source`` with ``format("millrace")``,
writes every record to ``--target`` (value suffixed ``|spark``) with
``df.write.format("millrace")``, reads ``--target`` back, and prints one line
``SEVERAL_HOSTS_SPARK {"read": [[key, value], ...], "read_back": [...]}`` (sorted).

It reaches the brokers only through ``--bootstrap`` (the hosts' addresses): the connector's
executors get every partition leader's address from the brokers' Metadata.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def read_topic(spark: Any, bootstrap: str, topic: str) -> list[list[str]]:
    df = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
    )
    return sorted([str(r["key"]), str(r["value"])] for r in df.collect())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--run-dir", required=True, help="the run's directory (unused: names it)")
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("millrace-several-hosts").getOrCreate()
    try:
        read = read_topic(spark, args.bootstrap, args.source)
        (
            spark.read.format("millrace")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.source)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .selectExpr("key", "CONCAT(CAST(value AS STRING), '|spark') AS value")
            .write.format("millrace")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", args.target)
            .option("kafka.acks", "all")
            .mode("append")
            .save()
        )
        read_back = read_topic(spark, args.bootstrap, args.target)
    finally:
        spark.stop()
    print("SEVERAL_HOSTS_SPARK " + json.dumps({"read": read, "read_back": read_back}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
