"""The client settings of a ``millrace`` command that talks to brokers: ``--command-config
FILE``, else, with ``--dir D``, the ``client_config`` that ``millrace cluster up
--security`` wrote to ``D/cluster.json`` (so ``millrace topics list --dir D`` works on a
secured cluster), else none (PLAINTEXT).

A ``--command-config`` file is a Java ``.properties`` file under Kafka's Java names (the
``client.properties`` a Kafka user already has: ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``) or librdkafka's
(``sasl.username``, ``sasl.password``, ``ssl.ca.location`` ...), or a mix. Each command gets
them in the form it needs:

* :func:`client_config`: the whole librdkafka configuration of a CLI client (bootstrap
  servers, logging, the settings) and :func:`admin_client`, confluent-kafka's
  ``AdminClient`` built from it;
* :func:`librdkafka_config`: librdkafka's names for confluent-kafka
  (:func:`kafka_security.librdkafka_settings.librdkafka_settings`), checked once by
  building a client that connects nowhere, so an unknown or invalid setting fails with
  librdkafka's message naming it, and the file;
* :func:`wire_security`: a :class:`~kafka_security.client_security.ClientSecurity` for the
  commands that speak the protocol themselves (``reassign``, ``elect-leaders``,
  ``transactions``, the micro-batch boundaries of ``table``).

Before the first request of a secured command, :func:`check_access` opens one connection
with the settings (TLS, then SASL) and an ApiVersions round trip, so a wrong password or
trust store is one clear line naming the source, not a librdkafka retry loop that ends in a
time-out. An unreachable broker is left for the command itself to report.

Errors are :class:`~broker.cli.common.CliError` (one line, exit 1), never with a password.

Concurrency: the command's one thread; results are cached on the parsed arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cli.common import CliError, bootstrap_servers, parse_bootstrap, read_properties_file

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from kafka_security.client_security import ClientSecurity

_CACHE = "_millrace_client_settings"
CHECK_TIMEOUT_S = 10.0


@dataclass(slots=True)
class ClientSettings:
    """The settings of one command and where they came from (``source``, for messages)."""

    source: str | None
    properties: dict[str, str]
    librdkafka: dict[str, str] = field(default_factory=dict)
    validated: bool = False
    checked: bool = False
    security: ClientSecurity | None = None

    @property
    def protocol(self) -> str:
        return str(self.properties.get("security.protocol") or "PLAINTEXT").strip().upper()

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"


def _cluster_client_config(directory: str) -> dict[str, str]:
    """``client_config`` of ``directory/cluster.json`` (empty when the cluster is not
    secured or the file is not there)."""
    path = Path(directory) / "cluster.json"
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError(f"--dir {directory}: cannot read {path}: {exc}") from exc
    config = info.get("client_config") if isinstance(info, dict) else None
    if not config:
        return {}
    if not isinstance(config, dict):
        raise CliError(f"--dir {directory}: client_config in {path} is not an object")
    return {str(k): str(v) for k, v in config.items()}


def settings_of(args: argparse.Namespace) -> ClientSettings:
    """The command's settings (read once; see the module docstring)."""
    cached = getattr(args, _CACHE, None)
    if isinstance(cached, ClientSettings):
        return cached
    path = getattr(args, "command_config", None)
    directory = getattr(args, "dir", None)
    if path:
        found = ClientSettings(
            f"--command-config {path}", read_properties_file(path, "--command-config")
        )
    elif directory:
        found = ClientSettings(
            f"{Path(directory) / 'cluster.json'} (client_config)",
            _cluster_client_config(str(directory)),
        )
    else:
        found = ClientSettings(None, {})
    if found.properties:
        from kafka_security.librdkafka_settings import SettingsError, librdkafka_settings

        try:
            found.librdkafka = librdkafka_settings(found.properties, str(found.source))
        except SettingsError as exc:
            raise CliError(str(exc)) from None
    setattr(args, _CACHE, found)
    return found


