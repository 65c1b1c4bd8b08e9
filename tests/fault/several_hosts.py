"""Millrace deployed on several hosts, each host a network namespace of its own: the
deployment ``docs/operations.md`` ("Several hosts") describes, run for real.

Usage (as root; the run re-executes itself inside a new network namespace, the hub of
``tests/fault/netns.py``)::

    python -m tests.fault.several_hosts --dir D --report D/report.json [--zookeepers 1|3]

Hosts (nodes of :class:`~tests.fault.netns.Topology`, each with its own address
``10.99.<i>.2``): ``zk1`` (``zk2``, ``zk3`` with ``--zookeepers 3``), brokers ``b1``..``b4``
and ``client``. Steps:

1. ZooKeeper: ``millrace zookeeper start --config zookeeper.properties`` on each ZooKeeper
   host (an ensemble: ``server.N`` lines, the member's id in ``<dataDir>/myid``); the chroot
   ``/millrace`` does not exist yet.
2. Brokers 1-3 (racks r1, r2, r3): ``millrace broker start --config server.properties`` on
   their hosts, ``zookeeper.connect=<every ZooKeeper host>:2181/millrace``. Broker 1 binds
   ``0.0.0.0`` and names its address in ``advertised.listeners``; brokers 2 and 3 listen on
   their own address. Checked in ZooKeeper: the brokers created the chroot, registered
   under it (endpoints with their hosts' addresses, racks) and wrote nothing outside it.
3. The client host (``client phase=cluster``, a process in the ``client`` namespace): the
   ``millrace`` admin commands with ``--bootstrap-server``; every broker's Metadata names
   the hosts' addresses and racks (never 127.0.0.1); confluent-kafka produces with
   ``acks=all`` and a consumer group reads everything back; a Spark job
   (``tests/fault/several_hosts_spark.py``, local mode, ``spark-submit``) reads the topic
   with ``format("millrace")``, writes it to another topic and reads that back, and
   confluent-kafka checks what Spark wrote.
4. A fourth broker host joins, in rack r1 (``client phase=racks``): topics created now are
   spread over the racks (every partition's replicas on distinct racks, leaders even), which
   a rack-unaware assignment would not do with two brokers in r1; so is a topic auto-created
   through a broker that is not the controller. The rack topics are then deleted (``millrace topics delete``), so that
   every remaining partition has a replica to move to in step 5.
5. Each broker in turn is stopped with SIGTERM (what the systemd unit's ``ExecStop``
   sends): its controlled shutdown moves every leadership at the first attempt, a running
   broker then leads every partition, and it exits with status 0. Then ZooKeeper.

The report (JSON) lists every check (``name``, ``ok``, ``detail``), the observations, the
timings of the steps, and ``error`` (a traceback) if a step failed. Exit status 0 when every
check passed.

Processes: every process runs in its host's namespace, started in a session of its own and
SIGKILLed by pid at the end, whatever happened; the namespaces go with their holders.
Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.fault import netns
from tests.fault.cluster import BROKER_PROPS

REPO = Path(__file__).resolve().parents[2]
MILLRACE = str(Path(sys.executable).with_name("millrace"))
ZK_PORT = 2181
ZK_PEER_PORT = 2888
ZK_ELECTION_PORT = 3888
BROKER_PORT = 9092
CHROOT = "/millrace"
RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1"}

TOPIC = "orders"
SPARK_TOPIC = "orders-copy"
GROUP = "several-hosts-readers"
RECORDS = 3000
PARTITIONS = 6
RACK_TOPICS = ("racks-rf3", "racks-rf2", "racks-auto")


def progress(text: str) -> None:
    print(f"[several-hosts {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Checks:
    """The run's verdicts, in order: each a name, whether it held, and what was seen."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def check(self, name: str, ok: bool, detail: Any = "") -> bool:
        self.items.append({"name": name, "ok": bool(ok), "detail": detail})
        progress(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else f': {detail}'}")
        return bool(ok)


# -- the hosts --------------------------------------------------------------------------------


