"""The ``millrace`` commands on a secured cluster (issue 28): ``--command-config`` under Kafka's
Java names or librdkafka's, ``--dir`` picking up ``cluster.json``'s ``client_config``,
``millrace acls`` (kafka-acls.sh) and ``millrace users`` (the SCRAM part of kafka-configs.sh),
cross-checked with Kafka 3.9.1's own ``AclCommand`` and ``ConfigCommand`` and with
confluent-kafka clients that authenticate as the users the commands create and are
authorized by the ACLs they add.

The module's cluster is ``cluster up --security sasl_plaintext`` (one broker; SCRAM, the ACL
authorizer, ``allow.everyone.if.no.acl.found=false``); one test starts a ``sasl_ssl``
cluster of its own. Every command runs as a separate process with stdin not a terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.console.console_process import Console
from tests.harness.kafka_tools import kafka_tool_runner
from tests.harness.kafka_tools import ok as tool_ok

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.cluster_config(brokers=1, security="sasl_plaintext"),
]

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "broker.cli.main"]
ACL_COMMAND = "kafka.admin.AclCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"


def millrace(
    *args: str, stdin: str | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``millrace ARGS`` in a fresh process (stdin ``stdin``, never a terminal)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MILLRACE_BOOTSTRAP", None)
    return subprocess.run(
        [*CLI, *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        cwd=REPO,
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (
        f"millrace {' '.join(proc.args[3:])} exited {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def failed(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """Assert exit ``code`` with one line on stderr; return that line."""
    assert proc.returncode == code, (
        f"millrace {' '.join(proc.args[3:])} exited {proc.returncode}, expected {code}\n"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    )
    lines = proc.stderr.strip().splitlines()
    if code == 1:
        assert len(lines) == 1, proc.stderr
    return lines[-1]


@pytest.fixture(scope="module")
def kafka_tool(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return kafka_tool_runner(tmp_path_factory.mktemp("kafka-tools"))


def dir_of(cluster: Any) -> str:
    return str(cluster.dir)


def properties_of(cluster: Any) -> str:
    """The admin's client.properties (Kafka's Java names) that ``cluster up`` wrote."""
    return str(cluster.json["client_properties"])


def login(cluster: Any, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> str | None:
    """None when a confluent-kafka client authenticates as ``user`` (and reads metadata),
    else the authentication error it reports."""
    from confluent_kafka import KafkaException, Producer

    errors: list[Any] = []
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": cluster.client_config["security.protocol"],
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "error_cb": errors.append,
        "log_level": 0,
    }
    if "ssl.ca.location" in cluster.client_config:
        conf["ssl.ca.location"] = cluster.client_config["ssl.ca.location"]
    producer = Producer(conf)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=1.0)
            return None
        except KafkaException:
            pass
        producer.poll(0.2)
        auth = [e for e in errors if e.code() == e._AUTHENTICATION]
        if auth:
            return str(auth[0].str())
    raise AssertionError(f"no answer for {user}'s login; errors: {errors}")


def acl_blocks(text: str) -> dict[str, set[str]]:
    """kafka-acls.sh output -> {resource pattern: {entry, ...}}."""
    blocks: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        if line.startswith("Current ACLs for resource `"):
            current = blocks.setdefault(line.split("`")[1], set())
        elif line.strip().startswith("(principal="):
            if current is not None:
                current.add(line.strip())
        elif line.strip():
            current = None  # "Adding ACLs for resource ...", "ACLs for principal ..."
    return blocks


def resource(kind: str, name: str, pattern: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})"


def entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return (
        f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"
    )


# --- client settings -----------------------------------------------------------------------


def test_dir_and_java_command_config(cluster: Any, topic_name: str) -> None:
    d = dir_of(cluster)
    # --dir alone: cluster.json's client_config (SASL_PLAINTEXT, SCRAM-SHA-512, the admin)
    assert ok(millrace("topics", "create", "--dir", d, "--topic", topic_name)).startswith(
        "Created topic"
    )
    assert topic_name in ok(millrace("topics", "list", "--dir", d)).split()
    # --command-config with Kafka's Java names (sasl.jaas.config), as Kafka's tools take it
    other = topic_name + "-java"
    java = ["--bootstrap-server", cluster.bootstrap, "--command-config", properties_of(cluster)]
    ok(millrace("topics", "create", *java, "--topic", other, "--partitions", "2"))
    listed = ok(millrace("topics", "list", *java)).split()
    assert topic_name in listed and other in listed
    # the commands on the project's own wire client carry the settings too
    assert "No partition reassignments found." in ok(millrace("reassign", "--list", "--dir", d))
    ok(millrace("transactions", "--dir", d, "list"))
    ok(millrace("elect-leaders", *java, "--election-type", "preferred", "--topic", other))
    # and without them the broker does not talk to us
    failed(millrace("topics", "list", "--bootstrap-server", cluster.bootstrap, "--timeout", "5"))


# --- millrace acls -------------------------------------------------------------------------


def test_acls_literal_round_trip(cluster: Any, topic_name: str) -> None:
    d = ["--dir", dir_of(cluster)]
    pattern = resource("TOPIC", topic_name)
    added = ok(
        millrace(
            "acls", *d, "--add", "--allow-principal", "User:alice", "--operation", "Read",
            "--operation", "describe", "--topic", topic_name,
        )
    )  # fmt: skip
    assert f"Adding ACLs for resource `{pattern}`: \n" in added
    want = {entry("User:alice", "READ"), entry("User:alice", "DESCRIBE")}
    assert acl_blocks(added) == {pattern: want}
    assert acl_blocks(ok(millrace("acls", *d, "--list", "--topic", topic_name))) == {pattern: want}
    mine = ok(millrace("acls", *d, "--list", "--principal", "User:alice"))
    assert mine.startswith("ACLs for principal `User:alice`\n")
    assert acl_blocks(mine)[pattern] == want
    # a deny entry with its own host (--add lists the resource's ACLs afterwards)
    denied = ok(
        millrace(
            "acls", *d, "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
            "--operation", "Write", "--topic", topic_name,
        )
    )  # fmt: skip
    want.add(entry("User:mallory", "WRITE", "DENY", "10.0.0.9"))
    assert acl_blocks(denied) == {pattern: want}
    # --remove asks for confirmation; with no terminal it refuses and removes nothing
    refused = failed(millrace("acls", *d, "--remove", "--topic", topic_name))
    assert "--force" in refused
    assert acl_blocks(ok(millrace("acls", *d, "--list", "--topic", topic_name)))[pattern] == want
    # remove one entry, then everything on the resource
    after = ok(
        millrace(
            "acls", *d, "--remove", "--force", "--allow-principal", "User:alice",
            "--operation", "READ", "--topic", topic_name,
        )
    )  # fmt: skip
    want.discard(entry("User:alice", "READ"))
    assert acl_blocks(after) == {pattern: want}
    assert acl_blocks(ok(millrace("acls", *d, "--remove", "--force", "--topic", topic_name))) == {}


def test_acls_prefixed_producer_consumer_authorize_a_user(cluster: Any, topic_name: str) -> None:
    """--producer --idempotent --consumer on PREFIXED resources, then a SCRAM user made with
    ``millrace users`` produces (idempotently) and consumes in a group under them."""
    from confluent_kafka import Consumer, Producer

    d = ["--dir", dir_of(cluster)]
    user, password = "bob", "bob-" + uuid.uuid4().hex
    prefix, group = f"{topic_name}-", f"{topic_name}-g"
    topic = prefix + "orders"
    ok(millrace("topics", "create", *d, "--topic", topic))
    ok(
        millrace(
            "users", *d, "--alter", "--entity-name", user,
            "--add-config", f"SCRAM-SHA-512=[password={password}]",
        )
    )  # fmt: skip
    added = ok(
        millrace(
            "acls", *d, "--add", "--producer", "--idempotent", "--consumer",
            "--allow-principal", f"User:{user}", "--topic", prefix, "--group", group,
            "--resource-pattern-type", "prefixed",
        )
    )  # fmt: skip
    blocks = acl_blocks(added)
    assert blocks[resource("TOPIC", prefix, "PREFIXED")] == {
        entry(f"User:{user}", op) for op in ("WRITE", "DESCRIBE", "CREATE", "READ")
    }
    assert blocks[resource("GROUP", group, "PREFIXED")] == {entry(f"User:{user}", "READ")}
    assert blocks[resource("CLUSTER", "kafka-cluster")] >= {
        entry(f"User:{user}", "IDEMPOTENT_WRITE")
    }
    listed = ok(
        millrace("acls", *d, "--list", "--resource-pattern-type", "match", "--topic", topic)
    )
    assert resource("TOPIC", prefix, "PREFIXED") in acl_blocks(listed)

    auth = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }
    producer = Producer({**auth, "enable.idempotence": True, "acks": "all"})
    results: list[Any] = []
    for i in range(5):
        producer.produce(
            topic, key=b"k", value=f"v{i}".encode(), on_delivery=lambda e, m: results.append(e)
        )
    assert producer.flush(30) == 0 and results == [None] * 5, results
    consumer = Consumer(
        {**auth, "group.id": group + "-1", "auto.offset.reset": "earliest", "log_level": 0}
    )
    try:
        consumer.subscribe([topic])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        assert values == [f"v{i}".encode() for i in range(5)]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    removed = ok(
        millrace(
            "acls", *d, "--remove", "--force", "--producer", "--idempotent", "--consumer",
            "--allow-principal", f"User:{user}", "--topic", prefix, "--group", group,
            "--resource-pattern-type", "prefixed",
        )
    )  # fmt: skip
    assert acl_blocks(removed) == {}  # what --remove lists afterwards: nothing left


# --- millrace users ------------------------------------------------------------------------


def test_users_alter_describe_delete(cluster: Any) -> None:
    d = ["--dir", dir_of(cluster)]
    user = "carol"
    first, second = "carol-" + uuid.uuid4().hex, "carol-" + uuid.uuid4().hex
    runs = [
        millrace(
            "users", *d, "--alter", "--entity-name", user, "--add-config",
            f"SCRAM-SHA-512=[iterations=8192,password={first}],SCRAM-SHA-256=[password={first}]",
        )
    ]  # fmt: skip
    assert ok(runs[-1]) == f"Completed updating config for user {user}.\n"
    runs.append(millrace("users", *d, "--describe", "--entity-name", user))
    assert ok(runs[-1]) == (
        f"SCRAM credential configs for user-principal '{user}' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n"
    )
    assert login(cluster, user, first) is None
    assert login(cluster, user, first, "SCRAM-SHA-256") is None
    assert login(cluster, user, "not-" + first) is not None
    # a new password (from a file, off the command line) replaces the old one
    config_file = cluster.dir / "carol.properties"
    config_file.write_text(f"SCRAM-SHA-512=[password={second}]\n")
    runs.append(
        millrace(
            "users", *d, "--alter", "--entity-name", user, "--add-config-file", str(config_file)
        )
    )
    ok(runs[-1])
    assert login(cluster, user, second) is None
    assert login(cluster, user, first) is not None
    # deleting one mechanism leaves the other
    runs.append(
        millrace("users", *d, "--alter", "--entity-name", user, "--delete-config", "SCRAM-SHA-256")
    )
    ok(runs[-1])
    runs.append(millrace("users", *d, "--describe", "--entity-name", user))
    assert ok(runs[-1]).endswith("are SCRAM-SHA-512=iterations=4096\n")
    assert login(cluster, user, first, "SCRAM-SHA-256") is not None
    runs.append(
        millrace("users", *d, "--alter", "--user", user, "--delete-config", "SCRAM-SHA-512")
    )
    ok(runs[-1])
    runs.append(millrace("users", *d, "--describe", "--entity-name", user))
    assert ok(runs[-1]) == ""
    assert login(cluster, user, second) is not None
    # deleting what is not there is the broker's error, one line
    runs.append(
        millrace("users", *d, "--alter", "--user", user, "--delete-config", "SCRAM-SHA-512")
    )
    assert "RESOURCE_NOT_FOUND" in failed(runs[-1])
    for run in runs:  # the passwords never show
        for secret in (first, second):
            assert secret not in run.stdout and secret not in run.stderr


# --- Kafka's own tools against Millrace ----------------------------------------------------


def test_kafka_acl_command(cluster: Any, kafka_tool: Any, topic_name: str) -> None:
    d = ["--dir", dir_of(cluster)]
    kafka = ["--bootstrap-server", cluster.bootstrap, "--command-config", properties_of(cluster)]
    tool_ok(
        kafka_tool(
            ACL_COMMAND, *kafka, "--add", "--allow-principal", "User:dave",
            "--operation", "Read", "--topic", topic_name, "--group", topic_name,
        )
    )  # fmt: skip
    topic, group = resource("TOPIC", topic_name), resource("GROUP", topic_name)
    ours = ok(millrace("acls", *d, "--list", "--topic", topic_name, "--group", topic_name))
    assert acl_blocks(ours) == {
        topic: {entry("User:dave", "READ")},
        group: {entry("User:dave", "READ")},
    }
    # one entry per resource: the listings are the same text
    theirs = tool_ok(kafka_tool(ACL_COMMAND, *kafka, "--list", "--topic", topic_name))
    assert ok(millrace("acls", *d, "--list", "--topic", topic_name)) == theirs
    # what millrace adds Kafka's tool lists, and removes
    ok(
        millrace(
            "acls", *d, "--add", "--allow-principal", "User:dave", "--operation", "Write",
            "--topic", topic_name + "-", "--resource-pattern-type", "PREFIXED",
        )
    )  # fmt: skip
    prefixed = resource("TOPIC", topic_name + "-", "PREFIXED")
    theirs = tool_ok(
        kafka_tool(
            ACL_COMMAND, *kafka, "--list", "--topic", topic_name + "-",
            "--resource-pattern-type", "prefixed",
        )
    )  # fmt: skip
    assert acl_blocks(theirs) == {prefixed: {entry("User:dave", "WRITE")}}
    tool_ok(
        kafka_tool(
            ACL_COMMAND, *kafka, "--remove", "--force", "--topic", topic_name,
            "--topic", topic_name + "-", "--group", topic_name, "--resource-pattern-type", "any",
        )
    )  # fmt: skip
    assert ok(millrace("acls", *d, "--list", "--principal", "User:dave")) == (
        "ACLs for principal `User:dave`\n"
    )


def test_kafka_config_command_scram_user(cluster: Any, kafka_tool: Any) -> None:
    user, password = "erin", "erin-" + uuid.uuid4().hex
    kafka = ["--bootstrap-server", cluster.bootstrap, "--command-config", properties_of(cluster)]
    out = tool_ok(
        kafka_tool(
            CONFIG_COMMAND, *kafka, "--alter", "--add-config",
            f"SCRAM-SHA-512=[iterations=8192,password={password}]",
            "--entity-type", "users", "--entity-name", user,
        )
    )  # fmt: skip
    assert out.strip() == f"Completed updating config for user {user}."
    described = ok(millrace("users", "--dir", dir_of(cluster), "--describe", "--entity-name", user))
    line = f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=8192"
    assert described == line + "\n"
    assert login(cluster, user, password) is None
    # kafka-configs --describe also asks for the user's quotas (DescribeClientQuotas)
    from broker.api.dispatcher import HANDLERS
    from broker.protocol.api_keys import ApiKey

    if ApiKey.DESCRIBE_CLIENT_QUOTAS in HANDLERS:
        theirs = tool_ok(
            kafka_tool(
                CONFIG_COMMAND, *kafka, "--describe", "--entity-type", "users",
                "--entity-name", user,
            )
        )  # fmt: skip
        assert line in theirs.splitlines()


# --- bad input -----------------------------------------------------------------------------


def test_bad_input_is_one_line(cluster: Any, tmp_path: Path) -> None:
    d = ["--dir", dir_of(cluster)]
    assert "User:alice" in failed(
        millrace("acls", *d, "--add", "--allow-principal", "alice", "--topic", "t")
    )
    assert "unknown operation" in failed(
        millrace(
            "acls", *d, "--add", "--allow-principal", "User:a", "--operation", "Reed",
            "--topic", "t",
        )
    )  # fmt: skip
    assert "only supports operations" in failed(
        millrace(
            "acls", *d, "--add", "--allow-principal", "User:a", "--operation", "IdempotentWrite",
            "--topic", "t",
        )
    )  # fmt: skip
    assert "at least one resource" in failed(
        millrace("acls", *d, "--add", "--allow-principal", "User:a")
    )
    assert "--allow-principal, --deny-principal" in failed(
        millrace("acls", *d, "--add", "--topic", "t")
    )
    failed(millrace("acls", *d, "--add", "--list", "--topic", "t"), code=2)
    failed(millrace("acls", *d, "--list", "--principal", "User:a", "--producer"), code=2)
    malformed = failed(
        millrace(
            "users", *d, "--alter", "--entity-name", "x",
            "--add-config", "SCRAM-SHA-512=[iterations=8192,secret=hunter2]",
        )
    )  # fmt: skip
    assert "--add-config" in malformed and "hunter2" not in malformed
    assert "SCRAM-SHA-256 and SCRAM-SHA-512" in failed(
        millrace(
            "users", *d, "--alter", "--entity-name", "x", "--add-config", "SCRAM-MD5=[password=p]"
        )
    )
    # a wrong password in --command-config: one line naming the file and what failed
    text = Path(properties_of(cluster)).read_text()
    wrong = tmp_path / "wrong.properties"
    start = text.index('password="') + len('password="')
    wrong.write_text(text[:start] + "wrong-" + text[start:])
    bootstrap = ["--bootstrap-server", cluster.bootstrap]
    line = failed(millrace("topics", "list", *bootstrap, "--command-config", str(wrong)))
    assert str(wrong) in line and "SASL authentication" in line and "wrong-" not in line
    line = failed(millrace("acls", "--list", *bootstrap, "--command-config", str(wrong)))
    assert str(wrong) in line
    line = failed(millrace("reassign", "--list", *bootstrap, "--command-config", str(wrong)))
    assert str(wrong) in line
    # unknown and invalid settings name the property and the file
    unknown = tmp_path / "unknown.properties"
    unknown.write_text(text + "no.such.setting=1\n")
    line = failed(millrace("topics", "list", *bootstrap, "--command-config", str(unknown)))
    assert "no.such.setting" in line and str(unknown) in line
    invalid = tmp_path / "invalid.properties"
    invalid.write_text(text.replace("SASL_PLAINTEXT", "SASL_PLAIN"))
    line = failed(millrace("topics", "list", *bootstrap, "--command-config", str(invalid)))
    assert "security.protocol" in line and str(invalid) in line


# --- SASL_SSL ------------------------------------------------------------------------------


def test_sasl_ssl_cluster_via_dir(cluster_factory: Any, topic_name: str) -> None:
    secured = cluster_factory(security="sasl_ssl")
    d = ["--dir", str(secured.dir)]
    assert secured.client_config["security.protocol"] == "SASL_SSL"
    ok(millrace("topics", "create", *d, "--topic", topic_name))
    assert topic_name in ok(millrace("topics", "list", *d)).split()
    # client.properties: SASL_SSL, JAAS line, PEM trust store (ssl.truststore.type=PEM)
    java = ["--bootstrap-server", secured.bootstrap, "--command-config", properties_of(secured)]
    assert topic_name in ok(millrace("topics", "list", *java)).split()
    ok(
        millrace(
            "produce", *java, "--topic", topic_name, "--property", "parse.key=true",
            "--property", "key.separator=:", stdin="k1:v1\nk2:v2\nk1:v3\n",
        )
    )  # fmt: skip
    ok(millrace("acls", *d, "--add", "--allow-principal", "User:zed", "--topic", topic_name))
    assert acl_blocks(ok(millrace("acls", *java, "--list", "--topic", topic_name))) == {
        resource("TOPIC", topic_name): {entry("User:zed", "ALL")}
    }
    assert "SCRAM-SHA-512=iterations=4096" in ok(
        millrace("users", *d, "--describe", "--entity-name", "admin")
    )
    # the wire client (the micro-batch boundaries of `table`) over TLS and SASL
    table = ok(millrace("table", *d, "--topic", topic_name, "--format", "json"))
    assert [(r["key"], r["value"]) for r in map(json.loads, table.splitlines())] == [
        ("k1", "v3"),
        ("k2", "v2"),
    ]
    assert "No partition reassignments found." in ok(millrace("reassign", "--list", *java))
    # the web console over SASL_SSL: with --dir, then with --command-config
    for how in (d, java):
        console = Console(*how)
        try:
            status, page = console.get("/")
            assert status == 200 and f"<td>{secured.host}:{secured.port}</td>" in page, page
            status, page = console.get(f"/topics/{topic_name}")
            assert status == 200 and f"Topic {topic_name}" in page, page
            assert ('data-bytes="' in page) is (how is d)  # sizes: the metrics of cluster.json
        finally:
            console.stop()


def test_mutual_tls_key_store_from_client_properties(cluster_factory: Any, topic_name: str) -> None:
    """``--security ssl``: client.properties names a PEM key store (key + chain in one file,
    ``ssl.keystore.type=PEM``), which librdkafka takes as ``ssl.key.pem`` and
    ``ssl.certificate.pem``; the brokers map the certificate to ``User:admin``."""
    secured = cluster_factory(security="ssl")
    text = Path(properties_of(secured)).read_text()
    assert "ssl.keystore.type=PEM" in text and "sasl" not in text
    java = ["--bootstrap-server", secured.bootstrap, "--command-config", properties_of(secured)]
    ok(millrace("topics", "create", *java, "--topic", topic_name))
    assert topic_name in ok(millrace("topics", "list", "--dir", str(secured.dir))).split()
    ok(millrace("acls", *java, "--add", "--allow-principal", "User:x", "--cluster"))
    assert acl_blocks(ok(millrace("acls", "--dir", str(secured.dir), "--list", "--cluster"))) == {
        resource("CLUSTER", "kafka-cluster"): {entry("User:x", "ALL")}
    }
    # without the key store the brokers refuse the connection: one line, naming the file
    no_key = secured.dir / "no-key.properties"
    no_key.write_text("".join(line + "\n" for line in text.splitlines() if "keystore" not in line))
    line = failed(
        millrace(
            "topics",
            "list",
            "--bootstrap-server",
            secured.bootstrap,
            "--command-config",
            str(no_key),
        )
    )
    assert str(no_key) in line and "ssl.keystore.location" in line
