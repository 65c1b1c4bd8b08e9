"""What each listener requires of its clients, and what this broker presents when it is the
client of another broker's inter-broker listener; from Kafka's settings:

* ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``, Kafka's default maps each
  protocol's own name) gives each listener of ``listeners`` its protocol: PLAINTEXT, SSL,
  SASL_PLAINTEXT or SASL_SSL.
* ``inter.broker.listener.name`` (or the listener named ``security.inter.broker.protocol``)
  is the one brokers use between themselves: replication, the controller's requests,
  transaction markers, forwarding.
* Per-listener overrides ``listener.name.<listener>.<setting>`` (lower-case listener name)
  win over the plain setting, as in Kafka: ``ssl.*``, ``sasl.enabled.mechanisms``,
  ``<mechanism>.sasl.jaas.config`` (``listener.name.sasl_ssl.plain.sasl.jaas.config``).
* The inter-broker login: ``sasl.mechanism.inter.broker.protocol`` and the ``username`` and
  ``password`` of the inter-broker listener's JAAS config for that mechanism.

The settings are read from a :class:`ListenerSettings` (the broker's configuration,
``broker.config.BrokerConfig``, is one), so this floor imports nothing of ``broker.config``.

Concurrency: immutable after start-up.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.config_def import ConfigError
from broker.security.principal import (
    ANONYMOUS,
    PrincipalMappingError,
    map_distinguished_name,
    parse_mapping_rules,
    subject_of,
)
from broker.security.security_configs import PROTOCOLS, SUPPORTED_MECHANISMS
from kafka_security.jaas import JaasConfigError, parse_jaas


class NamedListener(Protocol):
    """A listener of ``advertised.listeners`` (``broker.config.Listener``): its name."""

    @property
    def name(self) -> str: ...


class ListenerSettings(Protocol):
    """The broker settings read here: by name, and as a listener sees them."""

    @property
    def advertised_listeners(self) -> Sequence[NamedListener]: ...

    def __getitem__(self, name: str) -> Any:
        """A setting's parsed value."""
        ...

    def listener_value(self, listener: str, name: str) -> Any:
        """A setting as ``listener`` sees it: its ``listener.name.<listener>.<name>``
        override, else the broker-wide value."""
        ...


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """One listener's security: protocol, TLS context, SASL mechanisms and users."""

    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    principal_rules: tuple[Any, ...] = ()
    reauth_ms: int = 0
    failure_delay_ms: int = 100

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def principal_of_certificate(self, der: bytes | None) -> str:
        """The principal of a TLS client (``User:ANONYMOUS`` without a certificate)."""
        if not der:
            return ANONYMOUS
        return map_distinguished_name(subject_of(der), self.principal_rules)


def protocol_map(config: ListenerSettings) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in config["listener.security.protocol.map"]:
        name, _, proto = item.partition(":")
        proto = proto.strip().upper()
        if not name.strip() or proto not in PROTOCOLS:
            raise ConfigError(
                f"Invalid value {item!r} for configuration listener.security.protocol.map: "
                f"expected NAME:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        out[name.strip().upper()] = proto
    return out


def listener_protocol(config: ListenerSettings, listener: str) -> str:
    mapping = protocol_map(config)
    if listener in mapping:
        return mapping[listener]
    raise ConfigError(
        f"Invalid value for configuration listeners: listener {listener} has no security "
        "protocol in listener.security.protocol.map"
    )


def build_listener_security(config: ListenerSettings, listener: str) -> ListenerSecurity:
    protocol = listener_protocol(config, listener)

    def get(name: str) -> Any:
        return config.listener_value(listener, name)

    ctx = None
    rules: tuple[Any, ...] = ()
    if protocol in ("SSL", "SASL_SSL"):
        from kafka_security.ssl_factory import server_context

        ctx = server_context(get)
        try:
            rules = parse_mapping_rules(str(get("ssl.principal.mapping.rules") or "DEFAULT"))
        except PrincipalMappingError as exc:
            raise ConfigError(str(exc)) from None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = {}
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        enabled = tuple(str(m).upper() for m in get("sasl.enabled.mechanisms"))
        mechanisms = tuple(m for m in enabled if m in SUPPORTED_MECHANISMS)
        if not mechanisms:
            raise ConfigError(
                f"Invalid value {','.join(enabled)} for configuration sasl.enabled.mechanisms "
                f"of listener {listener}: Millrace serves {', '.join(SUPPORTED_MECHANISMS)}"
            )
        if "PLAIN" in mechanisms:
            jaas = jaas_of(config, listener, "PLAIN")
            plain_users = jaas.plain_users() if jaas is not None else {}
    return ListenerSecurity(
        name=listener,
        protocol=protocol,
        ssl_context=ctx,
        mechanisms=mechanisms,
        plain_users=plain_users,
        principal_rules=rules,
        reauth_ms=int(get("connections.max.reauth.ms") or 0),
        failure_delay_ms=int(config["connection.failed.authentication.delay.ms"]),
    )


def jaas_of(config: ListenerSettings, listener: str, mechanism: str) -> Any:
    """The JAAS config of ``mechanism`` on ``listener`` (``listener.name.<l>.<mech>.
    sasl.jaas.config``, else ``sasl.jaas.config``), parsed; None if unset."""
    text = config.listener_value(listener, f"{mechanism.lower()}.sasl.jaas.config")
    prop = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if text is None:
        text, prop = config["sasl.jaas.config"], "sasl.jaas.config"
    if text is None:
        return None
    try:
        return parse_jaas(str(text), prop)
    except JaasConfigError as exc:
        raise ConfigError(str(exc)) from None


def inter_broker_listener(config: ListenerSettings) -> str:
    """The name of the listener brokers use between themselves."""
    names = [x.name for x in config.advertised_listeners]
    explicit = config["inter.broker.listener.name"]
    if explicit:
        name = str(explicit).upper()
        if name not in names:
            raise ConfigError(
                f"Invalid value {explicit!r} for configuration inter.broker.listener.name: "
                f"not among the advertised listeners {', '.join(names)}"
            )
        return name
    proto = str(config["security.inter.broker.protocol"]).upper()
    if proto in names:
        return proto
    return names[0]


def inter_broker_client_security(config: ListenerSettings) -> Any:
    """What this broker presents as the client of other brokers' inter-broker listener
    (a :class:`~kafka_security.client_security.ClientSecurity`; None on PLAINTEXT)."""
    from kafka_security.client_security import ClientSecurity
    from kafka_security.ssl_factory import client_context

    listener = inter_broker_listener(config)
    protocol = listener_protocol(config, listener)
    if protocol == "PLAINTEXT":
        return None

    def get(name: str) -> Any:
        return config.listener_value(listener, name)

    ctx = client_context(get) if protocol in ("SSL", "SASL_SSL") else None
    if protocol == "SSL":
        return ClientSecurity(protocol, ctx)
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(
            f"Invalid value {mechanism} for configuration sasl.mechanism.inter.broker.protocol "
            f"(the inter-broker listener {listener} is {protocol}): Millrace speaks "
            f"{', '.join(SUPPORTED_MECHANISMS)}"
        )
    jaas = jaas_of(config, listener, mechanism)
    if jaas is None or jaas.username is None or jaas.password is None:
        raise ConfigError(
            f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config must give "
            "the inter-broker username and password"
        )
    return ClientSecurity(protocol, ctx, mechanism, jaas.username, jaas.password)