class Hosts:
    """ZooKeeper and broker processes on their hosts (namespaces), and what ZooKeeper holds.

    Layout of the run directory ``D``: ``D/zk<i>.properties``, ``D/zk<i>/`` (the member's
    ``dataDir``: ``myid``, ``zoo.cfg``, ``zookeeper.log``), ``D/zk<i>.out``,
    ``D/broker-<id>/server.properties``, ``D/broker-<id>/data``, ``D/broker-<id>/broker.out``,
    ``D/client/`` (each phase's output and result, ``commands.txt``, ``spark.out``).
    """

    def __init__(self, topology: netns.Topology, run_dir: Path, zookeepers: int) -> None:
        self.topology = topology
        self.dir = run_dir
        self.zk_ids = list(range(1, zookeepers + 1))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def ip(self, node: str) -> str:
        return self.topology.nodes[node].ip

    @property
    def zk_hosts(self) -> str:
        return ",".join(f"{self.ip(f'zk{i}')}:{ZK_PORT}" for i in self.zk_ids)

    @property
    def zk_connect(self) -> str:
        """``zookeeper.connect``: every ZooKeeper host, then the chroot."""
        return self.zk_hosts + CHROOT

    def bootstrap(self, ids: Sequence[int]) -> str:
        return ",".join(f"{self.ip(f'b{b}')}:{BROKER_PORT}" for b in ids)

    def spawn(self, node: str, cmd: list[str], out: Path) -> subprocess.Popen[bytes]:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("ab") as f:
            f.write(f"=== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n".encode())
            f.flush()
            proc = subprocess.Popen(
                self.topology.nodes[node].wrap(cmd),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=out.parent,
                env=child_env(),
                start_new_session=True,
            )
        self.procs[node] = proc
        return proc

    # -- ZooKeeper --

    def zookeeper_properties(self, zk_id: int) -> dict[str, str]:
        """A ZooKeeper host's ``zookeeper.properties`` (Kafka-style): the same on every host
        but for ``dataDir`` (the hosts share this machine's disk); an ensemble lists every
        member in ``server.N`` lines and each member finds its id in ``<dataDir>/myid``."""
        props = {
            "dataDir": str(self.dir / f"zk{zk_id}"),
            "clientPort": str(ZK_PORT),
            "clientPortAddress": "0.0.0.0",
            "tickTime": "500",
            "maxClientCnxns": "0",
        }
        if len(self.zk_ids) > 1:
            props |= {"initLimit": "20", "syncLimit": "10"}
            for other in self.zk_ids:
                address = f"{self.ip(f'zk{other}')}:{ZK_PEER_PORT}:{ZK_ELECTION_PORT}"
                props[f"server.{other}"] = address
        return props

    def zookeeper_command(self, zk_id: int) -> list[str]:
        """``millrace zookeeper start --config <file>``, as the systemd unit runs it."""
        props = self.zookeeper_properties(zk_id)
        data_dir = Path(props["dataDir"])
        data_dir.mkdir(parents=True, exist_ok=True)
        if len(self.zk_ids) > 1:
            (data_dir / "myid").write_text(f"{zk_id}\n")
        config = self.dir / f"zk{zk_id}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return [MILLRACE, "zookeeper", "start", "--config", str(config)]

    def start_zookeepers(self, timeout_s: float = 120.0) -> None:
        from broker.zk.embedded_server import zookeeper_is_serving

        for i in self.zk_ids:
            self.spawn(f"zk{i}", self.zookeeper_command(i), self.dir / f"zk{i}.out")
        deadline = time.monotonic() + timeout_s
        for i in self.zk_ids:
            while not zookeeper_is_serving(self.ip(f"zk{i}"), ZK_PORT, timeout=1.0):
                proc = self.procs[f"zk{i}"]
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = (self.dir / f"zk{i}.out").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"ZooKeeper {i} did not start:\n{out}")
                time.sleep(0.3)

    def zk(self) -> Any:
        """A kazoo client of the ensemble, at its root (not the chroot); the caller stops it."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zk_hosts, timeout=10.0)
        client.start(timeout=30)
        return client

    # -- brokers --

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        """A host's ``server.properties``: broker 1 binds every interface and advertises its
        address; the others listen on their own address (advertised as such)."""
        address = self.ip(f"b{broker_id}")
        listeners = (
            {
                "listeners": f"PLAINTEXT://0.0.0.0:{BROKER_PORT}",
                "advertised.listeners": f"PLAINTEXT://{address}:{BROKER_PORT}",
            }
            if broker_id == 1
            else {"listeners": f"PLAINTEXT://{address}:{BROKER_PORT}"}
        )
        return {
            "broker.id": str(broker_id),
            "broker.rack": RACKS[broker_id],
            **listeners,
            "log.dirs": str(self.dir / f"broker-{broker_id}" / "data"),
            "zookeeper.connect": self.zk_connect,
            **BROKER_PROPS,
            # for the auto-creation observation of the racks phase
            "auto.create.topics.enable": "true",
            "num.partitions": "12",
        }

    def start_broker(self, broker_id: int) -> None:
        bdir = self.dir / f"broker-{broker_id}"
        bdir.mkdir(parents=True, exist_ok=True)
        config = bdir / "server.properties"
        props = self.broker_properties(broker_id)
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.spawn(
            f"b{broker_id}",
            [MILLRACE, "broker", "start", "--config", str(config)],
            bdir / "broker.out",
        )

    def registrations(self) -> dict[int, dict[str, Any]]:
        """``/millrace/brokers/ids/<id>`` of every registered broker (JSON), {} if none."""
        zk = self.zk()
        try:
            ids_path = f"{CHROOT}/brokers/ids"
            if not zk.exists(ids_path):
                return {}
            return {
                int(child): json.loads(zk.get(f"{ids_path}/{child}")[0])
                for child in zk.get_children(ids_path)
            }
        finally:
            zk.stop()
            zk.close()

    def wait_brokers(self, ids: Sequence[int], timeout_s: float = 120.0) -> None:
        """Until ``ids`` are registered, a controller is elected and every broker's own
        Metadata response lists all of ``ids``."""
        deadline = time.monotonic() + timeout_s
        while True:
            for b in ids:
                proc = self.procs[f"b{b}"]
                if proc.poll() is not None:
                    out = (self.dir / f"broker-{b}" / "broker.out").read_text(errors="replace")
                    raise RuntimeError(f"broker {b} exited ({proc.returncode}):\n{out[-3000:]}")
            if set(ids) <= set(self.registrations()) and self._metadata_whole(ids):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"brokers {list(ids)} did not all register in {timeout_s}s")
            time.sleep(0.5)

    def _metadata_whole(self, ids: Sequence[int]) -> bool:
        for b in ids:
            try:
                response = metadata(self.ip(f"b{b}"), BROKER_PORT, topics=[])
            except OSError:
                return False
            if {int(x.node_id) for x in response.brokers} != set(ids):
                return False
            if int(response.controller_id) < 0:
                return False
        return True

    def stop(self, node: str, timeout_s: float) -> tuple[int | None, float]:
        """SIGTERM ``node``'s process; (its exit status or None if it did not exit within
        ``timeout_s``, seconds it took)."""
        proc = self.procs[node]
        started = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None, round(time.monotonic() - started, 1)
        return proc.returncode, round(time.monotonic() - started, 1)

    def close(self) -> None:
        """SIGKILL every process still running, by pid."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass


