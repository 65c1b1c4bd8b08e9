"""Reading topics as DataFrames (``spark.read`` / ``spark.readStream`` of ``millrace``):
planning on the driver, consuming on the executors. A micro-batch's path is
``docs/architecture.md`` section 4.

* :mod:`~spark_connector.read.options`: the read options, parsed once on the driver
  (:class:`~spark_connector.read.options.ReadOptions`);
  :mod:`~spark_connector.read.offsets`: offsets as Spark's Kafka source spells them (JSON);
* :mod:`~spark_connector.read.offset_reader`: the driver's look-ups (partitions, earliest,
  latest, by timestamp), Spark's ``KafkaOffsetReader``;
* :mod:`~spark_connector.read.planner`: pure offset-range planning and rate limiting;
* :mod:`~spark_connector.read.boundary_reads`: reads that end at an exactly-once sink's
  micro-batch boundaries;
* :mod:`~spark_connector.read.consumer`: one task's offset range fetched, read_committed
  applied, data loss reported, decoded to Arrow (Spark's ``KafkaDataConsumer``);
* :mod:`~spark_connector.read.reader`: Spark's ``DataSourceReader`` and
  ``DataSourceStreamReader`` of the format.
"""
