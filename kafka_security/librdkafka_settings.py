"""Client settings under Kafka's Java names turned into librdkafka's, for the tools that use
confluent-kafka (``millrace topics``, ``produce``, ``acls`` ...) with a Kafka user's
``client.properties``.

Renamed (the Java setting -> librdkafka's):

* ``sasl.jaas.config`` (``PlainLoginModule`` or ``ScramLoginModule`` with ``username`` and
  ``password``) -> ``sasl.username`` and ``sasl.password``; ``sasl.mechanism`` is checked and
  kept (librdkafka takes that name too);
* ``ssl.truststore.location`` with ``ssl.truststore.type=PEM`` -> ``ssl.ca.location``; a JKS
  or PKCS12 trust store (``ssl.truststore.password``) and ``ssl.truststore.certificates``
  (inline PEM) -> ``ssl.ca.pem`` when they hold one certificate (librdkafka's
  ``ssl.ca.pem`` takes only the first), else the certificates are written to
  ``$TMPDIR/millrace-client-<uid>/ca-<digest>.pem`` (directory 0700, file 0600; named by
  content, so every process with the same trust store shares one file) -> ``ssl.ca.location``;
* ``ssl.keystore.location`` (PEM: the private key and its certificate chain in one file, as
  Kafka reads it; or JKS, PKCS12 with ``ssl.keystore.password``) and ``ssl.keystore.key``
  with ``ssl.keystore.certificate.chain`` (inline PEM) -> ``ssl.key.pem`` and
  ``ssl.certificate.pem`` (the chain; in memory, no key file is written).
  ``ssl.key.password`` is kept for an encrypted PEM key;
* ``ssl.endpoint.identification.algorithm``: ``https`` stays, empty (Java's "do not check")
  becomes ``none``.

Java settings librdkafka has no use for (store types and passwords,
``ssl.enabled.protocols``, ``ssl.protocol``, the key and trust manager algorithms,
serializer classes) are dropped; every other setting passes through unchanged, so
librdkafka's own names work as they are (and librdkafka reports the ones it does not know).

Errors: :class:`SettingsError` naming the setting and ``source``, never a password.

Concurrency: pure functions; a trust store file is written to a temporary name and renamed
into place, so concurrent processes do not see half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Mapping

from kafka_security.jaas import PLAIN_MODULE, SCRAM_MODULE, JaasConfigError, parse_jaas

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
STORE_TYPES = ("JKS", "PKCS12", "PEM")

DROPPED = frozenset(
    {
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
    }
)
"""Java settings librdkafka does not have and that change nothing once translated."""

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


class SettingsError(ValueError):
    """A client setting that is unknown, invalid or cannot be translated."""


def _private_dir() -> str:
    """``$TMPDIR/millrace-client-<uid>``, made mode 0700 if missing; refused unless it is a
    directory of this user that no one else can read."""
    base = os.path.join(tempfile.gettempdir(), f"millrace-client-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SettingsError(f"{base} is not a private directory of this user")
    return base


def ca_file(pem: str) -> str:
    """A file holding ``pem`` (trust store certificates), shared by content."""
    directory = _private_dir()
    path = os.path.join(directory, f"ca-{hashlib.sha256(pem.encode()).hexdigest()[:32]}.pem")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ca-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        os.replace(tmp, path)
    return path


def pem_blocks(text: str) -> tuple[list[str], list[str]]:
    """(private key blocks, certificate blocks) of PEM text."""
    keys: list[str] = []
    certs: list[str] = []
    for m in _PEM_BLOCK.finditer(text):
        if "PRIVATE KEY" in m.group(1):
            keys.append(m.group(0))
        elif m.group(1) == "CERTIFICATE":
            certs.append(m.group(0))
    return keys, certs


def _invalid(prop: str, value: object, source: str, expected: str) -> SettingsError:
    return SettingsError(f"Invalid value {value!r} for {prop} in {source} ({expected})")


def _existing(props: Mapping[str, str], prop: str, source: str) -> str:
    path = str(props[prop])
    if not os.path.isfile(path):
        raise SettingsError(f"Invalid value {path!r} for {prop} in {source}: no such file")
    return path


def _store_type(props: Mapping[str, str], prop: str, source: str) -> str:
    kind = str(props.get(prop) or "JKS").strip().upper()
    if kind not in STORE_TYPES:
        raise _invalid(prop, kind, source, ", ".join(STORE_TYPES))
    return kind


def _password(props: Mapping[str, str], prop: str) -> str | None:
    value = props.get(prop)
    return None if value in (None, "") else str(value)


def librdkafka_settings(props: Mapping[str, str], source: str) -> dict[str, str]:
    """librdkafka's settings for ``props`` (Java or librdkafka names; see the module
    docstring). Raises :class:`SettingsError` naming the setting and ``source``."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if key in DROPPED or key.startswith(("ssl.truststore.", "ssl.keystore.")):
            continue
        if key in ("sasl.jaas.config", "ssl.endpoint.identification.algorithm"):
            continue
        out[key] = str(value)
    if "security.protocol" in props:
        protocol = str(props["security.protocol"]).strip().upper()
        if protocol not in PROTOCOLS:
            raise _invalid(
                "security.protocol", props["security.protocol"], source, ", ".join(PROTOCOLS)
            )
        out["security.protocol"] = protocol
    for name in ("sasl.mechanism", "sasl.mechanisms"):
        if name in props:
            mechanism = str(props[name]).strip().upper()
            if mechanism not in MECHANISMS:
                raise _invalid(name, props[name], source, ", ".join(MECHANISMS))
            out[name] = mechanism
    if props.get("sasl.jaas.config"):
        out.update(_jaas_credentials(str(props["sasl.jaas.config"]), source))
    if "ssl.endpoint.identification.algorithm" in props:
        algorithm = str(props["ssl.endpoint.identification.algorithm"]).strip().lower()
        if algorithm not in ("", "https", "none"):
            raise _invalid(
                "ssl.endpoint.identification.algorithm", algorithm, source, "https or empty"
            )
        out["ssl.endpoint.identification.algorithm"] = algorithm or "none"
    _truststore(props, source, out)
    _keystore(props, source, out)
    return out


