"""TLS and SASL for the connector: the ``kafka.*`` security options of Spark's own Kafka source
turned into what each of the connector's clients needs.

Options (the ``kafka.`` prefix removed, names lower-cased as Spark hands them over), under
Kafka's Java names, as Spark's Kafka source takes them: ``security.protocol`` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
``sasl.jaas.config`` (``org.apache.kafka.common.security.scram.ScramLoginModule required
username="..." password="...";``), ``ssl.truststore.location/.type/.password``,
``ssl.keystore.location/.type/.password``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm`` (``https``, the default, or empty: the broker's
certificate must name the host, or not), ``ssl.enabled.protocols``, ``ssl.cipher.suites``; or
under librdkafka's: ``sasl.mechanisms``, ``sasl.username``, ``sasl.password``,
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.ca.pem``,
``ssl.certificate.pem``, ``ssl.key.pem``, ``enable.ssl.certificate.verification``.

Two consumers:

* the connector's own wire client (:class:`~spark_connector.kafka.cluster.Cluster` and every
  :class:`~spark_connector.kafka.connection.Connection`: the reader's fetches, the batch
  producer, the exactly-once sink's transaction coordinator, markers and progress records):
  :func:`wire_security` builds a :class:`~kafka_security.client_security.ClientSecurity`
  (an ``ssl.SSLContext`` and the SASL credentials) where the connection is made, on the
  executor or the driver, from the plain option strings the reader or writer pickles; it is
  cached per process (keyed by the settings and the key and trust store files' modification
  times), so a task does not load its stores again;
* librdkafka (the driver's planning look-ups, ``fetcher=librdkafka``, ``producer=librdkafka``,
  :func:`~spark_connector.exactly_once.offsets.commit_batch_offsets`):
  :func:`librdkafka_settings` renames the Java settings, as the ``millrace`` tools do
  (:mod:`kafka_security.librdkafka_settings`: a JAAS line becomes ``sasl.username`` /
  ``sasl.password``, a JKS or PKCS12 store private PEM files), once per process and
  settings.

Store types not given (``ssl.keystore.type``, ``ssl.truststore.type``) are read from the files
(JKS by its magic number, PEM by its text, else PKCS12), as Java's default ``JKS`` key store
also loads PKCS12 files and librdkafka's ``ssl.keystore.location`` is PKCS12.

Errors: :class:`SecurityOptionError` (a ``ValueError``), its message naming the option with
its ``kafka.`` prefix; never a password. Mechanisms the wire client does not speak (GSSAPI,
OAUTHBEARER) are :func:`wire_unsupported`: reads then go through librdkafka, writes through
its per-row producer, and exactly-once writes and ``fetcher=direct`` refuse them.

Concurrency: the cache is guarded by a lock; the values it holds are immutable.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = [
    "PROTOCOLS",
    "SecurityOptionError",
    "check_login",
    "is_security_param",
    "librdkafka_settings",
    "security_params",
    "validate_security",
    "wire_security",
    "wire_unsupported",
]

log = logging.getLogger("spark_connector.security")

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
WIRE_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_VERIFY = "enable.ssl.certificate.verification"  # librdkafka's; Java has no such setting
_FILES = (
    "ssl.truststore.location",
    "ssl.keystore.location",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
)
_KNOWN_NAMES = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.provider",
        "ssl.engine.factory.class",
    }
)
"""Java SSL settings an error message may name (to find the option it is about)."""


class SecurityOptionError(ValueError):
    """A security option that cannot work; the message starts with ``option 'kafka.<name>'``."""


def is_security_param(name: str) -> bool:
    """Whether ``name`` (a ``kafka.*`` option without its prefix) is a security setting."""
    return name in ("security.protocol", _VERIFY) or name.startswith(("ssl.", "sasl."))


def security_params(params: Mapping[str, str]) -> dict[str, str]:
    """The security settings among ``params`` (plain strings: what a reader or writer pickles)."""
    return {k: str(v) for k, v in params.items() if is_security_param(k)}


def _protocol(params: Mapping[str, str]) -> str:
    raw = str(params.get("security.protocol") or "PLAINTEXT")
    protocol = raw.strip().upper()
    if protocol not in PROTOCOLS:
        raise SecurityOptionError(
            f"option 'kafka.security.protocol' must be one of {', '.join(PROTOCOLS)}, got {raw!r}"
        )
    return protocol


def _mechanism_option(params: Mapping[str, str]) -> tuple[str, str]:
    """(option name, mechanism upper-cased); Kafka's default is GSSAPI."""
    for name in ("sasl.mechanism", "sasl.mechanisms"):
        value = params.get(name)
        if value is not None and value.strip():
            return f"kafka.{name}", value.strip().upper()
    return "kafka.sasl.mechanism", "GSSAPI"


