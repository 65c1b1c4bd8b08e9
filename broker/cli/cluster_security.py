"""``millrace cluster up --security ssl|sasl_plaintext|sasl_ssl``: a local cluster secured
as a Kafka team would secure one.

What it makes, in ``D/security/`` (files mode 0600):

* a CA (``ca.pem``) and the brokers' certificate (``broker.pem``: key + chain, valid for
  127.0.0.1, ::1 and localhost), with ``cryptography``;
* ``ssl``: mutual TLS (``ssl.client.auth=required``); an ``admin`` client certificate
  (subject ``CN=admin,OU=Millrace``, mapped to ``User:admin`` by
  ``ssl.principal.mapping.rules``), the brokers authenticate to each other with theirs
  (``User:broker``);
* ``sasl_*``: SCRAM-SHA-512 and SCRAM-SHA-256, the ``admin`` and ``broker`` users' SCRAM
  credentials written to ``/config/users`` before the brokers start (as
  ``kafka-configs.sh --zookeeper`` bootstraps Kafka's), random passwords;
* Kafka's ZooKeeper ACL authorizer with ``super.users=User:admin;User:broker``, and
  ``allow.everyone.if.no.acl.found=false``: every other principal needs ACLs;
* ``client.properties``: the admin's settings for Kafka's Java tools (``--command-config``);
  ``cluster.json``'s ``client_config``: the same under librdkafka's names
  (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
  ``ssl.ca.location``, and for ``ssl`` ``ssl.certificate.location``/``ssl.key.location``).

One listener, named after its protocol, serves clients and brokers
(``inter.broker.listener.name``), so replication and the controller's requests are
secured too.

Concurrency: runs once, in ``cluster up``'s thread.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.cli.cluster_process import ClusterError
from broker.security.certificates import issue, make_ca
from kafka_security.jaas import SCRAM_MODULE, jaas_for
from kafka_security.scram import make_credential

SECURITY_CHOICES = ("ssl", "sasl_plaintext", "sasl_ssl")
ADMIN = "admin"
BROKER = "broker"
MECHANISM = "SCRAM-SHA-512"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
PRINCIPAL_RULES = "RULE:^CN=([^,]+),OU=Millrace$/$1/,DEFAULT"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


@dataclass
class ClusterSecurity:
    """What ``cluster up`` needs of the security set-up."""

    protocol: str
    broker_props: dict[str, str]
    client_config: dict[str, str]
    client_properties: Path
    users: dict[str, str] = field(default_factory=dict)  # SCRAM users to create: name -> pw


def prepare(
    directory: Path,
    security: str,
    hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost"),
) -> ClusterSecurity:
    """Certificates, passwords and properties for ``security`` (written under
    ``directory/security``); the brokers' certificate names ``hosts``."""
    if security not in SECURITY_CHOICES:
        raise ClusterError(
            f"--security {security!r}: expected one of {', '.join(SECURITY_CHOICES)}"
        )
    protocol = security.upper()
    sec = directory / "security"
    sec.mkdir(parents=True, exist_ok=True)
    tls = protocol in ("SSL", "SASL_SSL")
    sasl = protocol.startswith("SASL")
    props: dict[str, str] = {
        "listener.security.protocol.map": f"{protocol}:{protocol}",
        "inter.broker.listener.name": protocol,
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{ADMIN};User:{BROKER}",
        "allow.everyone.if.no.acl.found": "false",
    }
    client: dict[str, str] = {"security.protocol": protocol}
    java: dict[str, str] = {"security.protocol": protocol}
    users: dict[str, str] = {}
    if tls:
        ca = make_ca(sec)
        broker_cert = issue(sec, "broker", BROKER, server=True, hosts=hosts)
        props.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(broker_cert.keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(ca),
                "ssl.principal.mapping.rules": PRINCIPAL_RULES,
            }
        )
        client["ssl.ca.location"] = str(ca)
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)})
        if not sasl:
            props["ssl.client.auth"] = "required"
            admin_cert = issue(sec, "admin", ADMIN, server=False)
            client["ssl.certificate.location"] = str(admin_cert.certificate)
            client["ssl.key.location"] = str(admin_cert.key)
            java.update(
                {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(admin_cert.keystore)}
            )
    if sasl:
        users = {ADMIN: secrets.token_urlsafe(18), BROKER: secrets.token_urlsafe(18)}
        props.update(
            {
                "sasl.enabled.mechanisms": ",".join(MECHANISMS),
                "sasl.mechanism.inter.broker.protocol": MECHANISM,
                f"listener.name.{protocol.lower()}.{MECHANISM.lower()}.sasl.jaas.config": (
                    jaas_for(SCRAM_MODULE, BROKER, users[BROKER])
                ),
            }
        )
        client.update(
            {"sasl.mechanism": MECHANISM, "sasl.username": ADMIN, "sasl.password": users[ADMIN]}
        )
        java.update(
            {
                "sasl.mechanism": MECHANISM,
                "sasl.jaas.config": jaas_for(SCRAM_MODULE, ADMIN, users[ADMIN]),
            }
        )
    client_properties = directory / "client.properties"
    text = "# Written by `millrace cluster up --security`: the admin's client settings\n"
    text += "".join(f"{k}={_escape(v)}\n" for k, v in java.items())
    fd = os.open(client_properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return ClusterSecurity(protocol, props, client, client_properties, users)


def _escape(value: str) -> str:
    """A Java properties value (backslashes doubled)."""
    return value.replace("\\", "\\\\")


def create_users(zk_connect: str, users: dict[str, str]) -> None:
    """Write the users' SCRAM credentials to ``/config/users/<user>`` (Kafka's format) before
    any broker starts."""
    import asyncio

    from broker.zk.client import ZkClient

    async def write() -> None:
        zk = ZkClient(zk_connect)
        await zk.start()
        try:
            for user, password in users.items():
                creds = {m: make_credential(m, password).to_text() for m in MECHANISMS}

                def update(config: dict[str, str], creds: dict[str, str] = creds) -> dict[str, str]:
                    return {**config, **creds}

                await zk.update_entity_config("users", user, update)
        finally:
            await zk.close()

    asyncio.run(write())


def listener_for(protocol: str | None, host: str, port: int) -> str:
    return f"{protocol or 'PLAINTEXT'}://{host}:{port}"


def describe(info: dict[str, Any]) -> str:
    """One line for the user: how to connect."""
    cfg = info.get("client_config")
    if not cfg:
        return ""
    return (
        f"secured with {cfg['security.protocol']}: client settings in cluster.json "
        f"(client_config) and {info.get('client_properties')} (Kafka's tools)"
    )
