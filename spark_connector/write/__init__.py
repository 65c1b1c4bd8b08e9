"""Writing DataFrames to topics (``df.write`` / ``df.writeStream`` of ``millrace``).

* :mod:`~spark_connector.write.plan`: the sink's options and the incoming schema checked on
  the driver (:class:`~spark_connector.write.plan.WritePlan`, the batch settings, the
  librdkafka configuration);
* :mod:`~spark_connector.write.batch_write`: a task's Arrow batches encoded into record
  batches and sent by the batch producer (at-least-once, or in the task's transaction);
* :mod:`~spark_connector.write.row_write`: librdkafka's per-row path;
* :mod:`~spark_connector.write.outcome`: what a task reports to the driver;
* :mod:`~spark_connector.write.writer`: Spark's ``DataSourceWriter`` and
  ``DataSourceStreamWriter`` of the format, which pick the path per task and hand
  exactly-once batches to :mod:`spark_connector.exactly_once`.
"""
