"""Log compaction (Kafka's log cleaner): keep the latest record of every key.

* :mod:`~broker.log.cleaner.offset_map`: the key -> latest offset map of a cleaning round;
* :mod:`~broker.log.cleaner.native`: the native cleaner (``_native_cleaner.c``): the offset
  map and the record scans of a round in C, the Python cleaner kept as its reference;
* :mod:`~broker.log.cleaner.transactions`: which batches and markers belong to aborted or
  committed transactions while the log is read in offset order;
* :mod:`~broker.log.cleaner.batch_filter`: what to keep of one batch;
* :mod:`~broker.log.cleaner.cleaning`: one cleaning round of one log, run in a worker process
  (reads the dirty segments, writes ``.cleaned`` segments);
* :mod:`~broker.log.cleaner.selection`: which log to clean and up to where (pure);
* :mod:`~broker.log.cleaner.manager`: the broker-side scheduler: the dirtiest log first, the
  worker pool, the swap of cleaned segments into the live log, ``cleaner-offset-checkpoint``.
"""