def client_config(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The base librdkafka configuration for a CLI client: bootstrap servers, quiet logging
    unless ``--log-level`` is DEBUG or INFO, then the client settings
    (:func:`librdkafka_config`: ``--command-config``, else ``--dir``'s ``client_config``) and
    ``extra``."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers(args)}
    level = str(getattr(args, "log_level", "WARNING")).upper()
    if level in ("DEBUG", "INFO"):
        conf["logger"] = logging.getLogger("millrace.librdkafka")
    else:
        conf["log_level"] = 0  # errors are reported by the command itself
    conf.update(librdkafka_config(args))
    if extra:
        conf.update(extra)
    return conf


def admin_client(args: argparse.Namespace) -> AdminClient:
    """confluent-kafka's ``AdminClient`` configured by the connection options."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(args))


def librdkafka_config(args: argparse.Namespace) -> dict[str, str]:
    """The settings under librdkafka's names, validated by librdkafka, and (secured) the
    access checked (:func:`check_access`)."""
    settings = settings_of(args)
    if settings.librdkafka and not settings.validated:
        validate(settings.librdkafka, str(settings.source))
        settings.validated = True
    check_access(args)
    return dict(settings.librdkafka)


def validate(conf: dict[str, str], source: str) -> None:
    """Let librdkafka check ``conf``: a client with no bootstrap servers (it connects
    nowhere) is built and dropped; a setting it refuses raises CliError naming ``source``."""
    from confluent_kafka import KafkaException, Producer

    try:
        client = Producer({**conf, "log_level": 0})
    except (KafkaException, ValueError, TypeError) as exc:
        err = exc.args[0] if exc.args else exc
        describe = getattr(err, "str", None)
        text = describe() if callable(describe) else str(err)
        raise CliError(f"{source}: {text}") from None
    del client


def wire_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The command's settings as a ClientSecurity for Millrace's own wire client (None:
    PLAINTEXT); access checked (:func:`check_access`)."""
    settings = settings_of(args)
    if not settings.secured:
        return None
    security = _security(settings)
    check_access(args)
    return security


def _security(settings: ClientSettings) -> ClientSecurity:
    if settings.security is None:
        from broker.config_def import ConfigError
        from kafka_security.client_security import client_security

        try:
            settings.security = client_security(settings.properties, source=str(settings.source))
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        except OSError as exc:
            raise CliError(f"{settings.source}: {exc}") from None
    return settings.security


def check_access(args: argparse.Namespace) -> None:
    """For secured settings, once per command: connect to the first bootstrap server that
    accepts a TCP connection with TLS and SASL and make one ApiVersions request; a refusal
    (certificate, handshake, password) raises CliError naming the settings' source."""
    settings = settings_of(args)
    if settings.checked or not settings.secured:
        return
    settings.checked = True
    mechanism = str(
        settings.librdkafka.get("sasl.mechanism")
        or settings.librdkafka.get("sasl.mechanisms")
        or ""
    )
    if settings.protocol.startswith("SASL") and mechanism.upper() in ("GSSAPI", "OAUTHBEARER", ""):
        return  # mechanisms only librdkafka speaks: it reports its own failures
    security = _security(settings)
    timeout = min(float(getattr(args, "timeout", None) or CHECK_TIMEOUT_S), CHECK_TIMEOUT_S)
    for host, port in parse_bootstrap(bootstrap_servers(args)):
        problem = _probe(host, port, security, timeout)
        if problem is None:
            return
        if problem:
            keystore = ("ssl.keystore.location", "ssl.keystore.key", "ssl.certificate.location")
            if security.tls and not any(settings.properties.get(k) for k in keystore):
                problem += (
                    " (a broker with ssl.client.auth=required also needs a client certificate: "
                    "ssl.keystore.location)"
                )
            raise CliError(f"{settings.source}: {problem}")
    # nothing reachable: the command reports that itself


def _probe(host: str, port: int, security: ClientSecurity, timeout: float) -> str | None:
    """None: connected and authenticated; "": unreachable; else what went wrong."""
    from broker.network.client import BrokerConnection
    from broker.protocol import registry

    async def once() -> None:
        conn = BrokerConnection(
            host,
            port,
            client_id="millrace-cli",
            connect_timeout_s=timeout,
            request_timeout_s=timeout,
            security=security,
        )
        try:
            await conn.connect()
            await conn.request(18, 0, registry.build(registry.request_class(18, 0)))
        finally:
            await conn.close()

    try:
        asyncio.run(once())
    except (ConnectionRefusedError, TimeoutError):
        return ""
    except OSError as exc:
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "reason", None) or str(cause)
            detail = getattr(cause, "verify_message", None)
            return (
                f"TLS connection to {host}:{port} failed: {reason}"
                + (f" ({detail})" if detail else "")
                + "; check ssl.truststore.location (ssl.ca.location), and for mutual TLS the "
                "key store"
            )
        if cause is not None and _unreachable(cause):
            return ""
        if "SASL" in str(exc):
            return f"{exc} (check sasl.jaas.config, or sasl.username and sasl.password)"
        return f"cannot connect with security.protocol={security.protocol}: {exc}"
    return None


def _unreachable(exc: BaseException) -> bool:
    import socket

    return isinstance(exc, socket.gaierror | ConnectionRefusedError | TimeoutError)
