"""The client side of Kafka's security protocols, and what both sides share, for the broker
(its inter-broker client, its SASL server, its listeners' TLS), the ``millrace`` tools and the
Spark connector alike. Imports nothing of ``broker`` or ``spark_connector``.

Modules: ``errors`` (ConfigError, the broker's configuration error too), ``jaas`` (the
``sasl.jaas.config`` line), ``scram`` (SCRAM credentials in Kafka's ZooKeeper text form),
``sasl_mechanisms`` (the sans-IO PLAIN and SCRAM exchanges, client and server),
``ssl_factory`` (``ssl.SSLContext`` from Kafka's ``ssl.*`` settings: PEM, PKCS12, JKS),
``client_security`` (what a client of a secured listener does: TLS, then SASL) and
``librdkafka_settings`` (Kafka's Java client settings in librdkafka's names).

Importing it first imports ``kio`` without the Hypothesis hooks (:mod:`kio_loader`).
"""

from kio_loader import import_kio_without_hypothesis

import_kio_without_hypothesis()
