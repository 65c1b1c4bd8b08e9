"""The security building blocks, without a broker: key stores (PEM, PKCS12, JKS) through a
real TLS handshake, principal mapping rules, JAAS lines, SCRAM credentials in Kafka's text
form, the SASL exchanges and session states, and the ACL authorizer's decisions."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.config_def import ConfigError
from broker.security import acl
from broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from broker.security.authorizer import AclAuthorizer, parse_super_users
from broker.security.certificates import issue, make_ca
from broker.security.principal import (
    PrincipalMappingError,
    map_distinguished_name,
    parse_mapping_rules,
    subject_of,
)
from broker.security.sasl_session import SaslSession, SaslState
from kafka_security import scram
from kafka_security.jaas import SCRAM_MODULE, JaasConfigError, jaas_for, parse_jaas
from kafka_security.sasl_mechanisms import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    make_client,
    make_server,
)
from kafka_security.ssl_factory import client_context, server_context

# --- key stores through a real handshake ------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_ca(d)
    issue(d, "server", "broker-1", server=True)
    issue(d, "client", "alice", server=False)
    return d


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> bytes | None:
    """Run a TLS handshake over a socket pair; returns the client certificate the server saw."""
    a, b = socket.socketpair()
    seen: dict[str, Any] = {}

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                seen["cert"] = s.getpeercert(binary_form=True)
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["error"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="127.0.0.1") as c:
            assert c.recv(2) == b"ok"
    finally:
        t.join(10)
    if "error" in seen:
        raise seen["error"]
    return seen.get("cert")


def _pkcs12(pki: Path, name: str, password: str) -> Path:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key((pki / f"{name}.key").read_bytes(), None)
    certs = x509.load_pem_x509_certificates((pki / f"{name}.crt").read_bytes())
    data = pkcs12.serialize_key_and_certificates(
        name.encode(),
        key,  # type: ignore[arg-type]
        certs[0],
        certs[1:],
        serialization.BestAvailableEncryption(password.encode()),
    )
    path = pki / f"{name}.p12"
    path.write_bytes(data)
    return path


def _jks(pki: Path, name: str, password: str) -> tuple[Path, Path]:
    """A JKS key store (key + chain) and a JKS trust store (the CA), written with pyjks."""
    import jks
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key((pki / f"{name}.key").read_bytes(), None)
    der_key = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    chain = [
        c.public_bytes(serialization.Encoding.DER)
        for c in x509.load_pem_x509_certificates((pki / f"{name}.crt").read_bytes())
    ]
    entry = jks.PrivateKeyEntry.new(name, chain, der_key, "pkcs8")
    keystore = pki / f"{name}.jks"
    jks.KeyStore.new("jks", [entry]).save(str(keystore), password)
    ca = x509.load_pem_x509_certificate((pki / "ca.pem").read_bytes())
    trusted = jks.TrustedCertEntry.new("ca", ca.public_bytes(serialization.Encoding.DER))
    truststore = pki / "truststore.jks"
    jks.KeyStore.new("jks", [trusted]).save(str(truststore), password)
    return keystore, truststore


def test_pem_key_stores_and_mutual_tls(pki: Path) -> None:
    server = server_context(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki / "server.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki / "ca.pem"),
            "ssl.client.auth": "required",
        }.get
    )
    client = client_context(
        {
            "ssl.truststore.certificates": (pki / "ca.pem").read_text(),
            "ssl.keystore.key": (pki / "client.key").read_text(),
            "ssl.keystore.certificate.chain": (pki / "client.crt").read_text(),
        }.get
    )
    der = _handshake(server, client)
    assert der is not None
    assert subject_of(der) == "CN=alice,OU=Millrace"


def test_pkcs12_and_jks_key_stores(pki: Path) -> None:
    p12 = _pkcs12(pki, "server", "p12-secret")
    server = server_context(
        {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(p12),
            "ssl.keystore.password": "p12-secret",
        }.get
    )
    keystore, truststore = _jks(pki, "client", "jks-secret")
    client = client_context(
        {
            "ssl.truststore.type": "JKS",
            "ssl.truststore.location": str(truststore),
            "ssl.truststore.password": "jks-secret",
            "ssl.keystore.type": "JKS",
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": "jks-secret",
        }.get
    )
    _handshake(server, client)
    with pytest.raises(ConfigError, match="ssl.keystore.location") as info:
        server_context(
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(p12),
                "ssl.keystore.password": "wrong-secret",
            }.get
        )
    assert "wrong-secret" not in str(info.value)


def test_host_name_verification(pki: Path) -> None:
    other = issue(pki, "other", "other", server=True, hosts=("other.example",))
    server = server_context(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(other.keystore)}.get
    )  # a certificate for another host
    strict = client_context(
        {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki / "ca.pem")}.get
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, strict)
    lax = client_context(
        {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki / "ca.pem"),
            "ssl.endpoint.identification.algorithm": "",
        }.get
    )
    _handshake(server, lax)


def test_bad_ssl_settings_name_the_property(pki: Path) -> None:
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        server_context({"ssl.keystore.type": "PEM"}.get)
    with pytest.raises(ConfigError, match="ssl.enabled.protocols"):
        client_context({"ssl.enabled.protocols": "SSLv3"}.get)
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        client_context({"ssl.cipher.suites": "NO-SUCH-CIPHER"}.get)


# --- principals, JAAS ---------------------------------------------------------------------------


def test_principal_mapping_rules_as_kafka() -> None:
    rules = parse_mapping_rules(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT"
    )
    assert map_distinguished_name("CN=kafka-svc,OU=ServiceUsers,O=Org", rules) == "User:kafka-svc"
    assert map_distinguished_name("CN=Adam,OU=Sales,O=Org", rules) == "User:adam@sales"
    assert map_distinguished_name("CN=x", rules) == "User:CN=x"
    only = parse_mapping_rules("RULE:^CN=([^,]+)$/$1/U")
    assert map_distinguished_name("CN=bob", only) == "User:BOB"
    with pytest.raises(PrincipalMappingError):
        map_distinguished_name("OU=nobody", only)
    with pytest.raises(PrincipalMappingError):
        parse_mapping_rules("RULE:broken")


def test_jaas_lines() -> None:
    jaas = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="a\\"b" user_admin="a\\"b" user_alice=alice-pw;'
    )
    assert (jaas.username, jaas.password) == ("admin", 'a"b')
    assert jaas.plain_users() == {"admin": 'a"b', "alice": "alice-pw"}
    assert parse_jaas(jaas_for(SCRAM_MODULE, "u", 'p"\\q')).password == 'p"\\q'
    with pytest.raises(JaasConfigError) as info:
        parse_jaas('ScramLoginModule username="x" password="secret-pw";')
    assert "secret-pw" not in str(info.value)


# --- SCRAM ---------------------------------------------------------------------------------------


def test_scram_credentials_in_kafkas_text_form() -> None:
    # RFC 7677's example (SCRAM-SHA-256, user "user", password "pencil")
    import base64

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.credential_from_salted(
        "SCRAM-SHA-256", salt, scram.salted_password("SCRAM-SHA-256", "pencil", salt, 4096), 4096
    )
    text = cred.to_text()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and text.endswith(
        ",iterations=4096"
    )
    assert scram.ScramCredential.from_text(text) == cred
    assert scram.user_credentials({"SCRAM-SHA-256": text, "producer_byte_rate": "10"}) == {
        "SCRAM-SHA-256": cred
    }
    with pytest.raises(scram.CredentialFormatError):
        scram.ScramCredential.from_text("salt=???")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_exchanges(mechanism: str) -> None:
    creds = {"alice": scram.make_credential(mechanism, "pw")} if mechanism != "PLAIN" else {}

    def lookup(mech: str, user: str) -> Any:
        return creds.get(user) if mech == mechanism else None

    for password, ok in (("pw", True), ("bad", False)):
        server = make_server(mechanism, lookup, {"alice": "pw"})
        client = make_client(mechanism, "alice", password)
        token: bytes | None = client.first()
        try:
            while token is not None and not server.complete:
                reply = server.respond(token)
                token = client.respond(reply)
        except SaslAuthenticationError:
            assert not ok
            continue
        assert ok and server.complete and server.username == "alice"


def test_sasl_session_states_and_reauthentication() -> None:
    now = [0.0]
    cred = scram.make_credential("SCRAM-SHA-512", "pw")
    session = SaslSession(
        ("SCRAM-SHA-512",),
        lambda m, u: cred if u == "alice" else None,
        {},
        reauth_ms=1000,
        clock=lambda: now[0],
    )
    assert not session.authenticated
    with pytest.raises(IllegalSaslStateError):
        session.authenticate(b"n,,n=alice,r=x")  # no handshake yet
    session = SaslSession(
        ("SCRAM-SHA-512",), lambda m, u: cred, {}, reauth_ms=1000, clock=lambda: now[0]
    )
    assert not session.handshake("PLAIN", 1) and session.state is SaslState.FAILED

    def login(s: SaslSession, user: str) -> int:
        assert s.handshake("SCRAM-SHA-512", 1)
        client = make_client("SCRAM-SHA-512", user, "pw")
        reply, _ = s.authenticate(client.first())
        reply, lifetime = s.authenticate(client.respond(reply) or b"")
        client.respond(reply)
        return lifetime

    session = SaslSession(
        ("SCRAM-SHA-512",), lambda m, u: cred, {}, reauth_ms=1000, clock=lambda: now[0]
    )
    assert login(session, "alice") == 1000
    assert session.authenticated and session.principal == "User:alice"
    now[0] = 1.5
    assert not session.authenticated  # expired
    assert login(session, "alice") == 1000  # re-authenticated
    assert session.authenticated
    with pytest.raises(SaslAuthenticationError, match="principal"):
        login(session, "mallory")  # same credential store, another name: refused


# --- the authorizer --------------------------------------------------------------------------


class _Store:
    """The ZooKeeper side of the authorizer, in memory."""

    def __init__(self) -> None:
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}

    async def update_acls(self, pattern: ResourcePattern, update: Any) -> Any:
        new = update(self.acls.get(pattern, frozenset()))
        if new:
            self.acls[pattern] = new
        else:
            self.acls.pop(pattern, None)
        return new

    async def all_acls(self) -> Any:
        return dict(self.acls)


def _entry(
    principal: str, op: Operation, permission: Permission = Permission.ALLOW, host: str = "*"
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, permission)


def test_authorizer_decisions_as_kafka() -> None:
    asyncio.run(_authorizer_decisions())


async def _authorizer_decisions() -> None:
    store = _Store()
    az = AclAuthorizer(store, super_users=parse_super_users("User:admin; User:ops"))  # type: ignore[arg-type]
    topic = ResourceType.TOPIC
    await az.create(
        [
            AclBinding(ResourcePattern(topic, "orders"), _entry("User:alice", Operation.READ)),
            AclBinding(
                ResourcePattern(topic, "logs-", PatternType.PREFIXED),
                _entry("User:alice", Operation.WRITE),
            ),
            AclBinding(
                ResourcePattern(topic, "logs-secret"),
                _entry("User:alice", Operation.ALL, Permission.DENY),
            ),
            AclBinding(
                ResourcePattern(topic, "*"), _entry("User:*", Operation.DESCRIBE, host="10.0.0.1")
            ),
            AclBinding(ResourcePattern(ResourceType.GROUP, "g"), _entry("User:bob", Operation.ALL)),
        ]
    )

    def may(
        principal: str,
        op: Operation,
        name: str,
        rtype: ResourceType = topic,
        host: str = "127.0.0.1",
    ) -> bool:
        return az.authorize(principal, f"{host}:5555", op, rtype, name)

    assert may("User:admin", Operation.DELETE, "anything")  # super user
    assert may("User:alice", Operation.READ, "orders")
    assert may("User:alice", Operation.DESCRIBE, "orders")  # implied by READ
    assert not may("User:alice", Operation.WRITE, "orders")
    assert may("User:alice", Operation.WRITE, "logs-app")  # PREFIXED
    assert not may("User:alice", Operation.WRITE, "logs-secret")  # DENY wins
    assert not may("User:bob", Operation.DESCRIBE, "orders")
    assert may("User:bob", Operation.DESCRIBE, "orders", host="10.0.0.1")  # wildcard name+principal
    assert may("User:bob", Operation.READ, "g", ResourceType.GROUP)  # ALL
    assert not may("User:alice", Operation.READ, "unlisted")  # no ACL: denied by default
    az.allow_if_no_acl = True
    assert may("User:alice", Operation.READ, "unlisted-group", ResourceType.GROUP)
    assert not may("User:alice", Operation.READ, "g", ResourceType.GROUP)  # ACLs exist for g
    az.allow_if_no_acl = False
    assert az.authorize_any("User:alice", "127.0.0.1:1", Operation.WRITE, topic)
    assert not az.authorize_any("User:bob", "127.0.0.1:1", Operation.WRITE, topic)

    flt = AclBindingFilter(
        ResourceType.ANY, "logs-app", PatternType.MATCH, None, None, Operation.ANY, Permission.ANY
    )
    matched = {b.pattern.name for b in az.bindings(flt)}
    assert matched == {"logs-", "*"}
    deleted = await az.delete(
        AclBindingFilter(
            topic, None, PatternType.PREFIXED, "User:alice", None, Operation.ANY, Permission.ANY
        )
    )
    assert [b.pattern.name for b in deleted] == ["logs-"]
    assert not may("User:alice", Operation.WRITE, "logs-app")
    assert ResourcePattern(topic, "logs-", PatternType.PREFIXED) not in store.acls


def test_acl_znodes_in_kafkas_format() -> None:
    entries = frozenset(
        {
            _entry("User:alice", Operation.DESCRIBE_CONFIGS),
            _entry("User:bob", Operation.READ, Permission.DENY, "1.2.3.4"),
        }
    )
    data = acl.encode_acls(entries)
    assert data == (
        b'{"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow", '
        b'"operation": "DescribeConfigs", "host": "*"}, {"principal": "User:bob", '
        b'"permissionType": "Deny", "operation": "Read", "host": "1.2.3.4"}]}'
    )
    assert acl.decode_acls(data) == entries
    literal = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx")
    prefixed = ResourcePattern(ResourceType.TOPIC, "p-", PatternType.PREFIXED)
    assert literal.znode() == "/kafka-acl/TransactionalId/tx"
    assert prefixed.znode() == "/kafka-acl-extended/prefixed/Topic/p-"
    for pattern in (literal, prefixed):
        directory, notice = pattern.change_notice()
        assert acl.pattern_of_notice(directory, notice) == pattern
    assert literal.change_notice() == ("/kafka-acl-changes", b"TransactionalId:tx")
