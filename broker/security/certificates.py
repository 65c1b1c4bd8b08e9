"""Certificates for a local secured cluster (``millrace cluster up --security ...``), made
with ``cryptography``: a self-signed CA, and certificates it signs for the brokers (valid for
``127.0.0.1``, ``::1`` and ``localhost``) and for clients (mutual TLS).

Files (PEM, keys unencrypted PKCS#8, mode 0600): ``ca.pem`` (the trust store everyone
uses), ``ca.key``, and per certificate ``<name>.pem`` holding the private key followed by the
certificate chain, which is what Kafka's ``ssl.keystore.type=PEM`` with
``ssl.keystore.location`` reads, with ``<name>.crt`` and ``<name>.key`` beside it for
librdkafka (``ssl.certificate.location``, ``ssl.key.location``).

Concurrency: plain functions writing files; run once while a cluster is set up.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 3650


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    keystore: Path  # key + chain (Kafka's PEM key store)
    certificate: Path
    key: Path


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key() -> object:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(directory: Path, common_name: str = "Millrace local CA") -> Path:
    """A self-signed CA in ``directory`` (``ca.pem``, ``ca.key``); returns ``ca.pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())  # type: ignore[attr-defined]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())  # type: ignore[arg-type]
    )
    _write(directory / "ca.key", _pem_key(key))
    _write(directory / "ca.pem", cert.public_bytes(serialization.Encoding.PEM))
    return directory / "ca.pem"


def issue(
    directory: Path,
    name: str,
    common_name: str,
    *,
    server: bool,
    hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost"),
) -> CertificateFiles:
    """A certificate signed by ``directory``'s CA for ``common_name`` (subject
    ``CN=<common_name>,OU=Millrace``); a server certificate names ``hosts``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                # most general first, as usual: the DN string reads CN=...,OU=Millrace
                [
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Millrace"),
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())  # type: ignore[attr-defined]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        alt: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alt.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    key_pem = _pem_key(key)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    files = CertificateFiles(
        directory / f"{name}.pem", directory / f"{name}.crt", directory / f"{name}.key"
    )
    _write(files.keystore, key_pem + cert_pem + ca_pem)
    _write(files.certificate, cert_pem + ca_pem)
    _write(files.key, key_pem)
    return files
