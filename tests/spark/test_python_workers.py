"""The Python processes Spark starts for a query import the installed, compiled PySpark, not
``pyspark.zip`` (``millrace_pyspark_path``): the streaming source's runner on the driver and
the executors' workers, each checked from inside the process by a probe data source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def test_streaming_runner_and_workers_import_the_compiled_pyspark(
    spark: Any, tmp_path: Path
) -> None:
    import pyspark
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class WhereFrom(DataSourceStreamReader):
        """Offsets and rows that say where ``pyspark`` came from in the process at hand."""

        def initialOffset(self) -> dict[str, Any]:  # in the streaming source's runner
            import pyspark

            return {"n": 0, "runner": pyspark.__file__}

        def latestOffset(self) -> dict[str, Any]:
            import pyspark

            return {"n": 1, "runner": pyspark.__file__}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
            return [InputPartition(0)] if start["n"] < end["n"] else []

        def read(self, partition: InputPartition) -> Any:  # in an executor's worker
            import pyspark

            yield (pyspark.__file__,)

    class WhereFromSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "millrace_test_where_from"

        def schema(self) -> str:
            return "file string"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return WhereFrom()

    spark.dataSource.register(WhereFromSource)
    query = (
        spark.readStream.format("millrace_test_where_from")
        .load()
        .writeStream.format("memory")
        .queryName("where_from")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        assert query.exception() is None
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = [r.file for r in spark.sql("SELECT file FROM where_from").collect()]
    finally:
        query.stop()
    compiled = str(Path(pyspark.__file__))  # the driver's: the installed package
    assert ".zip" not in compiled
    assert rows == [compiled]
    assert json.loads(progress[0]["sources"][0]["endOffset"])["runner"] == compiled
