"""ZooKeeper and Millrace brokers, each in its own node namespace of the fault topology.

Layout of the run directory ``D``: ``D/zookeeper/`` (data, ``zookeeper.log``),
``D/broker-<id>/server.properties``, ``D/broker-<id>/data/`` (``log.dirs``),
``D/broker-<id>/broker.out``. ZooKeeper listens on its node's address port 2181, broker
``i`` on its node's address port 9092 (each namespace has its own ports), advertised as
such, so clients in the hub reach it directly.

Processes are started in sessions of their own and signalled by pid: SIGKILL (crash),
SIGSTOP/SIGCONT (a pause: a GC storm or a frozen VM), SIGTERM (controlled shutdown).
:meth:`FaultCluster.close` stops everything, whatever state it is in.

Concurrency: one thread (the fault scheduler) changes process state; the workload threads
only read :attr:`FaultCluster.bootstrap`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.fault.netns import Topology

ZK_PORT = 2181
BROKER_PORT = 9092

# Settings of every run: Kafka's safe defaults for durability (RF 3, min ISR 2, unclean
# election off) with shorter timers, so that a failure is detected and repaired in seconds
# (a ZooKeeper session of 6 s, a follower out of the ISR after 10 s).
BROKER_PROPS: dict[str, str] = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}


class ClusterError(RuntimeError):
    """A node did not start or did not become ready in time."""


class FaultCluster:
    """ZooKeeper (node ``zk``) and brokers 1..N (nodes ``b1``..``bN``)."""

    def __init__(
        self,
        topology: Topology,
        run_dir: Path,
        brokers: int,
        props: Mapping[str, str] | None = None,
        log_dirs: Mapping[int, list[Path]] | None = None,
        security: str | None = None,
    ) -> None:
        """``security`` (ssl, sasl_plaintext, sasl_ssl): secured as ``millrace cluster up
        --security`` secures a cluster (certificates naming the nodes' addresses, SCRAM users,
        ACLs); :attr:`client_settings` then holds the admin's client settings."""
        self.security = security
        self.client_settings: dict[str, str] = {}
        self._protocol = "PLAINTEXT"
        self.topology = topology
        self.dir = run_dir
        self.broker_ids = list(range(1, brokers + 1))
        self.props = {**BROKER_PROPS, **(props or {})}
        self.extra_log_dirs = dict(log_dirs or {})
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started_at: dict[str, float] = {}  # wall-clock start of each node's process
        self.paused: set[str] = set()
        self.zk_cmd: list[str] = []

    # -- addresses --

    @property
    def zk_connect(self) -> str:
        return f"{self.topology.nodes['zk'].ip}:{ZK_PORT}"

    def broker_address(self, broker_id: int) -> tuple[str, int]:
        return self.topology.nodes[f"b{broker_id}"].ip, BROKER_PORT

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in map(self.broker_address, self.broker_ids))

    def log_dirs(self, broker_id: int) -> list[Path]:
        return [self.dir / f"broker-{broker_id}" / "data", *self.extra_log_dirs.get(broker_id, [])]

    def pid(self, node: str) -> int | None:
        proc = self.procs.get(node)
        return proc.pid if proc is not None and proc.poll() is None else None

    # -- processes --

    def _spawn(self, node: str, cmd: list[str], out: Path) -> None:
        from broker.cli.cluster_process import _child_env

        out.parent.mkdir(parents=True, exist_ok=True)
        self.started_at[node] = time.time()
        with out.open("ab") as f:
            f.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n".encode())
            f.flush()
            self.procs[node] = subprocess.Popen(
                self.topology.nodes[node].wrap(cmd),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=out.parent,
                env=_child_env(),
                start_new_session=True,
            )

    def start_zookeeper(self, timeout_s: float = 60.0) -> None:
        from broker.zk.embedded_server import EmbeddedZooKeeper, zookeeper_is_serving

        zk_dir = self.dir / "zookeeper"
        if not self.zk_cmd:
            zk = EmbeddedZooKeeper(
                ZK_PORT, zk_dir, tick_time=500, host=self.topology.nodes["zk"].ip
            )
            self.zk_cmd = zk.prepare()
        self._spawn("zk", self.zk_cmd, zk_dir / "zookeeper.out")
        host = self.topology.nodes["zk"].ip
        deadline = time.monotonic() + timeout_s
        while not zookeeper_is_serving(host, ZK_PORT, timeout=1.0):
            if self.procs["zk"].poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"ZooKeeper did not start; see {zk_dir / 'zookeeper.out'}")
            time.sleep(0.2)

    def _write_config(self, broker_id: int) -> Path:
        host, port = self.broker_address(broker_id)
        bdir = self.dir / f"broker-{broker_id}"
        props = {
            "broker.id": str(broker_id),
            "listeners": f"{self._protocol}://{host}:{port}",
            "advertised.listeners": f"{self._protocol}://{host}:{port}",
            "log.dirs": ",".join(str(d) for d in self.log_dirs(broker_id)),
            "zookeeper.connect": self.zk_connect,
            **self.props,
        }
        bdir.mkdir(parents=True, exist_ok=True)
        config = bdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return config

    def _secure(self) -> None:
        from broker.cli.cluster_security import create_users, prepare

        hosts = tuple(self.broker_address(b)[0] for b in self.broker_ids)
        assert self.security is not None
        secured = prepare(self.dir, self.security, hosts=(*hosts, "127.0.0.1"))
        create_users(self.zk_connect, secured.users)
        self.props = {**self.props, **secured.broker_props}
        self._protocol = secured.protocol
        self.client_settings = dict(secured.client_config)

    def start_broker(self, broker_id: int) -> None:
        from broker.cli.cluster_process import broker_command

        config = self._write_config(broker_id)
        self._spawn(f"b{broker_id}", broker_command(config), config.parent / "broker.out")

    def start(self, timeout_s: float = 120.0) -> None:
        self.start_zookeeper()
        if self.security:
            self._secure()
        for b in self.broker_ids:
            self.start_broker(b)
        self.wait_registered(self.broker_ids, timeout_s)

    def signal(self, node: str, sig: signal.Signals) -> bool:
        pid = self.pid(node)
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if sig == signal.SIGSTOP:
            self.paused.add(node)
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.paused.discard(node)
        return True

    def kill(self, node: str) -> None:
        """SIGKILL ``node``'s process and reap it."""
        proc = self.procs.get(node)
        if proc is None:
            return
        if node in self.paused:
            self.signal(node, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(30)
        self.paused.discard(node)

    def restart(self, node: str) -> None:
        if self.pid(node) is not None:
            return
        if node == "zk":
            self.start_zookeeper()
        else:
            self.start_broker(int(node[1:]))

    def alive(self, node: str) -> bool:
        return self.pid(node) is not None

    # -- ZooKeeper views --

    def _zk(self) -> Any:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.zk_connect, timeout=5.0)
        zk.start(timeout=10)
        return zk

    def registered(self) -> list[int]:
        """Broker ids registered in ZooKeeper now by their current process: a registration
        older than the process (a killed instance's, until its session expires) does not
        count ([] if ZooKeeper cannot be reached)."""
        try:
            zk = self._zk()
        except Exception:  # noqa: BLE001 - ZooKeeper down or cut off: nothing known
            return []
        try:
            out = []
            for child in zk.get_children("/brokers/ids"):
                _data, stat = zk.get(f"/brokers/ids/{child}")
                since = self.started_at.get(f"b{child}", 0.0)
                # no slack: a process registers a second or more after it was spawned, and a
                # killed instance's registration may be younger than a second
                if stat.created >= since:
                    out.append(int(child))
            return sorted(out)
        except Exception:  # noqa: BLE001
            return []
        finally:
            zk.stop()
            zk.close()

    def controller(self) -> int | None:
        try:
            zk = self._zk()
        except Exception:  # noqa: BLE001
            return None
        try:
            data, _ = zk.get("/controller")
            return int(json.loads(data)["brokerid"])
        except Exception:  # noqa: BLE001 - no controller right now
            return None
        finally:
            zk.stop()
            zk.close()

    def wait_registered(self, ids: list[int], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if set(ids) <= set(self.registered()) and self.controller() is not None:
                return True
            time.sleep(0.5)
        return False

    def coordinator(self, key: str, key_type: int) -> int | None:
        """The broker id of the group (``key_type`` 0) or transaction (1) coordinator of
        ``key``, asked with FindCoordinator; None when no broker answers."""
        from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
        from kio.static.primitive import i8

        from tests.harness.raw import RawConnection

        request = FindCoordinatorRequest(key=key, key_type=i8(key_type))
        for b in self.broker_ids:
            if not self.alive(f"b{b}") or f"b{b}" in self.paused:
                continue
            try:
                with RawConnection(
                    *self.broker_address(b), timeout_s=3.0, security=self._client_security()
                ) as conn:
                    response = conn.request(request)
            except OSError:
                continue
            if int(response.error_code) == 0:
                return int(response.node_id)
        return None

    def _client_security(self) -> Any:
        if not self.client_settings:
            return None
        from kafka_security.client_security import client_security

        return client_security(self.client_settings)

    def close(self) -> None:
        for node in list(self.procs):
            self.kill(node)
