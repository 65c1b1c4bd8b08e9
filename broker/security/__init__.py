"""Security as in Kafka: listeners' security protocols, TLS, SASL (PLAIN, SCRAM-SHA-256/512)
with credentials in ZooKeeper, and the ZooKeeper ACL authorizer.

Modules: ``principal`` (KafkaPrincipal, ``ssl.principal.mapping.rules``), ``scram`` (SCRAM
credentials in Kafka's ZooKeeper text form), ``sasl_mechanisms`` (the sans-IO client and
server exchanges), ``acl`` (ACL bindings, filters, Kafka's wire codes and znode JSON),
``authorizer`` (Kafka's AclAuthorizer semantics over a cache of ``/kafka-acl``),
``ssl_factory`` (``ssl.SSLContext`` from Kafka's ``ssl.*`` settings: PEM, PKCS12, JKS),
``listener_security`` (what each listener requires), ``client_security`` (what a client of
a secured listener does: TLS, then SASL).
"""
