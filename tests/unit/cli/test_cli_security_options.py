"""The pure parts of the CLI's security (issue 28): Java ``.properties`` files,
``--command-config`` under Kafka's Java names translated to librdkafka's, where a command's
settings come from, and the option handling and output of ``millrace acls`` and
``millrace users``. No cluster; the integration tests are ``test_cli_security.py``."""

from __future__ import annotations

import argparse
import json
import stat
from pathlib import Path

import pytest

from broker.cli import acls, users
from broker.cli.client_settings import settings_of
from broker.cli.common import CliError, read_properties_file
from broker.cli.main import build_parser
from broker.security.certificates import issue, make_ca
from kafka_security.librdkafka_settings import SettingsError, librdkafka_settings

pytestmark = pytest.mark.unit

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="s3cret";'
)


def test_properties_file_continuations_and_escapes(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text(
        "# comment\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="bob" \\\n'
        '    password="p\\\\w";\n'
        "  key\\=with\\:seps : value  \n"
        "unicode=\\u00e9t\\u00e9\n"
        "empty=\n"
    )
    props = read_properties_file(str(f), "--command-config")
    assert props["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
        'password="p\\w";'
    )
    assert props["key=with:seps"] == "value"
    assert props["unicode"] == "été"
    assert props["empty"] == ""


def test_java_names_become_librdkafka_names(tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    client = issue(tmp_path, "client", "alice", server=False)
    out = librdkafka_settings(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": JAAS,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(client.keystore),
            "ssl.endpoint.identification.algorithm": "",
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
            "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
            "client.id": "tool",
        },
        "--command-config F",
    )
    key, chain = out.pop("ssl.key.pem"), out.pop("ssl.certificate.pem")
    assert out == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "tool",
    }
    # the PEM key store split into the key and its chain (in memory: no key file)
    assert key.startswith("-----BEGIN PRIVATE KEY-----") and key.count("BEGIN") == 1
    assert "PRIVATE KEY" not in chain and chain.count("BEGIN CERTIFICATE") == 2