def metadata(host: str, port: int, topics: list[str] | None = None) -> Any:
    """One Metadata v1 request to the broker at ``host:port`` (``topics`` None: every topic);
    the kio MetadataResponse (brokers with host, port and rack; controller id)."""
    from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    from tests.harness.raw import RawConnection

    request = MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(name=TopicName(t)) for t in topics)
    )
    with RawConnection(host, port, timeout_s=10.0) as conn:
        return conn.request(request)


# -- the run (in the hub) ---------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    run_dir = Path(args.dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    checks = Checks()
    timings: dict[str, float] = {}
    observations: dict[str, Any] = {}
    report: dict[str, Any] = {
        "zookeepers": args.zookeepers,
        "checks": checks.items,
        "observations": observations,
    }
    names = [f"zk{i}" for i in range(1, args.zookeepers + 1)]
    names += ["b1", "b2", "b3", "b4", "client"]
    topo = netns.Topology.create(names, marker=str(run_dir))
    hosts = Hosts(topo, run_dir, args.zookeepers)
    report["addresses"] = {name: node.ip for name, node in topo.nodes.items()}

    def lap(name: str, since: float) -> float:
        timings[name] = round(time.monotonic() - since, 1)
        return time.monotonic()

    try:
        t = time.monotonic()
        progress(f"ZooKeeper on {hosts.zk_hosts}")
        hosts.start_zookeepers()
        check_no_chroot(hosts, checks)
        t = lap("zookeeper_start_s", t)

        progress(f"brokers 1-3, zookeeper.connect={hosts.zk_connect}")
        for b in (1, 2, 3):
            hosts.start_broker(b)
        hosts.wait_brokers([1, 2, 3])
        t = lap("brokers_start_s", t)
        check_registrations(hosts, checks, [1, 2, 3])

        client_phase(
            hosts, checks, observations, "cluster", [1, 2, 3], timeout_s=args.client_timeout
        )
        t = lap("client_cluster_phase_s", t)

        progress("a fourth broker host joins, in rack r1")
        hosts.start_broker(4)
        hosts.wait_brokers([1, 2, 3, 4])
        check_registrations(hosts, checks, [1, 2, 3, 4])
        client_phase(hosts, checks, observations, "racks", [1, 2, 3, 4], timeout_s=300)
        t = lap("broker_4_and_racks_phase_s", t)

        progress("stopping each broker with SIGTERM (controlled shutdown)")
        stop_everything(hosts, checks, timings)
        lap("stop_s", t)
    except Exception:  # noqa: BLE001 - reported with the run's traceback, never hidden
        report["error"] = traceback.format_exc()
        progress(f"run failed:\n{report['error']}")
    finally:
        hosts.close()
        topo.close()
        report["timings"] = timings
        report["seconds"] = round(time.monotonic() - started, 1)
    return report


