"""Discovery shim: Spark 4 registers every installed top-level ``pyspark_*`` module's
``DefaultSource`` as a Python data source, so ``.format("millrace")`` works without calling
``spark_connector.register``."""

from spark_connector import MillraceDataSource

DefaultSource = MillraceDataSource

__all__ = ["DefaultSource"]
