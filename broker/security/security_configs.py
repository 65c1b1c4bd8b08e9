"""The security properties of a broker (Kafka's names and defaults), and the names of the
per-listener overrides ``listener.name.<listener>.<setting>``; what they mean is in
:mod:`broker.security.listener_security`.

Concurrency: immutable tables and pure functions.
"""

from __future__ import annotations

from broker.config_def import ConfigDef, ConfigError, ConfigType
from kafka_security.sasl_mechanisms import SUPPORTED_MECHANISMS

__all__ = [
    "LISTENER_PREFIX",
    "LISTENER_SETTINGS",
    "PROTOCOLS",
    "SECURITY_CONFIGS",
    "SUPPORTED_MECHANISMS",
    "listener_override_name",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LISTENER_PREFIX = "listener.name."

_T = ConfigType
SECURITY_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "listener.security.protocol.map",
        _T.LIST,
        tuple(f"{p}:{p}" for p in PROTOCOLS),
        "listener name -> security protocol",
    ),
    ConfigDef("inter.broker.listener.name", _T.STRING, None, "the brokers' own listener"),
    ConfigDef(
        "security.inter.broker.protocol",
        _T.STRING,
        "PLAINTEXT",
        "the inter-broker listener's protocol when inter.broker.listener.name is unset",
        lambda v: v in PROTOCOLS,
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    ),
    ConfigDef("sasl.enabled.mechanisms", _T.LIST, ("GSSAPI",), "SASL mechanisms served"),
    ConfigDef(
        "sasl.mechanism.inter.broker.protocol", _T.STRING, "GSSAPI", "inter-broker mechanism"
    ),
    ConfigDef("sasl.jaas.config", _T.PASSWORD, None, "JAAS login configuration"),
    ConfigDef("connections.max.reauth.ms", _T.LONG, 0, "SASL re-authentication (KIP-368)"),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        _T.INT,
        100,
        "delay before closing a connection whose authentication failed",
        lambda v: v >= 0,
        ">= 0",
    ),
    ConfigDef("ssl.keystore.type", _T.STRING, "JKS", "JKS, PKCS12 or PEM"),
    ConfigDef("ssl.keystore.location", _T.STRING, None, "key store file"),
    ConfigDef("ssl.keystore.password", _T.PASSWORD, None, "key store password"),
    ConfigDef("ssl.key.password", _T.PASSWORD, None, "private key password"),
    ConfigDef("ssl.keystore.key", _T.PASSWORD, None, "inline PEM private key"),
    ConfigDef("ssl.keystore.certificate.chain", _T.PASSWORD, None, "inline PEM chain"),
    ConfigDef("ssl.truststore.type", _T.STRING, "JKS", "JKS, PKCS12 or PEM"),
    ConfigDef("ssl.truststore.location", _T.STRING, None, "trust store file"),
    ConfigDef("ssl.truststore.password", _T.PASSWORD, None, "trust store password"),
    ConfigDef("ssl.truststore.certificates", _T.PASSWORD, None, "inline PEM trusted certs"),
    ConfigDef(
        "ssl.client.auth",
        _T.STRING,
        "none",
        "mutual TLS",
        lambda v: str(v).lower() in ("required", "requested", "none"),
        "required, requested or none",
    ),
    ConfigDef("ssl.protocol", _T.STRING, "TLSv1.3", "TLS protocol"),
    ConfigDef("ssl.enabled.protocols", _T.LIST, ("TLSv1.2", "TLSv1.3"), "TLS versions"),
    ConfigDef("ssl.cipher.suites", _T.LIST, (), "cipher suites (OpenSSL names)"),
    ConfigDef(
        "ssl.endpoint.identification.algorithm", _T.STRING, "https", "host name verification"
    ),
    ConfigDef("ssl.principal.mapping.rules", _T.STRING, "DEFAULT", "DN -> principal rules"),
    ConfigDef("authorizer.class.name", _T.STRING, "", "the authorizer ('' for none)"),
    ConfigDef("super.users", _T.STRING, None, "principals allowed everything (;-separated)"),
    ConfigDef("allow.everyone.if.no.acl.found", _T.BOOLEAN, False, "allow resources without ACLs"),
)

# the settings a listener may override with listener.name.<listener>.<setting>
LISTENER_SETTINGS = frozenset(
    d.name for d in SECURITY_CONFIGS if d.name.startswith(("ssl.", "sasl.", "connections."))
)


def listener_override_name(prop: str) -> tuple[str, str] | None:
    """``listener.name.<l>.<setting>`` -> (LISTENER, setting), or None if ``prop`` is not a
    listener override; raises ConfigError for an override of an unknown setting."""
    if not prop.startswith(LISTENER_PREFIX):
        return None
    rest = prop[len(LISTENER_PREFIX) :]
    listener, _, setting = rest.partition(".")
    if not listener or not setting:
        raise ConfigError(f"Unknown broker configuration {prop}")
    mech, _, after = setting.partition(".")
    if after == "sasl.jaas.config" and mech.upper() in (*SUPPORTED_MECHANISMS, "GSSAPI"):
        return listener.upper(), setting
    if setting in LISTENER_SETTINGS:
        return listener.upper(), setting
    raise ConfigError(f"Unknown broker configuration {prop}")