def check_no_chroot(hosts: Hosts, checks: Checks) -> None:
    zk = hosts.zk()
    try:
        checks.check("the chroot does not exist before the brokers start", not zk.exists(CHROOT))
    finally:
        zk.stop()
        zk.close()


def stop_everything(hosts: Hosts, checks: Checks, timings: dict[str, float]) -> None:
    """SIGTERM each broker (4 to 1: each a controlled shutdown, checked), then each
    ZooKeeper."""
    running = [1, 2, 3, 4]
    for b in (4, 3, 2, 1):
        status, seconds = hosts.stop(f"b{b}", timeout_s=120)
        running.remove(b)
        timings[f"broker_{b}_stop_s"] = seconds
        checks.check(
            f"broker {b} stops on SIGTERM with exit status 0",
            status == 0,
            {"exit_status": status, "seconds": seconds},
        )
        check_controlled_shutdown(hosts, checks, b, seconds, running)
    for i in hosts.zk_ids:
        status, seconds = hosts.stop(f"zk{i}", timeout_s=60)
        checks.check(
            f"ZooKeeper {i} stops on SIGTERM",
            status is not None,
            {"exit_status": status, "seconds": seconds},
        )


def check_controlled_shutdown(
    hosts: Hosts, checks: Checks, stopped: int, seconds: float, running: list[int]
) -> None:
    """Broker ``stopped`` (SIGTERM) ran a complete controlled shutdown: its first attempt
    moved every leadership (no retry, which would log "still led here" and wait
    ``controlled.shutdown.retry.backoff.ms``, 5 s), and (while brokers remain) every partition
    has a leader among the running brokers, as a remaining broker's Metadata says."""
    out = (hosts.dir / f"broker-{stopped}" / "broker.out").read_text(errors="replace")
    given_up = [line for line in out.splitlines() if "still led here" in line]
    checks.check(
        f"broker {stopped}'s controlled shutdown moved every leadership at once",
        not given_up and seconds < 5.0,
        {"seconds": seconds, "retries": given_up[-3:]},
    )
    if not running:
        return
    deadline = time.monotonic() + 10  # the controller's UpdateMetadata is asynchronous
    while True:
        response = metadata(hosts.ip(f"b{running[0]}"), BROKER_PORT)
        leaders = {
            f"{t.name}-{p.partition_index}": int(p.leader_id)
            for t in response.topics
            for p in t.partitions
        }
        led = bool(leaders) and all(leader in running for leader in leaders.values())
        if led or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    checks.check(
        f"after broker {stopped} stopped, every partition is led by a running broker",
        led,
        leaders,
    )


