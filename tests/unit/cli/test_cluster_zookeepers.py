"""A ZooKeeper ensemble without starting one: ``zoo.cfg`` and ``myid`` generation, the
``server.N`` specs, the ensemble-size and node-number checks of ``millrace cluster``, the
argument errors of ``millrace zookeeper start``, and the four-letter-word readers against a
canned server. Nothing here starts a JVM or a broker (the commands fail before they would)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli import cluster
from broker.cli.cluster_process import ClusterError, zookeeper_command
from broker.cli.main import main
from broker.cli.zookeeper_cmd import ensemble_settings
from broker.zk.embedded_server import (
    ENSEMBLE_MAIN_CLASS,
    MAIN_CLASS,
    EmbeddedZooKeeper,
    QuorumServer,
    ZooKeeperConfigError,
    check_ensemble,
    ensemble_serving,
    node_with_session,
    parse_connect_string,
    parse_server,
    quorum_size,
    zoo_cfg,
    zookeeper_mode,
)

pytestmark = pytest.mark.unit

SERVERS = [QuorumServer(i, "127.0.0.1", 2887 + i, 3887 + i) for i in (3, 1, 2)]


# --- zoo.cfg and myid --------------------------------------------------------------------------


def _cfg_lines(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def test_standalone_zoo_cfg_has_no_ensemble_lines(tmp_path: Path) -> None:
    cfg = _cfg_lines(zoo_cfg(data_dir=tmp_path, port=2181, tick_time=500))
    assert cfg["clientPort"] == "2181" and cfg["tickTime"] == "500"
    assert cfg["dataDir"] == str(tmp_path) and cfg["clientPortAddress"] == "127.0.0.1"
    assert cfg["4lw.commands.whitelist"] == "ruok,srvr,stat,cons"
    assert not [k for k in cfg if k.startswith("server.") or k.endswith("Limit")]


def test_ensemble_zoo_cfg_lists_every_member_in_id_order(tmp_path: Path) -> None:
    text = zoo_cfg(data_dir=tmp_path, port=2182, servers=SERVERS, init_limit=20, sync_limit=10)
    cfg = _cfg_lines(text)
    assert cfg["initLimit"] == "20" and cfg["syncLimit"] == "10"
    assert cfg["reconfigEnabled"] == "false"
    servers = [line for line in text.splitlines() if line.startswith("server.")]
    assert servers == [
        "server.1=127.0.0.1:2888:3888",
        "server.2=127.0.0.1:2889:3889",
        "server.3=127.0.0.1:2890:3890",
    ]


def test_an_ensemble_member_writes_myid_and_runs_quorum_peer_main(tmp_path: Path) -> None:
    member = EmbeddedZooKeeper(2182, tmp_path / "zk-2", java="java", server_id=2, servers=SERVERS)
    cmd = member.prepare()
    assert (tmp_path / "zk-2" / "myid").read_text().strip() == "2"
    assert "server.3=127.0.0.1:2890:3890" in (tmp_path / "zk-2" / "zoo.cfg").read_text()
    assert ENSEMBLE_MAIN_CLASS in cmd and MAIN_CLASS not in cmd
    standalone = EmbeddedZooKeeper(2181, tmp_path / "zk", java="java")
    assert MAIN_CLASS in standalone.prepare()
    assert not (tmp_path / "zk" / "myid").exists()


def test_ensemble_member_settings_must_fit_together() -> None:
    with pytest.raises(ZooKeeperConfigError, match="needs its own id"):
        check_ensemble(None, SERVERS)
    with pytest.raises(ZooKeeperConfigError, match=r"server id 4 is not one of .*\[1, 2, 3\]"):
        check_ensemble(4, SERVERS)
    with pytest.raises(ZooKeeperConfigError, match="no ensemble"):
        check_ensemble(1, [])
    with pytest.raises(ZooKeeperConfigError, match=r"\[1\] listed more than once"):
        check_ensemble(1, [*SERVERS, QuorumServer(1, "h", 1, 2)])
    check_ensemble(None, [])
    check_ensemble(3, SERVERS)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1=zk1.example:2888:3888", QuorumServer(1, "zk1.example", 2888, 3888)),
        (" 2 = 10.0.0.2:2888:3888 ", QuorumServer(2, "10.0.0.2", 2888, 3888)),
        ("3=h:1:2:participant;2181", QuorumServer(3, "h", 1, 2)),
    ],
)
def test_server_specs_parse(spec: str, expected: QuorumServer) -> None:
    assert parse_server(spec) == expected
    assert parse_server(expected.spec()) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zk1:2888:3888", "expected ID=HOST:PEER_PORT:ELECTION_PORT"),
        ("1=zk1:2888", "expected ID=HOST:PEER_PORT:ELECTION_PORT"),
        ("x=zk1:2888:3888", "the id 'x' is not a number"),
        ("0=zk1:2888:3888", "between 1 and 255"),
        ("1=zk1:peer:3888", "peer port 'peer' is not a number"),
        ("1=zk1:2888:70000", "election port 70000 is not a port"),
        ("1=zk1:2888:3888:observer", "observers are not supported"),
    ],
)
def test_bad_server_specs_are_named(spec: str, message: str) -> None:
    with pytest.raises(ZooKeeperConfigError, match=message) as info:
        parse_server(spec)
    assert spec in str(info.value)


def test_quorum_sizes_and_connect_strings() -> None:
    assert [quorum_size(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert parse_connect_string("a:1,b:2/chroot") == [("a", 1), ("b", 2)]
    assert parse_connect_string("a, b:3") == [("a", 2181), ("b", 3)]


# --- millrace zookeeper start: an ensemble member's settings ------------------------------------


def test_ensemble_settings_from_server_options_and_from_properties(tmp_path: Path) -> None:
    specs = [s.spec() for s in SERVERS]
    assert ensemble_settings(specs, {}, 2, tmp_path) == (2, [parse_server(s) for s in specs])
    assert ensemble_settings([], {"clientPort": "2181"}, None, tmp_path) == (None, [])
    props = {f"server.{s.id}": s.spec().split("=", 1)[1] for s in SERVERS}
    (tmp_path / "myid").write_text("3\n")
    server_id, servers = ensemble_settings([], props, None, tmp_path)
    assert server_id == 3 and sorted(servers, key=lambda s: s.id) == sorted(
        SERVERS, key=lambda s: s.id
    )
    # --server replaces the file's server.N lines; --id wins over myid
    assert ensemble_settings(["1=h:1:2", "2=h:3:4", "3=h:5:6"], props, 1, tmp_path)[0] == 1
    (tmp_path / "myid").write_text("one\n")
    with pytest.raises(ValueError, match="not a server id"):
        ensemble_settings([], props, None, tmp_path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--server", "1=h:1:2", "--server", "2=h:3:4", "--server", "3=h:5:6"], "own id"),
        (
            ["--id", "4", "--server", "1=h:1:2", "--server", "2=h:3:4", "--server", "3=h:5:6"],
            "server id 4 is not one of the ensemble's server ids [1, 2, 3]",
        ),
        (["--id", "1"], "no ensemble"),
        (["--id", "1", "--server", "1=h:1"], "--server '1=h:1': expected ID=HOST"),
    ],
)
def test_zookeeper_start_rejects_bad_ensemble_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    rc = main(["zookeeper", "start", "--data-dir", str(tmp_path / "zk"), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("millrace zookeeper: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_zookeeper_start_help_documents_the_ensemble_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["zookeeper", "start", "--help"])
    out = capsys.readouterr().out
    for word in ("--id", "--server", "--init-limit", "--sync-limit", "myid", "server.1="):
        assert word in out


def test_cluster_zookeeper_command_passes_the_ensemble(tmp_path: Path) -> None:
    standalone = zookeeper_command(2181, tmp_path)
    assert "--id" not in standalone and "--server" not in standalone
    member = zookeeper_command(2182, tmp_path, server_id=2, servers=["1=h:1:2", "2=h:3:4"])
    assert member[member.index("--id") + 1] == "2"
    assert [member[i + 1] for i, a in enumerate(member) if a == "--server"] == [
        "1=h:1:2",
        "2=h:3:4",
    ]


# --- millrace cluster: sizes, layout, node numbers ---------------------------------------------


def test_plan_of_one_node_keeps_the_old_layout(tmp_path: Path) -> None:
    [node] = cluster.plan_zookeepers(tmp_path, 1, 2181)
    assert node["id"] == 1 and node["port"] == 2181
    assert node["data_dir"] == str(tmp_path / "zookeeper")
    assert node["peer_port"] is None and node["election_port"] is None
    assert cluster.zookeeper_connect([node]) == "127.0.0.1:2181"


def test_plan_of_an_ensemble(tmp_path: Path) -> None:
    nodes = cluster.plan_zookeepers(tmp_path, 3, 12000, 13000, 14000)
    assert [(n["id"], n["port"], n["peer_port"], n["election_port"]) for n in nodes] == [
        (1, 12000, 13000, 14000),
        (2, 12001, 13001, 14001),
        (3, 12002, 13002, 14002),
    ]
    assert [n["data_dir"] for n in nodes] == [str(tmp_path / f"zookeeper-{i}") for i in (1, 2, 3)]
    assert cluster.zookeeper_connect(nodes) == "127.0.0.1:12000,127.0.0.1:12001,127.0.0.1:12002"


@pytest.mark.parametrize("size", [2, 4, 6])
def test_an_even_ensemble_size_is_refused(tmp_path: Path, size: int) -> None:
    with pytest.raises(ClusterError) as info:
        cluster.cluster_up(tmp_path / "c", zookeepers=size, progress=None)
    message = str(info.value)
    assert f"--zookeepers {size}" in message
    assert "odd" in message and "1, 3 or 5" in message
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("size", [0, -1, 7])
def test_other_ensemble_sizes_are_refused(size: int) -> None:
    with pytest.raises(ClusterError, match=f"--zookeepers {size}: .*1, 3 or 5"):
        cluster.check_zookeepers(size)


def test_cluster_up_cli_names_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["cluster", "up", "--dir", str(tmp_path / "c"), "--zookeepers", "2"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("millrace cluster: error: --zookeepers 2: ZooKeeper needs an odd")
    assert not (tmp_path / "c").exists()


def test_overlapping_ensemble_ports_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"port\(s\) \[12001, 12002\] would be used twice"):
        cluster.cluster_up(
            tmp_path / "c", zookeepers=3, zk_port=12000, zk_peer_port=12001, progress=None
        )


def _write_stopped_cluster(directory: Path, zookeepers: int) -> None:
    directory.mkdir(parents=True)
    nodes = cluster.plan_zookeepers(directory, zookeepers, 12000, 13000, 14000)
    info = {
        "dir": str(directory),
        "zookeeper": cluster.zookeeper_connect(nodes),
        "zookeeper_pid": None,
        "zk_port": 12000,
        "zookeepers": nodes,
        "bootstrap_servers": "127.0.0.1:9092",
        "brokers": [{"id": 1, "host": "127.0.0.1", "port": 9092, "pid": None}],
    }
    (directory / "cluster.json").write_text(json.dumps(info))


@pytest.mark.parametrize("action", ["stop-zookeeper", "start-zookeeper"])
def test_a_node_that_does_not_exist_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    _write_stopped_cluster(tmp_path / "c", 3)
    rc = main(["cluster", action, "--dir", str(tmp_path / "c"), "--node", "4"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "ZooKeeper node 4 is not part of this cluster (nodes: [1, 2, 3])" in err
    assert len(err.strip().splitlines()) == 1


def test_a_cluster_keeps_its_ensemble_size(tmp_path: Path) -> None:
    _write_stopped_cluster(tmp_path / "c", 1)
    with pytest.raises(ClusterError, match="created with --zookeepers 1"):
        cluster.cluster_up(tmp_path / "c", zookeepers=3, progress=None)


def test_a_cluster_json_from_before_ensembles_reads_as_one_node(tmp_path: Path) -> None:
    old = {
        "dir": str(tmp_path),
        "zookeeper": "127.0.0.1:2181",
        "zookeeper_pid": 4242,
        "zk_port": 2181,
        "zookeeper_data_dir": str(tmp_path / "zookeeper"),
    }
    [node] = cluster.zookeeper_nodes(old)
    assert (node["id"], node["host"], node["port"], node["pid"]) == (1, "127.0.0.1", 2181, 4242)
    assert node["data_dir"] == str(tmp_path / "zookeeper")


# --- four-letter words against a canned server -------------------------------------------------


class CannedZooKeeper:
    """Answers every connection with ``replies[word]`` (the 4 bytes it received), then closes."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = int(self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                word = conn.recv(4).decode()
                conn.sendall(self.replies.get(word, "").encode())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def canned() -> Iterator[list[CannedZooKeeper]]:
    servers: list[CannedZooKeeper] = []
    yield servers
    for s in servers:
        s.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_modes_quorum_and_session_lookup(canned: list[CannedZooKeeper]) -> None:
    leader = CannedZooKeeper(
        {"srvr": "Zookeeper version: 3.9\nMode: leader\nNode count: 5\n", "cons": ""}
    )
    lonely = CannedZooKeeper(
        {
            "srvr": "This ZooKeeper instance is not currently serving requests\n",
            "cons": " /127.0.0.1:1[1](queued=0,sid=0x10000abc,lop=PING)\n",
        }
    )
    canned += [leader, lonely]
    dead = _closed_port()
    assert zookeeper_mode("127.0.0.1", leader.port) == "leader"
    assert zookeeper_mode("127.0.0.1", lonely.port) == "not serving"
    assert zookeeper_mode("127.0.0.1", dead) is None
    nodes = [("127.0.0.1", leader.port), ("127.0.0.1", lonely.port), ("127.0.0.1", dead)]
    assert not ensemble_serving(nodes)  # 1 of 3 serves: no quorum
    assert ensemble_serving([("127.0.0.1", leader.port)])
    assert node_with_session(nodes, 0x10000ABC) == 1
    assert node_with_session(nodes, 0x10000AB) is None
