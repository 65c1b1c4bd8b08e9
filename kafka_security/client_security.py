"""What a client of a secured listener does: TLS first (``SSL``, ``SASL_SSL``), then SASL
(``SASL_PLAINTEXT``, ``SASL_SSL``): SaslHandshake v1 naming the mechanism, then
SaslAuthenticate requests carrying the mechanism's tokens until the server's last one.

:class:`ClientSecurity` is built from client properties under either naming: Kafka's Java
names (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.*``,
``ssl.keystore.*``; what ``--command-config`` files and Spark's ``kafka.*`` options hold) or
librdkafka's (``sasl.username``, ``sasl.password``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``; what ``cluster.json``'s
``client_config`` holds). It is used by the broker's inter-broker client, the ``millrace``
tools and the Spark connector's wire client.

Concurrency: immutable; the exchange runs on the connection's own thread or task.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_security.errors import ConfigError
from kafka_security.jaas import JaasConfigError, parse_jaas
from kafka_security.sasl_mechanisms import (
    SUPPORTED_MECHANISMS,
    SaslAuthenticationError,
    make_client,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:  # never the password
        return (
            f"ClientSecurity({self.protocol}, mechanism={self.mechanism}, username={self.username})"
        )

    def wrap(self, sock: Any, host: str) -> Any:
        """``sock`` under TLS (blocking handshake) when the protocol uses it."""
        if self.ssl_context is None:
            return sock
        return self.ssl_context.wrap_socket(sock, server_hostname=host)


PLAINTEXT = ClientSecurity()

_LIBRDKAFKA_SSL = {
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.certificate.location": "_cert",
    "ssl.key.location": "_key",
    "ssl.key.password": "ssl.key.password",
}


def client_security(props: Mapping[str, Any], *, source: str = "client config") -> ClientSecurity:
    """A :class:`ClientSecurity` from client properties (either naming, see the module
    docstring); errors name the property and ``source``, never a password."""
    protocol = str(props.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"Invalid value {protocol!r} for security.protocol in {source} ({', '.join(PROTOCOLS)})"
        )
    ctx = _client_ssl(props, source) if protocol in ("SSL", "SASL_SSL") else None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(protocol, ctx)
    mechanism = str(props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI")
    mechanism = mechanism.upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(
            f"Invalid value {mechanism!r} for sasl.mechanism in {source} "
            f"({', '.join(SUPPORTED_MECHANISMS)})"
        )
    username = props.get("sasl.username")
    password = props.get("sasl.password")
    jaas_text = props.get("sasl.jaas.config")
    if jaas_text:
        try:
            jaas = parse_jaas(str(jaas_text), f"sasl.jaas.config in {source}")
        except JaasConfigError as exc:
            raise ConfigError(str(exc)) from None
        username = jaas.username if jaas.username is not None else username
        password = jaas.password if jaas.password is not None else password
    if username is None or password is None:
        raise ConfigError(
            f"{source}: security.protocol={protocol} with sasl.mechanism={mechanism} needs a "
            "username and password (sasl.jaas.config, or sasl.username and sasl.password)"
        )
    return ClientSecurity(protocol, ctx, mechanism, str(username), str(password))


def _client_ssl(props: Mapping[str, Any], source: str) -> ssl.SSLContext:
    from kafka_security.ssl_factory import client_context

    settings = dict(props)
    if props.get("ssl.ca.location") and not props.get("ssl.truststore.location"):
        settings["ssl.truststore.location"] = props["ssl.ca.location"]
        settings["ssl.truststore.type"] = "PEM"
    cert, key = props.get("ssl.certificate.location"), props.get("ssl.key.location")
    if cert and key:
        chain = open(str(cert)).read()  # noqa: SIM115 - small PEM files
        settings["ssl.keystore.key"] = open(str(key)).read()  # noqa: SIM115
        settings["ssl.keystore.certificate.chain"] = chain
        settings["ssl.keystore.type"] = "PEM"
    try:
        return client_context(settings.get)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def exchange_requests(
    security: ClientSecurity, handshake_version: int = 1
) -> tuple[Any, Callable[[bytes], Any]]:
    """The kio SaslHandshake request, and a function making each SaslAuthenticate (v2)
    request; for a caller that sends them with its own connection (:func:`authenticate`)."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    assert security.mechanism is not None
    return SaslHandshakeRequest(mechanism=security.mechanism), (
        lambda token: SaslAuthenticateRequest(auth_bytes=token)
    )


def authenticate(security: ClientSecurity, request: Callable[[Any], Any]) -> None:
    """Run the SASL exchange over ``request`` (a blocking send-a-kio-request-and-return-
    its-response function). Raises :class:`SaslAuthenticationError` when refused."""
    handshake, make = exchange_requests(security)
    response = request(handshake)
    if int(response.error_code) != 0:
        raise SaslAuthenticationError(
            f"the broker refused SASL mechanism {security.mechanism} (error "
            f"{int(response.error_code)}; it enables {', '.join(response.mechanisms)})"
        )
    assert security.mechanism and security.username is not None and security.password is not None
    client = make_client(security.mechanism, security.username, security.password)
    token: bytes | None = client.first()
    while token is not None:
        response = request(make(token))
        if int(response.error_code) != 0:
            raise SaslAuthenticationError(
                f"SASL authentication as {security.username} failed: {response.error_message}"
            )
        token = client.respond(bytes(response.auth_bytes))
        if client.complete:
            break