def _pkcs12_stores(tmp_path: Path) -> tuple[Path, Path]:
    """(a PKCS12 key store of a client certificate, a PKCS12 trust store of two CAs)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        load_pem_private_key,
        pkcs12,
    )

    ca = make_ca(tmp_path)
    other = make_ca(tmp_path / "other", "Another CA")
    client = issue(tmp_path, "client", "alice", server=False)
    store = tmp_path / "client.p12"
    store.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"client",
            load_pem_private_key(client.key.read_bytes(), None),  # type: ignore[arg-type]
            x509.load_pem_x509_certificate(client.certificate.read_bytes()),
            None,
            BestAvailableEncryption(b"storepw"),
        )
    )
    trust = tmp_path / "trust.p12"
    trust.write_bytes(
        pkcs12.serialize_java_truststore(
            [
                pkcs12.PKCS12Certificate(x509.load_pem_x509_certificate(p.read_bytes()), b"ca")
                for p in (ca, other)
            ],
            BestAvailableEncryption(b"trustpw"),
        )
    )
    return store, trust


def test_pkcs12_stores_are_converted(tmp_path: Path) -> None:
    store, trust = _pkcs12_stores(tmp_path)
    props = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(store),
        "ssl.keystore.password": "storepw",
        "ssl.key.password": "storepw",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(trust),
        "ssl.truststore.password": "trustpw",
    }
    out = librdkafka_settings(props, "F")
    assert set(out) == {"ssl.key.pem", "ssl.certificate.pem", "ssl.ca.location"}
    # two CAs: a file (librdkafka's ssl.ca.pem takes one), private, named by its content
    ca_file = Path(out["ssl.ca.location"])
    assert ca_file.read_text().count("BEGIN CERTIFICATE") == 2
    assert stat.S_IMODE(ca_file.stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(ca_file.parent.stat().st_mode) == 0o700
    assert librdkafka_settings(props, "F")["ssl.ca.location"] == str(ca_file)
    with pytest.raises(SettingsError, match="ssl.keystore.location in F") as info:
        librdkafka_settings({**props, "ssl.keystore.password": "nope"}, "F")
    assert "nope" not in str(info.value)
    with pytest.raises(SettingsError, match="ssl.truststore.location in F"):
        librdkafka_settings({**props, "ssl.truststore.password": "nope"}, "F")
    one = librdkafka_settings(
        {"ssl.truststore.certificates": ca_file.read_text().split("-----END CERTIFICATE-----")[0]
         + "-----END CERTIFICATE-----\n"},
        "F",
    )  # fmt: skip
    assert set(one) == {"ssl.ca.pem"}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "SASL_PLAIN"}, "Invalid value 'SASL_PLAIN' for security.protocol"),
        ({"sasl.mechanism": "SCRAM-MD5"}, "sasl.mechanism"),
        ({"sasl.jaas.config": "nonsense"}, "sasl.jaas.config in F"),
        (
            {"sasl.jaas.config": "com.example.Login required username=u password=p;"},
            "login module com.example.Login is not supported",
        ),
        (
            {"sasl.jaas.config": JAAS.replace(' password="s3cret"', "")},
            'username="..." and password="..."',
        ),
        ({"ssl.truststore.location": "/no/such.pem"}, "ssl.truststore.location in F: no such"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification"),
    ],
)
def test_bad_settings_name_the_property_and_source(props: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match="F") as info:
        librdkafka_settings(props, "F")
    assert message in str(info.value)
    assert "s3cret" not in str(info.value)


def test_bad_store_type(tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    with pytest.raises(SettingsError, match="ssl.truststore.type in F"):
        librdkafka_settings({"ssl.truststore.location": str(ca), "ssl.truststore.type": "DER"}, "F")


def test_settings_source(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(
        json.dumps(
            {
                "bootstrap_servers": "127.0.0.1:1",
                "client_config": {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "admin",
                    "sasl.password": "pw",
                },
            }
        )
    )
    from_dir = settings_of(argparse.Namespace(dir=str(tmp_path), command_config=None))
    assert from_dir.secured and from_dir.librdkafka["sasl.username"] == "admin"
    assert str(tmp_path / "cluster.json") in str(from_dir.source)
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=PLAINTEXT\n")
    explicit = settings_of(argparse.Namespace(dir=str(tmp_path), command_config=str(f)))
    assert not explicit.secured and explicit.source == f"--command-config {f}"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "cluster.json").write_text('{"bootstrap_servers": "h:1"}')
    assert settings_of(argparse.Namespace(dir=str(plain))).properties == {}


def test_unknown_setting_is_refused_by_librdkafka(tmp_path: Path) -> None:
    from broker.cli.client_settings import librdkafka_config

    f = tmp_path / "client.properties"
    f.write_text("client.id=x\nno.such.setting=1\n")
    args = argparse.Namespace(bootstrap_server="127.0.0.1:1", dir=None, command_config=str(f))
    with pytest.raises(CliError, match=rf"^--command-config {f}: .*no\.such\.setting"):
        librdkafka_config(args)


# --- millrace acls -------------------------------------------------------------------------


def _acls(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", *argv])


@pytest.mark.parametrize(
    ("text", "op"),
    [("Read", "READ"), ("read", "READ"), ("AlterConfigs", "ALTER_CONFIGS"),
     ("alter_configs", "ALTER_CONFIGS"), ("IDEMPOTENTWRITE", "IDEMPOTENT_WRITE"), ("All", "ALL")],
)  # fmt: skip
def test_operation_names(text: str, op: str) -> None:
    assert acls.parse_operation(text) == op


def test_producer_and_consumer_expand_as_kafka_does() -> None:
    args = _acls(
        "--add", "--producer", "--idempotent", "--consumer", "--allow-principal", "User:bob",
        "--topic", "t", "--group", "g", "--transactional-id", "tx",
    )  # fmt: skip
    got = {
        (p.resource_type, p.name): sorted(e.operation for e in es)
        for p, es in acls.requested_acls(args).items()
    }
    assert got == {
        ("TOPIC", "t"): ["CREATE", "DESCRIBE", "READ", "WRITE"],
        ("TRANSACTIONAL_ID", "tx"): ["DESCRIBE", "WRITE"],
        ("CLUSTER", "kafka-cluster"): ["IDEMPOTENT_WRITE"],
        ("GROUP", "g"): ["READ"],
    }


def test_hosts_and_permissions() -> None:
    args = _acls(
        "--add", "--allow-principal", "User:a", "--allow-host", "10.0.0.1", "--allow-host",
        "10.0.0.2", "--deny-principal", "User:b", "--operation", "Write", "--topic", "t",
    )  # fmt: skip
    [(pattern, entries)] = acls.requested_acls(args).items()
    assert pattern == acls.Pattern("TOPIC", "t", "LITERAL")
    assert sorted((e.principal, e.host, e.permission) for e in entries) == [
        ("User:a", "10.0.0.1", "ALLOW"),
        ("User:a", "10.0.0.2", "ALLOW"),
        ("User:b", "*", "DENY"),
    ]


def test_kafka_acls_output_format() -> None:
    pattern = acls.Pattern("TOPIC", "t", "PREFIXED")
    entries = {
        acls.Entry("User:a", "*", "WRITE", "ALLOW"),
        acls.Entry("User:a", "*", "READ", "ALLOW"),
    }
    assert acls.resource_lines({pattern: entries}, "Current ACLs for resource") == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
        "patternType=PREFIXED)`: \n"
        " \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:a, host=*, operation=WRITE, permissionType=ALLOW) \n\n"
    ]
    assert acls.listing({pattern: entries}, ["User:b"]) == ["ACLs for principal `User:b`\n"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--list", "--producer", "--topic", "t"], "--producer cannot be used with --list"),
        (["--add", "--principal", "User:a", "--topic", "t"], "only available if --list"),
        (["--add", "--producer", "--operation", "Read", "--topic", "t"], "--operation cannot"),
        (["--add", "--idempotent", "--topic", "t"], "--idempotent option is only available"),
        (["--add", "--consumer", "--topic", "t"], "With --consumer you must specify"),
    ],
)
def test_option_combinations(argv: list[str], message: str) -> None:
    assert message in str(acls.check_options(_acls(*argv)))


# --- millrace users ------------------------------------------------------------------------


def test_add_config_syntax() -> None:
    creds = users.parse_add_config(
        "SCRAM-SHA-512=[iterations=8192,password=a,b=c],SCRAM-SHA-256=[password=x]"
    )
    assert [(c.mechanism, c.iterations, c.password) for c in creds] == [
        ("SCRAM-SHA-512", 8192, "a,b=c"),
        ("SCRAM-SHA-256", 4096, "x"),
    ]
    assert "a,b=c" not in repr(creds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SCRAM-SHA-512=[iterations=8192]", "invalid value for SCRAM-SHA-512"),
        ("SCRAM-SHA-512=[password=hunter2,iterations=8192]", "invalid value"),
        ("SCRAM-SHA-512=[iterations=10,password=hunter2]", "less than the minimum 4096"),
        ("SCRAM-SHA-512", 'format "key=val"'),
        ("producer_byte_rate=1024", "unknown config 'producer_byte_rate'"),
        ("SCRAM-SHA-256=[password=]", "password of SCRAM-SHA-256 is empty"),
    ],
)
def test_bad_add_config(text: str, message: str) -> None:
    with pytest.raises(CliError, match="^--add-config") as info:
        users.parse_add_config(text)
    assert message in str(info.value) and "hunter2" not in str(info.value)


def test_describe_line() -> None:
    assert users.description_line("alice", [("SCRAM-SHA-512", 8192), ("SCRAM-SHA-256", 4096)]) == (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192"
    )
