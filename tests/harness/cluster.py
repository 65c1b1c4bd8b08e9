"""One ``millrace cluster up`` cluster in its own directory, driven the way users drive it:
through the ``millrace`` command, real clients and ZooKeeper; torn down by pid whatever
happens (``Cluster.down`` never raises).

Concurrency: one pytest process; ``ACTIVE_CLUSTERS`` lists the clusters running now (the
failure-report hook attaches their broker output).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.harness.clients import (
    KafkaAdmin,
    batch_signature,
    confluent_conf,
    confluent_consume,
    kafka_admin,
    read_log_batches,
)
from tests.harness.ports import free_port_range
from tests.harness.processes import kill_pid, pid_alive, pids_mentioning, wait_pid_gone
from tests.harness.raw import RawConnection, api_versions_ok
from tests.harness.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "broker.cli.main"]
CLUSTER_UP_TIMEOUT_S = 180
CLUSTER_CMD_TIMEOUT_S = 120
READY_TIMEOUT_S = 90

ACTIVE_CLUSTERS: list[Cluster] = []


def _prop_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def merge_props(props: dict[str, object] | None, kwargs: dict[str, object]) -> dict[str, str]:
    merged = {k: _prop_value(v) for k, v in (props or {}).items()}
    merged.update({k.replace("_", "."): _prop_value(v) for k, v in kwargs.items()})
    return merged


PartitionView = tuple[int, tuple[int, ...], tuple[int, ...]]
"""One partition as ``describe`` returns it: (leader, replicas, isr); leader -1 when none."""


class Cluster:
    """One ``millrace cluster up`` cluster (brokers 1..N) in its own directory."""

    def __init__(
        self,
        directory: Path,
        props: dict[str, str],
        brokers: int = 1,
        security: str | None = None,
        zookeepers: int = 1,
    ) -> None:
        """``security``: ``cluster up --security`` (ssl, sasl_plaintext, sasl_ssl); the
        admin's client settings then come from cluster.json's ``client_config``.
        ``zookeepers``: ``cluster up --zookeepers`` (1, or an ensemble of 3 or 5 nodes on
        free ports)."""
        self.dir = directory
        self.props = props
        self.brokers = brokers
        self.security = security
        self.zookeepers = zookeepers
        self.json: dict[str, Any] = {}
        self.bootstrap = ""
        self._pids_seen: set[int] = set()
        self._paused: set[int] = set()
        self._cmd_no = 0
        self._admin: KafkaAdmin | None = None

    wait_for = staticmethod(wait_for)  # the module's wait_for, so tests need no import

    # -- commands --

    def _cli(self, *args: str, timeout_s: float = CLUSTER_CMD_TIMEOUT_S) -> tuple[int, str, str]:
        """Run ``millrace ARGS`` with stdout/stderr to files (so background children that
        inherit them cannot block us), return (rc, stdout, stderr)."""
        self._cmd_no += 1
        out_path = self.dir / f"cmd-{self._cmd_no}-{args[1]}.out"
        err_path = self.dir / f"cmd-{self._cmd_no}-{args[1]}.err"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [*CLI, *args],
                cwd=self.dir,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
            )
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_pid(proc.pid)
                proc.wait()
                rc = -999
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        self.reload()
        return rc, stdout, stderr

    def cli(self, *args: str, timeout_s: float = CLUSTER_CMD_TIMEOUT_S) -> str:
        """Run ``millrace ARGS`` (any subcommand) in the cluster directory; assert exit code 0
        and return stdout."""
        rc, stdout, stderr = self._cli(*args, timeout_s=timeout_s)
        self._check(" ".join(args[:2]), rc, stdout, stderr)
        return stdout

    def _check(self, what: str, rc: int, stdout: str, stderr: str) -> None:
        if rc != 0:
            listing = "\n".join(
                str(p.relative_to(self.dir)) for p in sorted(self.dir.rglob("*"))[:80]
            )
            raise AssertionError(
                f"`millrace {what}` failed (rc={rc}{', timed out' if rc == -999 else ''})\n"
                f"--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-5000:]}\n"
                f"--- files in {self.dir} ---\n{listing}"
            )

    def reload(self) -> None:
        path = self.dir / "cluster.json"
        if path.exists():
            with contextlib.suppress(ValueError, OSError):
                self.json = json.loads(path.read_text())
        self._pids_seen.update(self.pids())

    def pids(self) -> list[int]:
        out = []
        if isinstance(self.json.get("zookeeper_pid"), int):
            out.append(self.json["zookeeper_pid"])
        for n in self.json.get("zookeepers", []):
            if isinstance(n.get("pid"), int) and n["pid"] not in out:
                out.append(n["pid"])
        for b in self.json.get("brokers", []):
            if isinstance(b.get("pid"), int):
                out.append(b["pid"])
        return out

    def up(self) -> None:
        zk_port = free_port_range(self.zookeepers)
        base_port = free_port_range(self.brokers)
        args = [
            "cluster",
            "up",
            "--dir",
            str(self.dir),
            "--brokers",
            str(self.brokers),
            "--base-port",
            str(base_port),
            "--zk-port",
            str(zk_port),
        ]
        if self.zookeepers != 1:
            args += [
                "--zookeepers",
                str(self.zookeepers),
                "--zk-peer-port",
                str(free_port_range(self.zookeepers)),
                "--zk-election-port",
                str(free_port_range(self.zookeepers)),
            ]
        for key, value in self.props.items():
            args += ["--set", f"{key}={value}"]
        if self.security:
            args += ["--security", self.security]
        rc, stdout, stderr = self._cli(*args, timeout_s=CLUSTER_UP_TIMEOUT_S)
        self._check("cluster up", rc, stdout, stderr)
        assert self.json, f"cluster up succeeded but wrote no {self.dir}/cluster.json"
        self.bootstrap = self.json["bootstrap_servers"]
        lines = stdout.strip().splitlines()
        assert lines and lines[-1].strip() == self.bootstrap, (
            f"cluster up's last stdout line {lines[-1:]!r} is not the bootstrap servers "
            f"{self.bootstrap!r}"
        )
        expected = ",".join(f"127.0.0.1:{base_port + i}" for i in range(self.brokers))
        assert self.bootstrap == expected, self.bootstrap
        assert self.broker_ids() == list(range(1, self.brokers + 1)), self.json.get("brokers")
        self.wait_ready()

    def down(self) -> None:
        """SIGKILL the brokers, ``cluster down`` (ZooKeeper), then SIGKILL anything of ours
        still alive. Never raises."""
        errors = []
        # The brokers go first, by SIGKILL of their own pids: a teardown checks nothing, and
        # a clean stop of the last broker leading RF>1 partitions sits out its controlled
        # shutdown retries (about 15 s, as Kafka's does), which cost the test tiers minutes.
        # Clean stops are tested where they matter (test_cluster_failover, test_demo, ...).
        with contextlib.suppress(Exception):
            self.reload()
        for b in self.json.get("brokers", []):
            pid = b.get("pid")
            if isinstance(pid, int) and pid_alive(pid):
                kill_pid(pid)
        self._paused.clear()
        try:
            rc, _stdout, stderr = self._cli("cluster", "down", "--dir", str(self.dir))
            if rc != 0:
                errors.append(f"cluster down rc={rc}: {stderr[-2000:]}")
        except Exception as exc:  # noqa: BLE001 - teardown must go on
            errors.append(repr(exc))
        leftovers = {p for p in self._pids_seen | set(self.pids()) if pid_alive(p)}
        leftovers.update(pids_mentioning(str(self.dir)))
        for pid in sorted(leftovers):
            kill_pid(pid)
        self._admin = None
        if self in ACTIVE_CLUSTERS:
            ACTIVE_CLUSTERS.remove(self)
        if errors:
            sys.stderr.write(f"[integration teardown {self.dir}] {'; '.join(errors)}\n")

    def output_tails(self, lines: int = 60) -> dict[str, str]:
        """The last ``lines`` lines of each broker's output file (cluster.json ``out``)."""
        out = {}
        for b in self.json.get("brokers", []):
            path = b.get("out")
            if path and Path(path).exists():
                text = Path(path).read_text(errors="replace").splitlines()[-lines:]
                out[f"broker-{b.get('id')} output"] = "\n".join(text)
        return out

    # -- brokers --

    def broker(self, broker_id: int = 1) -> dict[str, Any]:
        for b in self.json.get("brokers", []):
            if b.get("id") == broker_id:
                return b  # type: ignore[no-any-return]
        raise KeyError(f"broker {broker_id} not in {self.dir}/cluster.json: {self.json}")

    def broker_ids(self) -> list[int]:
        """Every broker id of cluster.json, running or not."""
        return sorted(int(b["id"]) for b in self.json.get("brokers", []))

    def running_ids(self) -> list[int]:
        """Brokers whose cluster.json pid is alive (paused ones included)."""
        return [
            b
            for b in self.broker_ids()
            if isinstance(self.broker(b).get("pid"), int) and pid_alive(self.broker_pid(b))
        ]

    def serving_ids(self) -> list[int]:
        """Running brokers that are not paused."""
        return [b for b in self.running_ids() if b not in self._paused]

    @property
    def host(self) -> str:
        return str(self.broker(1)["host"])

    @property
    def port(self) -> int:
        return int(self.broker(1)["port"])

    def broker_address(self, broker_id: int = 1) -> str:
        """``host:port`` of one broker (usable as a single-broker bootstrap)."""
        b = self.broker(broker_id)
        return f"{b['host']}:{b['port']}"

    def broker_pid(self, broker_id: int = 1) -> int:
        return int(self.broker(broker_id)["pid"])

    def stop_broker(self, hard: bool = False, broker_id: int = 1) -> None:
        old_pid = self.broker_pid(broker_id)
        args = ["cluster", "stop-broker", "--dir", str(self.dir), "--broker", str(broker_id)]
        if hard:
            args.append("--hard")
        rc, stdout, stderr = self._cli(*args)
        self._check(" ".join(args[:2]) + (" --hard" if hard else ""), rc, stdout, stderr)
        assert wait_pid_gone(old_pid, 60), (
            f"broker {broker_id} (pid {old_pid}) still alive 60s after "
            f"`cluster stop-broker{' --hard' if hard else ''}`"
        )
        self._paused.discard(broker_id)

    def start_broker(self, broker_id: int = 1) -> None:
        args = ["cluster", "start-broker", "--dir", str(self.dir), "--broker", str(broker_id)]
        rc, stdout, stderr = self._cli(*args)
        self._check("cluster start-broker", rc, stdout, stderr)
        pid = self.broker_pid(broker_id)
        assert pid_alive(pid), f"broker {broker_id} pid {pid} from cluster.json is not running"
        self.wait_ready()

    def ensure_running(self, broker_id: int = 1) -> None:
        """Restart a broker if an earlier (failed) test left it stopped or paused."""
        self.reload()
        if broker_id in self._paused:
            self.resume_broker(broker_id)
        pid = self.broker(broker_id).get("pid")
        if not isinstance(pid, int) or not pid_alive(pid):
            self.start_broker(broker_id)

    def ensure_all_running(self) -> None:
        """Every broker of cluster.json running, unpaused and ready."""
        for broker_id in self.broker_ids():
            self.ensure_running(broker_id)
        self.wait_ready()

    def pause_broker(self, broker_id: int) -> None:
        """SIGSTOP one broker by pid (its sockets stay open, it answers nothing). Pair with
        ``resume_broker`` in a ``finally`` or use ``paused()``; ``down()`` resumes too."""
        pid = self.broker_pid(broker_id)
        self._paused.add(broker_id)
        os.kill(pid, signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        """SIGCONT a broker paused by ``pause_broker``."""
        self._paused.discard(broker_id)
        pid = self.broker(broker_id).get("pid")
        if isinstance(pid, int) and pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self, *broker_ids: int) -> Iterator[None]:
        """SIGSTOP ``broker_ids`` for the block; always SIGCONT them afterwards."""
        try:
            for b in broker_ids:
                self.pause_broker(b)
            yield
        finally:
            for b in broker_ids:
                self.resume_broker(b)

    def raw_metadata(
        self, broker_id: int = 1, topics: list[str] | None = None, timeout_s: float = 10.0
    ) -> Any:
        """One Metadata v1 request to ``broker_id`` itself (not whichever broker a client
        picks); ``topics`` None asks for every topic. Returns the kio MetadataResponse."""
        from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        request = MetadataRequest(
            topics=None
            if topics is None
            else tuple(MetadataRequestTopic(name=TopicName(t)) for t in topics)
        )
        with self.raw(timeout_s, broker_id=broker_id) as conn:
            return conn.request(request)

    def offline_replicas(self, topic: str, broker_id: int) -> dict[int, tuple[int, ...]]:
        """{partition: offline replicas} of ``topic`` as broker ``broker_id`` answers a
        Metadata v5 request (the first version with ``offline_replicas``)."""
        from kio.schema.metadata.v5.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        request = MetadataRequest(
            topics=(MetadataRequestTopic(name=TopicName(topic)),),
            allow_auto_topic_creation=False,
        )
        with self.raw(10.0, broker_id=broker_id) as conn:
            response = conn.request(request)
        [t] = response.topics
        return {
            int(p.partition_index): tuple(int(r) for r in p.offline_replicas) for p in t.partitions
        }

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every running broker of cluster.json answers ApiVersions and its own Metadata
        response lists every running broker."""
        deadline = time.monotonic() + timeout_s
        last = "no broker checked"
        while time.monotonic() < deadline:
            self.reload()
            running = [b for b in self.running_ids() if b not in self._paused]
            ok = True
            for b in running:
                host, port = self.broker(b)["host"], int(self.broker(b)["port"])
                if not api_versions_ok(host, port, security=self.client_security):
                    ok, last = False, f"broker {b} does not answer ApiVersions"
                    break
                try:
                    listed = {int(n.node_id) for n in self.raw_metadata(b, [], 5).brokers}
                except Exception as exc:  # noqa: BLE001 - keep polling
                    ok, last = False, f"Metadata from broker {b}: {exc!r}"
                    break
                if not set(running) <= listed:
                    ok, last = False, f"broker {b} lists brokers {sorted(listed)}, not {running}"
                    break
            if ok and running:
                return
            if not running:
                last = "no broker running"
            time.sleep(0.25)
        raise AssertionError(
            f"cluster at {self.bootstrap} not ready within {timeout_s}s (last: {last})"
        )

    # -- ZooKeeper nodes --

    def zk_nodes(self) -> list[dict[str, Any]]:
        """cluster.json's ``zookeepers`` entries (id, host, port, peer/election ports, pid)."""
        return list(self.json.get("zookeepers", []))

    def zk_node_ids(self) -> list[int]:
        return sorted(int(n["id"]) for n in self.zk_nodes())

    def zk_node(self, node_id: int) -> dict[str, Any]:
        for n in self.zk_nodes():
            if n.get("id") == node_id:
                return n
        raise KeyError(f"ZooKeeper node {node_id} not in {self.dir}/cluster.json")

    def zk_modes(self) -> dict[int, str | None]:
        """{node id: what ``srvr`` says (leader, follower, standalone, "not serving"), None
        when nothing answers}."""
        from broker.zk.embedded_server import zookeeper_mode

        return {
            int(n["id"]): zookeeper_mode(str(n["host"]), int(n["port"]), timeout=2.0)
            for n in self.zk_nodes()
        }

    def wait_zk_modes(self, serving: list[int], timeout_s: float = 60.0) -> dict[int, str | None]:
        """Until exactly the nodes ``serving`` answer as leader or follower (standalone for
        one node) and every other node answers nothing or "not serving"."""

        def check() -> dict[int, str | None] | None:
            modes = self.zk_modes()
            up = sorted(i for i, m in modes.items() if m in ("leader", "follower", "standalone"))
            return modes if up == sorted(serving) else None

        modes: dict[int, str | None] = wait_for(
            check, timeout_s, f"ZooKeeper nodes {serving} (only) serving"
        )
        return modes

    def stop_zookeeper(self, node_id: int) -> None:
        """``cluster stop-zookeeper --node``; asserts the node's pid is gone."""
        old_pid = self.zk_node(node_id).get("pid")
        self.cli("cluster", "stop-zookeeper", "--dir", str(self.dir), "--node", str(node_id))
        if isinstance(old_pid, int):
            assert wait_pid_gone(old_pid, 30), f"ZooKeeper node {node_id} pid {old_pid} alive"
        assert self.zk_node(node_id).get("pid") is None, self.zk_node(node_id)

    def start_zookeeper(self, node_id: int) -> None:
        """``cluster start-zookeeper --node``; asserts the new pid runs."""
        self.cli("cluster", "start-zookeeper", "--dir", str(self.dir), "--node", str(node_id))
        pid = self.zk_node(node_id).get("pid")
        assert isinstance(pid, int) and pid_alive(pid), self.zk_node(node_id)

    def zk_session_node(self, path: str = "/controller") -> int | None:
        """The ZooKeeper node whose connections include the session owning the ephemeral
        znode ``path`` (by default the controller's), from ``cons``; None if unknown."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        from broker.zk.embedded_server import node_with_session

        zk = KazooClient(hosts=str(self.json["zookeeper"]), timeout=10.0)
        zk.start(timeout=15)
        try:
            _data, stat = zk.get(path)
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()
        nodes = self.zk_nodes()
        index = node_with_session(
            [(str(n["host"]), int(n["port"])) for n in nodes], int(stat.ephemeralOwner)
        )
        return None if index is None else int(nodes[index]["id"])

    # -- cluster state --

    def describe(self, topic: str, via: int | None = None) -> dict[int, PartitionView]:
        """{partition: (leader, replicas, isr)} of ``topic``: from the confluent-kafka
        AdminClient's Metadata (``list_topics``), or from broker ``via``'s own Metadata
        response. While a broker is paused, a serving broker is asked directly (a client could
        pick the paused one and hang). Raises LookupError if the topic is unknown."""
        if via is None and self._paused:
            via = self.serving_ids()[0]
        if via is not None:
            return self.describe_via(via, topic)
        md = self.admin().client.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise LookupError(f"topic {topic!r}: {t.error if t is not None else 'not listed'}")
        return {
            p: (pm.leader, tuple(pm.replicas), tuple(pm.isrs))
            for p, pm in sorted(t.partitions.items())
        }

    def describe_via(self, broker_id: int, topic: str) -> dict[int, PartitionView]:
        """``describe`` as broker ``broker_id`` answers Metadata itself."""
        resp = self.raw_metadata(broker_id, [topic])
        [t] = resp.topics
        if int(t.error_code) != 0:
            raise LookupError(f"topic {topic!r} on broker {broker_id}: {t.error_code!r}")
        return {
            int(p.partition_index): (
                int(p.leader_id),
                tuple(int(r) for r in p.replica_nodes),
                tuple(int(r) for r in p.isr_nodes),
            )
            for p in sorted(t.partitions, key=lambda p: int(p.partition_index))
        }

    def wait_isr_complete(
        self,
        topic: str,
        timeout_s: float = 60.0,
        brokers: list[int] | None = None,
        via: int | None = None,
    ) -> dict[int, PartitionView]:
        """Until every partition of ``topic`` has a leader and ISR == replicas (and, if
        ``brokers`` is given, replicas == that set). Returns the final description."""

        def check() -> dict[int, PartitionView] | None:
            d = self.describe(topic, via)
            for leader, replicas, isr in d.values():
                if leader < 0 or sorted(isr) != sorted(replicas):
                    return None
                if brokers is not None and sorted(replicas) != sorted(brokers):
                    return None
            return d or None

        return wait_for(check, timeout_s, f"{topic}: every partition led, with ISR == replicas")

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The current leader of one partition (waits until there is one)."""
        return int(
            wait_for(
                lambda: (
                    self.describe(topic)[partition][0] >= 0 and self.describe(topic)[partition][0]
                ),
                60,
                f"a leader for {topic}[{partition}]",
            )
        )

    def controller_id(self, via: int | None = None) -> int:
        """The active controller as broker ``via`` (default: the first serving broker)
        reports it in Metadata; -1 if none is known."""
        if via is None:
            via = self.serving_ids()[0]
        return int(self.raw_metadata(via, []).controller_id)

    def zk_get(self, path: str) -> bytes | None:
        """The data of one znode (kazoo, a short session to cluster.json's ZooKeeper)."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=str(self.json["zookeeper"]), timeout=10.0)
        zk.start(timeout=15)
        try:
            data, _stat = zk.get(path)
            return bytes(data) if data is not None else b""
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()

    def zk_stat_czxid(self, path: str) -> int | None:
        """The czxid of one znode (a registration's broker epoch), None if it is absent."""
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=str(self.json["zookeeper"]), timeout=10.0)
        zk.start(timeout=15)
        try:
            stat = zk.exists(path)
            return None if stat is None else int(stat.czxid)
        finally:
            zk.stop()
            zk.close()

    def controller_epoch(self) -> int:
        """``/controller_epoch`` from ZooKeeper."""
        data = self.zk_get("/controller_epoch")
        assert data is not None, "/controller_epoch does not exist in ZooKeeper"
        return int(data.decode())

    # -- files --

    def log_dirs(self, broker_id: int = 1) -> list[Path]:
        out = []
        for d in self.broker(broker_id).get("log_dirs", []):
            p = Path(d)
            out.append(p if p.is_absolute() else self.dir / p)
        return out

    def log_dir(self, topic: str, partition: int, broker_id: int = 1) -> Path:
        """The ``<topic>-<partition>`` directory (in whichever log dir holds it)."""
        candidates = [d / f"{topic}-{partition}" for d in self.log_dirs(broker_id)]
        for c in candidates:
            if c.is_dir():
                return c
        return candidates[0]

    def segment_files(self, topic: str, partition: int, broker_id: int = 1) -> list[Path]:
        return sorted(self.log_dir(topic, partition, broker_id).glob("*.log"))

    def active_segment(self, topic: str, partition: int) -> Path:
        segs = self.segment_files(topic, partition)
        assert segs, f"no .log segment in {self.log_dir(topic, partition)}"
        return segs[-1]

    # -- clients --

    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = kafka_admin(self.bootstrap, self.client_config)
        return self._admin

    @property
    def client_config(self) -> dict[str, object]:
        """The admin's librdkafka settings of a secured cluster (empty when plaintext)."""
        return dict(self.json.get("client_config") or {})

    @property
    def client_security(self) -> Any:
        """The admin's ``ClientSecurity`` for raw connections (None when plaintext)."""
        cfg = self.client_config
        if not cfg:
            return None
        from kafka_security.client_security import client_security

        return client_security(cfg)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        replication_factor: int = 1,
        replica_assignment: list[list[int]] | None = None,
    ) -> str:
        self.admin().create_topic(
            name,
            partitions,
            config,
            replication_factor=replication_factor,
            replica_assignment=replica_assignment,
        )
        return name

    def raw(self, timeout_s: float = 30.0, broker_id: int = 1) -> RawConnection:
        b = self.broker(broker_id)
        return RawConnection(str(b["host"]), int(b["port"]), timeout_s, self.client_security)

    def conf(self, extra: dict[str, object] | None = None) -> dict[str, object]:
        """A confluent-kafka config for this cluster (MILLRACE_CLIENT_DEBUG adds ``debug``;
        a secured cluster's admin settings are included)."""
        return confluent_conf(self.bootstrap, {**self.client_config, **(extra or {})})

    def consume(
        self,
        topic: str,
        partitions: list[int],
        start: int | None = None,
        extra: dict[str, object] | None = None,
        timeout_s: float = 90.0,
    ) -> dict[int, list[Any]]:
        """``confluent_consume`` against this cluster (as the admin of a secured one)."""
        return confluent_consume(
            self.bootstrap,
            topic,
            partitions,
            start,
            {**self.client_config, **(extra or {})},
            timeout_s,
        )

    def batches(
        self, topic: str, partition: int, broker_id: int = 1
    ) -> list[tuple[Path, Any, bool]]:
        """Every batch header in the partition's segments on one broker:
        (segment, header, crc_ok)."""
        return read_log_batches(self.log_dir(topic, partition, broker_id))

    def replica_signatures(
        self, topic: str, partition: int, brokers: list[int]
    ) -> dict[int, list[tuple[int, int, int, int]]]:
        """``batch_signature`` of the partition's log on each of ``brokers``."""
        return {b: batch_signature(self.batches(topic, partition, b)) for b in brokers}

    def wait_replicas_identical(
        self, topic: str, partition: int, brokers: list[int], timeout_s: float = 60.0
    ) -> list[tuple[int, int, int, int]]:
        """Until the data files of ``brokers`` hold identical batches for the partition (and
        at least one); returns the common batch list."""

        def check() -> list[tuple[int, int, int, int]] | None:
            sigs = self.replica_signatures(topic, partition, brokers)
            first = sigs[brokers[0]]
            if first and all(s == first for s in sigs.values()):
                return first
            return None

        try:
            return wait_for(check, timeout_s, f"{topic}[{partition}]: identical logs on {brokers}")
        except AssertionError:
            sigs = self.replica_signatures(topic, partition, brokers)
            detail = "\n".join(
                f"broker {b}: {len(s)} batches, last 5 {s[-5:]}" for b, s in sigs.items()
            )
            raise AssertionError(
                f"{topic}[{partition}]: replica logs differ after {timeout_s:g}s\n{detail}"
            ) from None


def start_cluster(
    directory: Path,
    props: dict[str, str],
    brokers: int = 1,
    security: str | None = None,
    zookeepers: int = 1,
) -> Cluster:
    cluster = Cluster(directory, props, brokers, security, zookeepers)
    try:
        cluster.up()
    except BaseException:
        cluster.down()
        raise
    ACTIVE_CLUSTERS.append(cluster)
    return cluster
