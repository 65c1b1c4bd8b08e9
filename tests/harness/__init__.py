"""The test harness the integration and Spark tiers share: real ZooKeeper, real broker
processes started with ``millrace cluster up``, real clients.

Modules: ``ports`` (free loopback ports), ``waiting`` (``wait_for``), ``processes`` (pids:
liveness, SIGKILL, lookup by command line), ``raw`` (hand-built Kafka requests on a plain
socket), ``clients`` (confluent-kafka admin and consumers, log-file readers), ``cluster``
(the ``Cluster`` object), ``fixtures`` (the pytest fixtures ``tests/conftest.py`` re-exports),
``spark_submit`` (``spark-submit`` runs of ``jobs/`` to freeze, kill and stop by pid).
"""
