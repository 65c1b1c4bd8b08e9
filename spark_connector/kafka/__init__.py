"""The connector's own Kafka wire client: blocking, one thread per client, the standard
Kafka protocol only (so it talks to Apache Kafka as well as Millrace), never pickled.

* :mod:`~spark_connector.kafka.connection`: one blocking connection (framing, ApiVersions,
  TLS and SASL handshakes); :mod:`~spark_connector.kafka.security`: the ``kafka.*`` security
  options turned into each client's TLS and SASL settings;
* :mod:`~spark_connector.kafka.cluster`: the core every client shares (bootstrap, Metadata,
  leaders, coordinators, a connection per broker, retries under a deadline);
  :mod:`~spark_connector.kafka.errors`: Kafka's error codes and which ones are retriable;
* :mod:`~spark_connector.kafka.fetcher`: raw record batches of one partition (the reader);
* :mod:`~spark_connector.kafka.producer`: the idempotent, optionally transactional batch
  producer (the writer);
* :mod:`~spark_connector.kafka.transactions`: the driver's transaction APIs (EndTxn,
  KIP-939 take-over, TxnOffsetCommit, Describe/ListTransactions);
  :mod:`~spark_connector.kafka.markers`: how a transaction ended, read from the partition;
* :mod:`~spark_connector.kafka.topics`: end offsets, topic creation.

Record batches themselves (Kafka's v2 format, to and from Arrow) are
:mod:`spark_connector.records`.
"""