def check_registrations(hosts: Hosts, checks: Checks, ids: list[int]) -> None:
    """What the brokers wrote to ZooKeeper: their registrations under the chroot (the hosts'
    addresses, their racks), and nothing of Kafka's layout outside it."""
    regs = hosts.registrations()
    want = {
        b: {"endpoint": f"PLAINTEXT://{hosts.ip(f'b{b}')}:{BROKER_PORT}", "rack": RACKS[b]}
        for b in ids
    }
    seen = {
        b: {"endpoint": ",".join(r.get("endpoints", [])), "rack": r.get("rack")}
        for b, r in regs.items()
    }
    checks.check(
        f"brokers {ids} registered under {CHROOT} with their hosts' addresses and racks",
        seen == want,
        {"registered": seen, "expected": want},
    )
    zk = hosts.zk()
    try:
        outside = [p for p in ("/brokers", "/controller", "/cluster", "/config") if zk.exists(p)]
        controller = zk.exists(f"{CHROOT}/controller") is not None
    finally:
        zk.stop()
        zk.close()
    checks.check(
        f"the brokers created {CHROOT} and wrote nothing outside it",
        not outside and controller,
        {"outside_the_chroot": outside, "controller_under_chroot": controller},
    )


def client_phase(
    hosts: Hosts,
    checks: Checks,
    observations: dict[str, Any],
    phase: str,
    ids: list[int],
    timeout_s: float,
) -> None:
    """Run ``client --phase <phase>`` in the client host's namespace and take its checks."""
    out_dir = hosts.dir / "client"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = out_dir / f"{phase}.json"
    expected = {
        str(b): {"host": hosts.ip(f"b{b}"), "port": BROKER_PORT, "rack": RACKS[b]} for b in ids
    }
    cmd = [
        sys.executable,
        "-m",
        "tests.fault.several_hosts",
        "client",
        "--phase",
        phase,
        "--bootstrap",
        hosts.bootstrap(ids),
        "--brokers",
        json.dumps(expected),
        "--out-dir",
        str(out_dir),
        "--result",
        str(result),
    ]
    progress(f"client host ({hosts.ip('client')}): phase {phase}")
    proc = hosts.spawn("client", cmd, out_dir / f"{phase}.out")
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)
        checks.check(f"client phase {phase} finished within {timeout_s:g}s", False)
    if not result.exists():
        tail = (out_dir / f"{phase}.out").read_text(errors="replace")[-4000:]
        checks.check(f"client phase {phase} wrote its result", False, tail)
        return
    taken = json.loads(result.read_text())
    checks.items.extend(taken["checks"])
    observations.update(taken.get("observations", {}))
    failed = [c["name"] for c in taken["checks"] if not c["ok"]]
    progress(f"client phase {phase}: {len(taken['checks'])} checks, failed: {failed or 'none'}")


# -- the client host --------------------------------------------------------------------------