def wire_unsupported(params: Mapping[str, str]) -> str | None:
    """Why the connector's own client cannot connect with ``params`` (None: it can): a SASL
    mechanism other than PLAIN and SCRAM. Raises :class:`SecurityOptionError` for a
    ``security.protocol`` no client knows."""
    protocol = _protocol(params)
    if protocol.startswith("SASL_"):
        option, mechanism = _mechanism_option(params)
        if mechanism not in WIRE_MECHANISMS:
            return (
                f"option '{option}' is {mechanism}: the connector's own client speaks "
                f"{', '.join(WIRE_MECHANISMS)}"
            )
    return None


# --- the wire client --------------------------------------------------------------------------

_cache: dict[tuple[object, ...], ClientSecurity] = {}
_cache_lock = threading.Lock()
_warned_plaintext = False


def _stamps(settings: Mapping[str, str]) -> tuple[float, ...]:
    """Modification times of the store files named (a replaced certificate is loaded again)."""
    out = []
    for name in _FILES:
        path = settings.get(name)
        if path:
            try:
                out.append(os.stat(path).st_mtime)
            except OSError:
                out.append(-1.0)
    return tuple(out)


def wire_security(params: Mapping[str, str]) -> ClientSecurity:
    """The :class:`~kafka_security.client_security.ClientSecurity` of ``params`` (the
    ``kafka.*`` options without their prefix; other settings are ignored), made once per
    process and settings. Raises :class:`SecurityOptionError` naming the option."""
    from kafka_security.client_security import PLAINTEXT

    settings = security_params(params)
    if not settings:
        return PLAINTEXT
    key = (tuple(sorted(settings.items())), _stamps(settings))
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    made = _build(settings)
    with _cache_lock:
        if len(_cache) >= 64:
            _cache.clear()
        _cache[key] = made
    return made


def validate_security(params: Mapping[str, str]) -> None:
    """Check the security options of ``params`` on the driver (the stores are opened, the
    JAAS line parsed): :class:`SecurityOptionError` naming a bad one."""
    if wire_unsupported(params) is None:
        wire_security(params)
    else:
        librdkafka_settings(params)


def _build(settings: Mapping[str, str]) -> ClientSecurity:
    from kafka_security.client_security import ClientSecurity, client_security
    from kafka_security.errors import ConfigError

    global _warned_plaintext
    protocol = _protocol(settings)
    ignored = sorted(k for k in settings if k != "security.protocol")
    if protocol == "PLAINTEXT":
        if ignored and not _warned_plaintext:
            _warned_plaintext = True
            log.warning(
                "millrace: %s set but kafka.security.protocol is PLAINTEXT: they are ignored, "
                "as Kafka's clients ignore them",
                ", ".join(f"kafka.{k}" for k in ignored),
            )
        return ClientSecurity()
    reason = wire_unsupported(settings)
    if reason is not None:
        raise SecurityOptionError(reason)
    props: dict[str, str] = {**settings, **_store_types(settings)}
    props["security.protocol"] = protocol
    option, mechanism = _mechanism_option(settings)
    if protocol.startswith("SASL_"):
        props["sasl.mechanism"] = mechanism
    # librdkafka's inline PEM settings, under the names the SSL factory reads
    if settings.get("ssl.ca.pem") and not settings.get("ssl.truststore.location"):
        props["ssl.truststore.certificates"] = settings["ssl.ca.pem"]
    if settings.get("ssl.key.pem") and settings.get("ssl.certificate.pem"):
        props["ssl.keystore.key"] = settings["ssl.key.pem"]
        props["ssl.keystore.certificate.chain"] = settings["ssl.certificate.pem"]
    if protocol.startswith("SASL_") and not (
        settings.get("sasl.jaas.config")
        or (settings.get("sasl.username") is not None and settings.get("sasl.password") is not None)
    ):
        raise SecurityOptionError(
            f"option 'kafka.sasl.jaas.config' is required with kafka.security.protocol="
            f"{protocol} and {option}={mechanism} (e.g. 'org.apache.kafka.common.security."
            f'scram.ScramLoginModule required username="alice" password="...";\'), or '
            "options 'kafka.sasl.username' and 'kafka.sasl.password'"
        )
    try:
        security = client_security(props, source="the 'kafka.*' options")
    except ConfigError as exc:
        raise SecurityOptionError(_naming(str(exc), settings)) from None
    if security.ssl_context is not None and settings.get(_VERIFY, "").strip().lower() == "false":
        security.ssl_context.check_hostname = False
        security.ssl_context.verify_mode = ssl.CERT_NONE
    return security