def _jaas_credentials(jaas_config: str, source: str) -> dict[str, str]:
    """librdkafka's ``sasl.username`` and ``sasl.password`` from a ``sasl.jaas.config``
    line of the PLAIN or SCRAM login module."""
    try:
        jaas = parse_jaas(jaas_config, f"sasl.jaas.config in {source}")
    except JaasConfigError as exc:
        raise SettingsError(str(exc)) from None
    if jaas.module not in (PLAIN_MODULE, SCRAM_MODULE):
        raise SettingsError(
            f"sasl.jaas.config in {source}: login module {jaas.module} is not supported "
            f"(use {PLAIN_MODULE} or {SCRAM_MODULE})"
        )
    if jaas.username is None or jaas.password is None:
        raise SettingsError(
            f'sasl.jaas.config in {source}: the login module needs username="..." and '
            'password="..."'
        )
    return {"sasl.username": jaas.username, "sasl.password": jaas.password}


def _trusted(pem: str) -> dict[str, str]:
    """librdkafka's setting for trusted certificates: inline when there is one."""
    _keys, certs = pem_blocks(pem)
    if len(certs) <= 1:
        return {"ssl.ca.pem": pem}
    return {"ssl.ca.location": ca_file("\n".join(certs) + "\n")}


def _truststore(props: Mapping[str, str], source: str, out: dict[str, str]) -> None:
    if "ssl.ca.location" in props or "ssl.ca.pem" in props:
        return
    if props.get("ssl.truststore.certificates"):
        out.update(_trusted(str(props["ssl.truststore.certificates"])))
        return
    if not props.get("ssl.truststore.location"):
        return
    prop = "ssl.truststore.location"
    path = _existing(props, prop, source)
    kind = _store_type(props, "ssl.truststore.type", source)
    if kind == "PEM":
        out["ssl.ca.location"] = path
        return
    from kafka_security.ssl_factory import truststore_pem

    try:
        pem = truststore_pem(path, kind, _password(props, "ssl.truststore.password"))
    except Exception as exc:  # noqa: BLE001 - a store that does not open names the setting
        raise SettingsError(
            f"cannot read the {kind} trust store {path!r} ({prop} in {source}): "
            f"{type(exc).__name__} (wrong ssl.truststore.password?)"
        ) from None
    out.update(_trusted(pem))


def _keystore(props: Mapping[str, str], source: str, out: dict[str, str]) -> None:
    librdkafka_own = ("ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem")
    if any(k in props for k in librdkafka_own) or "ssl.key.pem" in props:
        return
    if props.get("ssl.keystore.key"):
        chain = props.get("ssl.keystore.certificate.chain")
        if not chain:
            raise SettingsError(
                f"{source}: ssl.keystore.key is set but ssl.keystore.certificate.chain is not"
            )
        out["ssl.key.pem"] = str(props["ssl.keystore.key"])
        out["ssl.certificate.pem"] = str(chain)
        return
    if not props.get("ssl.keystore.location"):
        return
    prop = "ssl.keystore.location"
    path = _existing(props, prop, source)
    kind = _store_type(props, "ssl.keystore.type", source)
    if kind == "PEM":
        with open(path) as f:
            keys, certs = pem_blocks(f.read())
        if len(keys) != 1 or not certs:
            raise SettingsError(
                f"Invalid value {path!r} for {prop} in {source}: a PEM key store holds one "
                f"private key and its certificate chain (found {len(keys)} key(s), "
                f"{len(certs)} certificate(s))"
            )
        out["ssl.key.pem"] = keys[0] + "\n"
        out["ssl.certificate.pem"] = "\n".join(certs) + "\n"
        return
    from kafka_security.ssl_factory import keystore_pem

    try:
        key_pem, chain_pem = keystore_pem(
            path,
            kind,
            _password(props, "ssl.keystore.password"),
            _password(props, "ssl.key.password"),
        )
    except Exception as exc:  # noqa: BLE001
        raise SettingsError(
            f"cannot read the {kind} key store {path!r} ({prop} in {source}): "
            f"{type(exc).__name__} (wrong ssl.keystore.password or ssl.key.password?)"
        ) from None
    out.pop("ssl.key.password", None)  # the converted key is not encrypted
    out["ssl.key.pem"] = key_pem
    out["ssl.certificate.pem"] = chain_pem
