"""``MillraceDataSource``: the PySpark Python Data Source factory for format ``millrace``.

Spark instantiates it with the user's options (a case-insensitive dict) on the driver, calls
:meth:`schema` when ``load()`` is called (read options are validated there, so a bad option
fails at ``load()``), then :meth:`reader` / :meth:`streamReader` / :meth:`writer` /
:meth:`streamWriter` when planning. The instance is pickled between Spark's Python workers:
it holds only the options and the name of the driver run it belongs to.

Schema (Spark's Kafka source): ``key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int`` and, with ``includeHeaders=true``,
``headers array<struct<key: string, value: binary>>``.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_connector.exactly_once.settings import RUN_OPTION
from spark_connector.option_names import READ_OPTIONS, WRITE_OPTIONS, warn_unknown_options
from spark_connector.read.options import (
    bool_option,
    lower_keys,
    parse_read_options,
    validate_common,
)

KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

_READ_SELECTORS = ("subscribe", "subscribepattern", "assign")


class MillraceDataSource(DataSource):
    """Read and write Kafka topics (Millrace or Apache Kafka) as DataFrames.

    Example::

        spark.read.format("millrace")
            .option("kafka.bootstrap.servers", "127.0.0.1:9092")
            .option("subscribe", "events")
            .load()
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # The driver run this instance belongs to (the exactly-once sink's zombie-driver
        # fence): Spark creates the instance that commits a streaming query's batches once per
        # run; write_batch passes its driver process's run as an option.
        # (Imported here: a Python worker that unpickles the instance never needs it.)
        from spark_connector.exactly_once.sink_log import new_run_name

        self.run = str(lower_keys(options).get(RUN_OPTION) or new_run_name())

    @classmethod
    def name(cls) -> str:
        return "millrace"

    def schema(self) -> str:
        opts = lower_keys(self.options)
        # A write (df.write.format("millrace")) has no subscription option; read options are
        # only validated for reads.
        if any(k in opts for k in _READ_SELECTORS) or not _is_write_like(opts):
            validate_common(self.options)
        if bool_option(opts, "includeHeaders", False):
            return f"{KAFKA_SCHEMA_DDL}, {HEADERS_DDL}"
        return KAFKA_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_connector.read.reader import MillraceBatchReader

        warn_unknown_options(self.options, READ_OPTIONS, "for reads")
        return MillraceBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_connector.read.reader import MillraceStreamReader

        warn_unknown_options(self.options, READ_OPTIONS, "for reads")
        return MillraceStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_connector.write.writer import MillraceBatchWriter

        warn_unknown_options(self.options, WRITE_OPTIONS, "for writes")
        return MillraceBatchWriter(self.options, schema, self.run)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_connector.write.writer import MillraceStreamWriter

        warn_unknown_options(self.options, WRITE_OPTIONS, "for writes")
        return MillraceStreamWriter(self.options, schema, self.run)


def _is_write_like(opts: dict[str, str]) -> bool:
    """Options that only make sense for a write (``topic``) and no read selector."""
    return "topic" in opts
