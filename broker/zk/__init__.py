"""ZooKeeper: the client and the data of ZooKeeper-mode Kafka, and the embedded server.

Everything of the broker that touches ZooKeeper lives here, used by the controller, the
broker (``broker.server``), the metadata followers, security and quotas alike:

* :mod:`broker.zk.interface`: what the rest of the broker needs from ZooKeeper, as a
  ``typing.Protocol`` (:class:`~broker.zk.interface.ZkOperations`), with the values and
  errors every implementation shares. Code that only *uses* ZooKeeper depends on it.
* :mod:`broker.zk.session` (the kazoo <-> asyncio bridge), :mod:`broker.zk.client`
  (Kafka's ``KafkaZkClient``: :class:`~broker.zk.client.ZkClient`), with the operations of
  :mod:`broker.zk.topics` and :mod:`broker.zk.security` mixed in. The only modules of the
  broker that import kazoo (DESIGN.md section 2).
* :mod:`broker.zk.znodes`: one class per znode, byte-compatible with Kafka's ``ZkData``.
* :mod:`broker.zk.embedded_server`: the embedded ZooKeeper *server* launcher (pyspark's jars
  and the machine's java) and the four-letter-word probes; no kazoo.

This face imports nothing, so importing the launcher does not load kazoo.
"""