def _store_types(settings: Mapping[str, str]) -> dict[str, str]:
    """``ssl.keystore.type`` / ``ssl.truststore.type`` when not given: the store file's own
    (as Java's ``JKS`` key store loads PKCS12 files too, and librdkafka's
    ``ssl.keystore.location`` is PKCS12): JKS by its magic number, PEM by its text, else
    PKCS12."""
    out: dict[str, str] = {}
    for store in ("ssl.keystore", "ssl.truststore"):
        location = settings.get(f"{store}.location")
        if not location or settings.get(f"{store}.type"):
            continue
        try:
            with open(location, "rb") as f:
                head = f.read(11)
        except OSError:
            continue  # the SSL factory names the missing file
        if head.startswith(b"\xfe\xed\xfe\xed"):
            out[f"{store}.type"] = "JKS"
        elif head.startswith(b"-----BEGIN"):
            out[f"{store}.type"] = "PEM"
        else:
            out[f"{store}.type"] = "PKCS12"
    return out


def _naming(message: str, settings: Mapping[str, str]) -> str:
    """``message`` (a ConfigError's, naming a setting without prefix) as ``option
    'kafka.<setting>': ...``."""
    candidates = sorted(
        {*settings, *_KNOWN_NAMES, "sasl.jaas.config", "sasl.mechanism", "ssl.key.password"},
        key=len,
        reverse=True,
    )
    for name in candidates:
        if name in message:
            return f"option 'kafka.{name}': {message}"
    return f"options 'kafka.security.protocol' / 'kafka.ssl.*' / 'kafka.sasl.*': {message}"


_logins: dict[tuple[object, ...], float] = {}
_LOGIN_TTL_S = 300.0


def check_login(bootstrap: str, params: Mapping[str, str], timeout_s: float) -> None:
    """Connect to one bootstrap server with ``params``' TLS and SASL settings and log in,
    raising :class:`~spark_connector.kafka.errors.AuthenticationError` when the broker
    refuses (a wrong password, an untrusted certificate). For the driver before a librdkafka
    look-up, which would otherwise wait its whole timeout on a refused login. Servers that
    cannot be reached are left for the look-up to report; a success is remembered per
    process for five minutes."""
    import time

    from spark_connector.kafka.connection import Connection, parse_bootstrap

    if wire_unsupported(params) is not None:
        return
    security = wire_security(params)
    if not (security.tls or security.sasl):
        return
    key = (bootstrap, tuple(sorted(security_params(params).items())))
    now = time.monotonic()
    with _cache_lock:
        if _logins.get(key, 0.0) > now:
            return
    for host, port in parse_bootstrap(bootstrap):
        try:
            conn = Connection(host, port, timeout_s, "millrace-spark-login", security)
        except OSError:
            continue  # unreachable (or a transient TLS failure): try the next server
        conn.close()
        with _cache_lock:
            _logins[key] = now + _LOGIN_TTL_S
        return


# --- librdkafka -------------------------------------------------------------------------------

_rdkafka_cache: dict[tuple[object, ...], dict[str, str]] = {}


def librdkafka_settings(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` (``kafka.*`` options without their prefix) with their security settings
    under librdkafka's names (:func:`kafka_security.librdkafka_settings.librdkafka_settings`,
    with the store types read from the files when not given); other settings unchanged.
    Translated once per process and settings (a converted JKS or PKCS12 store is written to a
    private file once). Raises :class:`SecurityOptionError` naming a bad option."""
    from kafka_security.librdkafka_settings import SettingsError
    from kafka_security.librdkafka_settings import librdkafka_settings as translate

    settings = security_params(params)
    out = {k: str(v) for k, v in params.items() if k not in settings}
    if not settings:
        return out
    key = (tuple(sorted(settings.items())), _stamps(settings))
    with _cache_lock:
        found = _rdkafka_cache.get(key)
    if found is None:
        _protocol(settings)
        try:
            found = translate({**settings, **_store_types(settings)}, "the 'kafka.*' options")
        except SettingsError as exc:
            raise SecurityOptionError(_naming(str(exc), settings)) from None
        with _cache_lock:
            if len(_rdkafka_cache) >= 64:
                _rdkafka_cache.clear()
            _rdkafka_cache[key] = found
    out.update(found)
    return out
