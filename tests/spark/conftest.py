"""Fixtures for the Spark tier: one local SparkSession per test session (local[2], no UI,
few shuffle partitions) with the ``millrace`` format registered. The real-broker
``cluster`` fixtures it also uses are shared with the other tiers (``tests/conftest.py``).

The session is built with ``spark_connector.session.configure``: Delta Lake 4.4's jars and
Spark's own Kafka connector (both fetched by ``make setup`` into ``.cache/jvm``) are on
``spark.jars``, so ``format("delta")`` and ``format("kafka")`` work beside
``format("millrace")``; a missing jar fails the session with a message saying to run
``make setup``. Delta snapshots use one partition so Delta tests stay fast."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_connector.session import configure

    builder = configure(SparkSession.builder, delta=True, spark_kafka=True)
    session = (
        builder.master("local[2]")
        .appName("millrace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.databricks.delta.snapshotPartitions", "1")
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
