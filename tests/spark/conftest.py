"""Fixtures for the Spark tier: one local SparkSession per test session (local[2], no UI,
few shuffle partitions) with the ``millrace`` format registered, plus the real-broker
``cluster`` fixtures of the integration tier.

When ``make setup`` has fetched Spark's own Kafka connector into ``SPARK_KAFKA_JARS``, its
jars are put on the session's ``spark.jars`` (they must be set before the JVM starts), so
``format("kafka")`` is available too; test_spark_kafka_connector.py fails if they are not."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import (  # noqa: F401 - re-exported fixtures
    cluster,
    cluster_factory,
    topic_name,
)

SPARK_KAFKA_JARS = Path(__file__).resolve().parents[2] / ".cache" / "jvm" / "spark-kafka"


def spark_kafka_jars() -> list[str]:
    """The jars of Spark's own Kafka connector fetched by ``make setup`` (empty if absent)."""
    return sorted(str(p) for p in SPARK_KAFKA_JARS.glob("*.jar"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    jars = spark_kafka_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.master("local[2]")
        .appName("millrace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    try:
        import spark_connector

        register = getattr(spark_connector, "register", None)
        if register is not None:
            register(session)
        yield session
    finally:
        session.stop()
