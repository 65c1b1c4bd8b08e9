"""The Spark connector's security options (``spark_connector.kafka.security``): Spark's
``kafka.*`` names and librdkafka's become TLS and SASL settings for the connector's own
client and for librdkafka; a bad one is named; a certificate the client does not trust fails
the connection at once. Certificates are made here (``broker.security.certificates``); the
one TLS server is a thread on 127.0.0.1."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.security.certificates import issue, make_ca
from spark_connector.kafka.connection import Connection
from spark_connector.kafka.errors import AuthenticationError
from spark_connector.kafka.security import (
    SecurityOptionError,
    librdkafka_settings,
    security_params,
    validate_security,
    wire_security,
    wire_unsupported,
)

pytestmark = pytest.mark.unit

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="s3cret";'
)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ca")
    make_ca(directory)
    issue(directory, "broker", "broker", server=True)
    return directory


def _jks(ca_pem: Path, path: Path, password: str) -> Path:
    import jks

    der = ssl.PEM_cert_to_DER_cert(ca_pem.read_text())
    jks.KeyStore.new("jks", [jks.TrustedCertEntry.new("ca", der)]).save(str(path), password)
    return path


def test_spark_names_make_tls_and_scram(ca: Path) -> None:
    params = {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "scram-sha-512",
        "sasl.jaas.config": JAAS,
        "ssl.truststore.location": str(ca / "ca.pem"),
        "ssl.truststore.type": "PEM",
        "bootstrap.servers": "ignored",
    }
    sec = wire_security(params)
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "alice",
        "s3cret",
    )
    assert sec.tls and sec.sasl and sec.ssl_context is not None
    assert sec.ssl_context.check_hostname  # https by default, as Kafka's Java client
    assert wire_security(dict(params)) is sec  # made once per process and settings
    assert "s3cret" not in repr(sec)
    assert security_params(params) == {k: v for k, v in params.items() if k != "bootstrap.servers"}


def test_librdkafka_names_and_a_jks_trust_store(ca: Path, tmp_path: Path) -> None:
    store = _jks(ca / "ca.pem", tmp_path / "trust.jks", "changeit")
    sec = wire_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": "pw",
            "ssl.truststore.location": str(store),  # type read from the file: JKS
            "ssl.truststore.password": "changeit",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert (sec.mechanism, sec.username) == ("PLAIN", "bob")
    assert sec.ssl_context is not None and not sec.ssl_context.check_hostname


def test_librdkafka_gets_its_own_names(ca: Path, tmp_path: Path) -> None:
    store = _jks(ca / "ca.pem", tmp_path / "trust.jks", "changeit")
    conf = librdkafka_settings(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": JAAS,
            "ssl.truststore.location": str(store),
            "ssl.truststore.type": "JKS",
            "ssl.truststore.password": "changeit",
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
            "isolation.level": "read_committed",
        }
    )
    assert conf["sasl.username"] == "alice" and conf["sasl.password"] == "s3cret"
    assert "sasl.jaas.config" not in conf and "ssl.enabled.protocols" not in conf
    assert not any(k.startswith("ssl.truststore.") for k in conf)
    # the JKS store's certificates as PEM: inline, or in a private file
    pem = conf.get("ssl.ca.pem") or Path(conf["ssl.ca.location"]).read_text()
    assert "BEGIN CERTIFICATE" in pem
    assert conf["isolation.level"] == "read_committed"
    assert conf["security.protocol"].upper() == "SASL_SSL"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"security.protocol": "SASL_TLS"}, "kafka.security.protocol"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM"}, "kafka.sasl"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
            "kafka.sasl.jaas.config",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'required password="s3cret"',
            },
            "kafka.sasl.jaas.config",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/trust.jks"},
            "kafka.ssl.truststore.location",
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.truststore.location": "/dev/null",
                "ssl.truststore.type": "P12",
            },
            "kafka.ssl.truststore.type",
        ),
        (
            {"security.protocol": "SSL", "ssl.enabled.protocols": "SSLv3"},
            "kafka.ssl.enabled.protocols",
        ),
    ],
)
def test_a_bad_option_is_named(params: dict[str, str], named: str) -> None:
    with pytest.raises(SecurityOptionError, match=named.replace(".", r"\.")) as info:
        validate_security(params)
    assert str(info.value).startswith("option"), info.value
    assert "s3cret" not in str(info.value)


def test_a_wrong_trust_store_password_is_named(ca: Path, tmp_path: Path) -> None:
    store = _jks(ca / "ca.pem", tmp_path / "trust.jks", "changeit")
    with pytest.raises(SecurityOptionError, match=r"kafka\.ssl\.truststore"):
        wire_security(
            {
                "security.protocol": "SSL",
                "ssl.truststore.location": str(store),
                "ssl.truststore.password": "wrong",
            }
        )


def test_mechanisms_the_wire_client_lacks_go_to_librdkafka() -> None:
    assert wire_unsupported({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}) is None
    assert wire_unsupported({"security.protocol": "SSL", "sasl.mechanism": "GSSAPI"}) is None
    reason = wire_unsupported({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"})
    assert reason is not None and "kafka.sasl.mechanism" in reason
    default = wire_unsupported({"security.protocol": "SASL_PLAINTEXT"})  # Kafka's: GSSAPI
    assert default is not None and "GSSAPI" in default


# --- a TLS server the client does not trust ----------------------------------------------------


@pytest.fixture
def tls_server(ca: Path) -> Iterator[int]:
    """A TLS listener on 127.0.0.1 with the broker certificate of ``ca``: it accepts and
    handshakes once."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(ca / "broker.pem"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        listener.close()
        thread.join(5)


def test_an_untrusted_certificate_fails_at_once(tls_server: int, tmp_path: Path) -> None:
    other = tmp_path / "other-ca"
    make_ca(other)
    sec = wire_security(
        {"security.protocol": "SSL", "ssl.truststore.location": str(other / "ca.pem")}
    )
    with pytest.raises(AuthenticationError, match=r"kafka\.ssl\.truststore\.location"):
        Connection("127.0.0.1", tls_server, 5.0, "test", sec)


def test_a_trusted_certificate_connects(tls_server: int, ca: Path) -> None:
    sec = wire_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(ca / "ca.pem"),
            "ssl.truststore.type": "PEM",
        }
    )
    conn = Connection("127.0.0.1", tls_server, 5.0, "test", sec)
    try:
        assert not conn.pending()
    finally:
        conn.close()
