"""Kafka's v2 record batches and Arrow columns, both ways, each in C with a pure-Python
reference of the same output (the native modules are built by ``setup.py``; without a C
compiler the Python twins are used).

* :mod:`~spark_connector.records.decoder`: record batches walked, read_committed filtered
  (``AbortedFilter``) and decoded into Arrow buffers; C twin ``_native_records``
  (``_native_records.c``, stub ``_native_records.pyi``);
* :mod:`~spark_connector.records.encoder`: Arrow columns encoded as record batches; C twin
  ``_native_batches`` (``_native_batches.c``, stub ``_native_batches.pyi``);
* :mod:`~spark_connector.records.partitioner`: Kafka's default partitioner (murmur2).
"""