class Client:
    """The client host's side: commands and clients against ``bootstrap`` only."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.bootstrap: str = args.bootstrap
        self.brokers: dict[str, dict[str, Any]] = json.loads(args.brokers)
        self.out_dir = Path(args.out_dir)
        self.checks = Checks()
        self.observations: dict[str, Any] = {}
        self.transcript = self.out_dir / "commands.txt"

    def millrace(self, *argv: str, timeout_s: float = 120.0) -> tuple[int, str]:
        """``millrace <argv> --bootstrap-server <bootstrap>``: (exit status, stdout+stderr);
        each command and its output is appended to ``commands.txt``."""
        cmd = [MILLRACE, *argv, "--bootstrap-server", self.bootstrap]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=child_env(), check=False
        )
        output = proc.stdout + proc.stderr
        with self.transcript.open("a") as f:
            f.write(f"$ millrace {' '.join(cmd[1:])}\n{output}(exit {proc.returncode})\n\n")
        return proc.returncode, output

    def create_topic(self, topic: str, partitions: int, rf: int) -> None:
        rc, out = self.millrace(
            "topics",
            "create",
            "--topic",
            topic,
            "--partitions",
            str(partitions),
            "--replication-factor",
            str(rf),
        )
        self.checks.check(f"millrace topics create {topic} (RF {rf})", rc == 0, out)

    def describe(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """``millrace topics describe``: {partition: (leader, replicas, isr)}."""
        rc, out = self.millrace("topics", "describe", "--topic", topic)
        self.checks.check(f"millrace topics describe {topic}", rc == 0, out)
        parts = {}
        pattern = r"Partition: (\d+)\tLeader: (-?\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]*)"
        for m in re.finditer(pattern, out):
            ids = [[int(x) for x in g.split(",") if x] for g in (m[3], m[4])]
            parts[int(m[1])] = (int(m[2]), ids[0], ids[1])
        return parts

    def rack(self, broker: int) -> str:
        return str(self.brokers[str(broker)]["rack"])

    # -- phase "cluster" --

    def cluster_phase(self) -> None:
        self.check_metadata()
        self.create_topic(TOPIC, PARTITIONS, 3)
        parts = self.describe(TOPIC)
        self.check_placement(TOPIC, parts, PARTITIONS, 3)
        rc, out = self.millrace("topics", "list")
        self.checks.check("millrace topics list shows the topic", rc == 0 and TOPIC in out, out)
        sent = self.produce()
        self.consume(sent)
        rc, out = self.millrace("groups", "list")
        self.checks.check("millrace groups list shows the group", rc == 0 and GROUP in out, out)
        rc, out = self.millrace("groups", "describe", "--group", GROUP)
        lags = re.findall(rf"{GROUP}\s+{TOPIC}\s+\d+\s+\d+\s+\d+\s+(\d+)", out)
        self.checks.check(
            "millrace groups describe: every partition committed, lag 0",
            rc == 0 and len(lags) == PARTITIONS and set(lags) == {"0"},
            out,
        )
        self.create_topic(SPARK_TOPIC, PARTITIONS, 3)
        self.spark(sent)
        self.check_replicated()

    def check_replicated(self, timeout_s: float = 60.0) -> None:
        """Replication between the hosts works: ``millrace topics describe
        --under-replicated-partitions`` lists nothing (every ISR whole), within
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            rc, out = self.millrace("topics", "describe", "--under-replicated-partitions")
            short = [line for line in out.splitlines() if "Partition:" in line]
            if (rc == 0 and not short) or time.monotonic() > deadline:
                break
            time.sleep(2)
        self.checks.check(
            "every partition's ISR is whole: the brokers replicate between the hosts",
            rc == 0 and not short,
            out,
        )

    def check_metadata(self) -> None:
        """Every broker's own Metadata response names every broker by its host's address
        and rack (never 127.0.0.1); confluent-kafka sees the same brokers."""
        from confluent_kafka.admin import AdminClient

        want = {
            int(b): (str(v["host"]), int(v["port"]), str(v["rack"]))
            for b, v in self.brokers.items()
        }
        for b, (host, port, _rack) in sorted(want.items()):
            response = metadata(host, port, topics=[])
            seen = {
                int(x.node_id): (str(x.host), int(x.port), x.rack and str(x.rack))
                for x in response.brokers
            }
            self.checks.check(
                f"broker {b}'s Metadata advertises every host's address and rack",
                seen == want,
                {"seen": seen, "expected": want},
            )
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        md = admin.list_topics(timeout=30)
        seen_ck = {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}
        self.checks.check(
            "confluent-kafka's metadata lists the hosts' addresses (not 127.0.0.1)",
            seen_ck == {b: (h, p) for b, (h, p, _r) in want.items()},
            seen_ck,
        )
        cluster = admin.describe_cluster(request_timeout=30).result(timeout=60)
        racks = {int(n.id): n.rack for n in cluster.nodes}
        self.checks.check(
            "confluent-kafka's DescribeCluster reports each broker's rack",
            racks == {b: r for b, (_h, _p, r) in want.items()},
            racks,
        )

    def check_placement(
        self,
        topic: str,
        parts: dict[int, tuple[int, list[int], list[int]]],
        partitions: int,
        rf: int,
    ) -> None:
        """Kafka's rack-aware assignment: each partition's replicas on ``rf`` distinct racks
        (as many as there are), every broker used, the preferred leaders spread evenly."""
        racks = {int(b): self.rack(int(b)) for b in self.brokers}
        want_racks = min(rf, len(set(racks.values())))
        spread = {p: sorted(racks[r] for r in replicas) for p, (_l, replicas, _i) in parts.items()}
        self.checks.check(
            f"{topic}: every partition's {rf} replicas on {want_racks} distinct racks",
            len(parts) == partitions
            and all(len(set(r)) == want_racks and len(r) == rf for r in spread.values()),
            spread,
        )
        leaders: dict[int, int] = {}
        for _leader, replicas, _isr in parts.values():
            leaders[replicas[0]] = leaders.get(replicas[0], 0) + 1
        even = partitions // len(racks)
        self.checks.check(
            f"{topic}: preferred leaders spread evenly over the {len(racks)} brokers",
            sorted(leaders) == sorted(racks) and set(leaders.values()) == {even},
            leaders,
        )

    def produce(self) -> dict[tuple[int, int], tuple[str, str]]:
        """RECORDS keyed records with acks=all (idempotent); {(partition, offset): (key,
        value)} of those acknowledged."""
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        acked: dict[tuple[int, int], tuple[str, str]] = {}
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                position, record = _record(msg)
                acked[position] = record

        for i in range(RECORDS):
            producer.produce(
                TOPIC, key=f"customer-{i % 97}", value=f"order-{i}", on_delivery=delivered
            )
            producer.poll(0)
        left = producer.flush(60)
        self.checks.check(
            f"confluent-kafka produced {RECORDS} records with acks=all, each acknowledged",
            left == 0 and not errors and len(acked) == RECORDS,
            {"acknowledged": len(acked), "errors": errors[:5], "unflushed": left},
        )
        return acked

    def consume(self, sent: dict[tuple[int, int], tuple[str, str]]) -> None:
        """A consumer group reads every acknowledged record back and commits."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        got: dict[tuple[int, int], tuple[str, str]] = {}
        try:
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 90
            while len(got) < len(sent) and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=1.0):
                    if msg.error() is None:
                        position, record = _record(msg)
                        got[position] = record
            if got:
                consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        self.checks.check(
            f"a consumer group read back every acknowledged record ({len(sent)})",
            got == sent,
            {"read": len(got), "sent": len(sent)},
        )

    def spark(self, sent: dict[tuple[int, int], tuple[str, str]]) -> None:
        """The Spark job reads TOPIC, writes it to SPARK_TOPIC and reads that back;
        confluent-kafka then checks SPARK_TOPIC."""
        from tests.harness.spark_submit import SparkSubmit

        job = SparkSubmit(
            str(Path(__file__).with_name("several_hosts_spark.py")),
            [
                "--bootstrap",
                self.bootstrap,
                "--source",
                TOPIC,
                "--target",
                SPARK_TOPIC,
                "--run-dir",
                str(self.out_dir),
            ],
            self.out_dir / "spark.out",
            master="local[2]",
        )
        started = time.monotonic()
        try:
            job.start()
            status = job.wait(600)
        finally:
            job.kill()
        line = next(
            (x for x in job.output().splitlines() if x.startswith("SEVERAL_HOSTS_SPARK ")), ""
        )
        result = json.loads(line.split(" ", 1)[1]) if line else {}
        expected = sorted([k, v] for k, v in sent.values())
        self.checks.check(
            "Spark (format millrace) read the topic from the client host",
            status == 0 and result.get("read") == expected,
            {
                "exit_status": status,
                "read": len(result.get("read", [])),
                "expected": len(expected),
                "seconds": round(time.monotonic() - started, 1),
                "output_tail": "" if status == 0 else job.output()[-3000:],
            },
        )
        written = sorted([k, f"{v}|spark"] for k, v in sent.values())
        self.checks.check(
            "Spark wrote the topic with format millrace and read back what it wrote",
            result.get("read_back") == written,
            {"read_back": len(result.get("read_back", [])), "expected": len(written)},
        )
        self.checks.check(
            "confluent-kafka reads what Spark wrote",
            sorted(list(kv) for kv in read_all(self.bootstrap, SPARK_TOPIC)) == written,
        )

    # -- phase "racks" --

    def racks_phase(self) -> None:
        self.check_metadata()
        for rf in (3, 2):
            topic = f"racks-rf{rf}"
            self.create_topic(topic, 12, rf)
            self.check_placement(topic, self.describe(topic), 12, rf)
        self.check_replicated()
        auto = self.auto_create()
        self.observations["auto_created_topic"] = auto
        self.checks.check(
            "a topic auto-created through a broker that is not the controller is rack-aware",
            auto["partitions"] == 12 and auto["every_partition_on_3_racks"],
            auto,
        )
        before = self.describe(TOPIC)
        self.checks.check(
            f"{TOPIC} keeps its replicas on brokers 1-3 (a new broker gets new partitions only)",
            all(set(replicas) <= {1, 2, 3} for _l, replicas, _i in before.values()),
            before,
        )
        for topic in RACK_TOPICS:
            rc, out = self.millrace("topics", "delete", "--topic", topic)
            self.checks.check(f"millrace topics delete {topic}", rc == 0, out)

    def auto_create(self) -> dict[str, Any]:
        """A topic auto-created by a Metadata request to a broker that is not the controller
        (12 partitions, RF 3): whether its replicas are spread over the racks (checked by the
        caller: the broker assigns with the racks its metadata knows, Kafka's
        ``RackAwareMode.Safe``)."""
        from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        from tests.harness.raw import RawConnection

        first = next(iter(self.brokers.values()))
        controller = int(metadata(str(first["host"]), int(first["port"]), topics=[]).controller_id)
        via = min(int(b) for b in self.brokers if int(b) != controller)
        address = self.brokers[str(via)]
        request = MetadataRequest(
            topics=(MetadataRequestTopic(name=TopicName("racks-auto")),),
            allow_auto_topic_creation=True,
        )
        with RawConnection(str(address["host"]), int(address["port"]), timeout_s=10.0) as conn:
            conn.request(request)
        parts: dict[int, tuple[int, list[int], list[int]]] = {}
        deadline = time.monotonic() + 60
        while len(parts) < 12 and time.monotonic() < deadline:
            time.sleep(1)
            parts = self.describe("racks-auto")
        racks = {int(b): self.rack(int(b)) for b in self.brokers}
        spread = {p: sorted(racks[r] for r in replicas) for p, (_l, replicas, _i) in parts.items()}
        return {
            "controller": controller,
            "created_through_broker": via,
            "partitions": len(parts),
            "every_partition_on_3_racks": bool(parts)
            and all(len(set(r)) == 3 for r in spread.values()),
            "replica_racks": spread,
        }


def _record(msg: Any) -> tuple[tuple[int, int], tuple[str, str]]:
    """((partition, offset), (key, value)) of a confluent-kafka message (keys and values
    are never null here)."""
    return (int(msg.partition()), int(msg.offset())), (
        bytes(msg.key() or b"").decode(),
        bytes(msg.value() or b"").decode(),
    )


def read_all(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    """Every record of ``topic`` as (key, value), read by an assigned consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "several-hosts-check",
            "enable.auto.commit": False,
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=30)
        parts = sorted(md.topics[topic].partitions)
        ends = {}
        for p in parts:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[str, str]] = []
        position = {p: 0 for p in parts}
        deadline = time.monotonic() + 60
        while any(position[p] < ends[p] for p in parts) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error() is None:
                    (partition, offset), record = _record(msg)
                    out.append(record)
                    position[partition] = offset + 1
        return out
    finally:
        consumer.close()


