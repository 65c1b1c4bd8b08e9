"""``ssl.SSLContext`` objects from Kafka's ``ssl.*`` settings (Kafka's ``SslFactory``).

Key stores (``ssl.keystore.type``): ``PEM`` (a file at ``ssl.keystore.location`` holding the
private key and its certificate chain, or both inline in ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``; ``ssl.key.password`` for an encrypted key), ``PKCS12``
(read with ``cryptography``) and ``JKS`` (read with ``pyjks``). Trust stores
(``ssl.truststore.type``): the same three, or inline PEM in ``ssl.truststore.certificates``.
Python's ``ssl`` loads keys from files only, so a PKCS12 or JKS key is handed to it through a
private temporary PEM file that is deleted at once.

Other settings: ``ssl.client.auth`` (required, requested, none) on a server,
``ssl.enabled.protocols`` / ``ssl.protocol`` (TLSv1.2, TLSv1.3), ``ssl.cipher.suites``
(OpenSSL names; TLS 1.3 suites are OpenSSL's defaults), and on a client
``ssl.endpoint.identification.algorithm`` (``https``: the server's certificate must name
the host; empty: not checked).

Errors name the setting (:class:`~broker.config_def.ConfigError`); no password is ever in
a message.

Concurrency: builds immutable-after-build contexts; call at start-up or connection set-up.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

from kafka_security.errors import ConfigError

Settings = Callable[[str], Any]
"""A lookup of a Kafka ``ssl.*`` setting by name (None: unset)."""

_PROTOCOLS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
    "TLS": ssl.TLSVersion.TLSv1_3,
}


def server_context(get: Settings) -> ssl.SSLContext:
    """The context a listener's server side uses."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, get)
    _load_keystore(ctx, get, required=True)
    auth = str(get("ssl.client.auth") or "none").lower()
    if auth not in ("required", "requested", "none"):
        raise ConfigError(
            f"Invalid value {auth!r} for configuration ssl.client.auth "
            "(required, requested or none)"
        )
    if auth != "none":
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
        if not _load_truststore(ctx, get):
            raise ConfigError(
                "ssl.client.auth=" + auth + " needs a trust store (ssl.truststore.location "
                "or ssl.truststore.certificates)"
            )
    return ctx


def client_context(get: Settings) -> ssl.SSLContext:
    """The context a client (another broker, a tool, the Spark connector) uses."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, get)
    algorithm = get("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = str("https" if algorithm is None else algorithm).lower() == "https"
    if not _load_truststore(ctx, get):
        ctx.load_default_certs()
    _load_keystore(ctx, get, required=False)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _protocols(ctx: ssl.SSLContext, get: Settings) -> None:
    enabled = get("ssl.enabled.protocols")
    names: list[str]
    if enabled:
        names = list(enabled) if isinstance(enabled, list | tuple) else str(enabled).split(",")
    else:
        names = ["TLSv1.2", "TLSv1.3"]
    versions = []
    for name in (n.strip() for n in names if n.strip()):
        if name not in _PROTOCOLS:
            raise ConfigError(
                f"Invalid value {name!r} for configuration ssl.enabled.protocols (TLSv1.2, TLSv1.3)"
            )
        versions.append(_PROTOCOLS[name])
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        text = ":".join(ciphers) if isinstance(ciphers, list | tuple) else str(ciphers)
        try:
            ctx.set_ciphers(text.replace(",", ":"))
        except ssl.SSLError as exc:
            raise ConfigError(
                f"Invalid value {text!r} for configuration ssl.cipher.suites: {exc}"
            ) from None


def _password(get: Settings, name: str) -> str | None:
    value = get(name)
    return None if value in (None, "") else str(value)


def _load_keystore(ctx: ssl.SSLContext, get: Settings, *, required: bool) -> None:
    kind = str(get("ssl.keystore.type") or "JKS").upper()
    location = get("ssl.keystore.location")
    inline_key = get("ssl.keystore.key")
    if inline_key:
        chain = get("ssl.keystore.certificate.chain")
        if not chain:
            raise ConfigError("ssl.keystore.key is set but ssl.keystore.certificate.chain is not")
        _load_pem_pair(ctx, str(inline_key), str(chain), _password(get, "ssl.key.password"))
        return
    if not location:
        if required:
            raise ConfigError(
                "an SSL listener needs a key store: ssl.keystore.location (or "
                "ssl.keystore.key with ssl.keystore.certificate.chain)"
            )
        return
    path = str(location)
    if not os.path.exists(path):
        raise ConfigError(
            f"Invalid value {path!r} for configuration ssl.keystore.location: no such file"
        )
    store_password = _password(get, "ssl.keystore.password")
    key_password = _password(get, "ssl.key.password") or store_password
    try:
        if kind == "PEM":
            ctx.load_cert_chain(path, password=key_password)
        elif kind == "PKCS12":
            key_pem, chain_pem = _pkcs12_key(path, store_password)
            _load_pem_pair(ctx, key_pem, chain_pem, None)
        elif kind == "JKS":
            key_pem, chain_pem = _jks_key(path, store_password, key_password)
            _load_pem_pair(ctx, key_pem, chain_pem, None)
        else:
            raise ConfigError(
                f"Invalid value {kind!r} for configuration ssl.keystore.type (JKS, PKCS12, PEM)"
            )
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store that does not open names the setting
        raise ConfigError(
            f"cannot load the {kind} key store at ssl.keystore.location {path!r}: "
            f"{type(exc).__name__} (wrong ssl.keystore.password or ssl.key.password?)"
        ) from None


def _load_truststore(ctx: ssl.SSLContext, get: Settings) -> bool:
    inline = get("ssl.truststore.certificates")
    if inline:
        ctx.load_verify_locations(cadata=str(inline))
        return True
    location = get("ssl.truststore.location")
    if not location:
        return False
    path = str(location)
    kind = str(get("ssl.truststore.type") or "JKS").upper()
    password = _password(get, "ssl.truststore.password")
    try:
        if kind == "PEM":
            ctx.load_verify_locations(cafile=path)
        elif kind == "PKCS12":
            ctx.load_verify_locations(cadata=_pkcs12_certs(path, password))
        elif kind == "JKS":
            ctx.load_verify_locations(cadata=_jks_certs(path, password))
        else:
            raise ConfigError(
                f"Invalid value {kind!r} for configuration ssl.truststore.type (JKS, PKCS12, PEM)"
            )
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(
            f"cannot load the {kind} trust store at ssl.truststore.location {path!r}: "
            f"{type(exc).__name__}"
        ) from None
    return True


def _load_pem_pair(ctx: ssl.SSLContext, key_pem: str, chain_pem: str, password: str | None) -> None:
    fd, path = tempfile.mkstemp(prefix="millrace-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key_pem.strip() + "\n" + chain_pem.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def truststore_pem(path: str, kind: str, password: str | None) -> str:
    """The certificates of a JKS or PKCS12 trust store as PEM text (for clients that take PEM
    only, like librdkafka)."""
    kind = kind.upper()
    if kind == "PKCS12":
        return _pkcs12_certs(path, password)
    if kind == "JKS":
        return _jks_certs(path, password)
    raise ValueError(f"not a JKS or PKCS12 store type: {kind}")


def keystore_pem(
    path: str, kind: str, store_password: str | None, key_password: str | None
) -> tuple[str, str]:
    """(the unencrypted private key, its certificate chain) of a JKS or PKCS12 key store as
    PEM text."""
    kind = kind.upper()
    if kind == "PKCS12":
        return _pkcs12_key(path, store_password)
    if kind == "JKS":
        return _jks_key(path, store_password, key_password or store_password)
    raise ValueError(f"not a JKS or PKCS12 store type: {kind}")


def _pem_cert(der: bytes) -> str:
    return ssl.DER_cert_to_PEM_cert(der)


def _pkcs12_key(path: str, password: str | None) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    with open(path, "rb") as f:
        key, cert, extra = pkcs12.load_key_and_certificates(
            f.read(), password.encode() if password else None
        )
    if key is None or cert is None:
        raise ValueError("no private key entry")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    certs = [cert, *(extra or [])]
    chain = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
    return key_pem, chain


def _pkcs12_certs(path: str, password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    with open(path, "rb") as f:
        store = pkcs12.load_pkcs12(f.read(), password.encode() if password else None)
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise ValueError("no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _jks_key(path: str, store_password: str | None, key_password: str | None) -> tuple[str, str]:
    import jks

    store = jks.KeyStore.load(path, store_password or "", try_decrypt_keys=False)
    for entry in store.private_keys.values():
        if not entry.is_decrypted():
            entry.decrypt(key_password or store_password or "")
        key_pem = (
            "-----BEGIN PRIVATE KEY-----\n"
            + _b64_lines(entry.pkey_pkcs8)
            + "-----END PRIVATE KEY-----\n"
        )
        chain = "".join(_pem_cert(der) for _kind, der in entry.cert_chain)
        return key_pem, chain
    raise ValueError("no private key entry")


def _jks_certs(path: str, password: str | None) -> str:
    import jks

    store = jks.KeyStore.load(path, password or "")
    certs = [_pem_cert(c.cert) for c in store.certs.values()]
    for entry in store.private_keys.values():
        certs.extend(_pem_cert(der) for _kind, der in entry.cert_chain[:1])
    if not certs:
        raise ValueError("no certificate")
    return "".join(certs)


def _b64_lines(der: bytes) -> str:
    import base64

    text = base64.b64encode(der).decode()
    return "".join(text[i : i + 64] + "\n" for i in range(0, len(text), 64))