def client_main(args: argparse.Namespace) -> int:
    client = Client(args)
    try:
        if args.phase == "cluster":
            client.cluster_phase()
        else:
            client.racks_phase()
    except Exception:  # noqa: BLE001 - a step that raised is a failed check, with its trace
        client.checks.check(
            f"client phase {args.phase} ran to the end", False, traceback.format_exc()
        )
    result = {"checks": client.checks.items, "observations": client.observations}
    Path(args.result).write_text(json.dumps(result, indent=1))
    return 0 if all(c["ok"] for c in client.checks.items) else 1


# -- entry points -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["client"]:
        cp = argparse.ArgumentParser(prog="several_hosts client")
        cp.add_argument("--phase", choices=("cluster", "racks"), required=True)
        cp.add_argument("--bootstrap", required=True)
        cp.add_argument("--brokers", required=True, help="JSON {id: {host, port, rack}}")
        cp.add_argument("--out-dir", required=True)
        cp.add_argument("--result", required=True)
        return client_main(cp.parse_args(argv[1:]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--zookeepers", type=int, choices=(1, 3), default=1)
    ap.add_argument("--client-timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    reason = netns.namespaces_available() if not netns.in_hub() else None
    if reason:
        print(f"several hosts: {reason}", file=sys.stderr)
        return 2
    netns.enter_hub(["-m", "tests.fault.several_hosts", *argv])
    report = run(args)
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    failed = [c["name"] for c in report["checks"] if not c["ok"]]
    progress(f"report: {args.report}; failed checks: {failed or 'none'}")
    return 0 if not failed and "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
