"""A cluster of Millrace and Apache Kafka 3.9.1 brokers on one ZooKeeper, started broker by
broker (not through ``millrace cluster up``), so a test chooses each broker's kind, id, log
directory and start order, and can replace one kind by the other on the same log
directories (the rolling migration of docs/operations.md).

ZooKeeper is the project's embedded one (``millrace zookeeper start``); a Millrace broker is
``millrace broker start --config``; a Kafka broker is :func:`start_kafka_broker`. Every
process is started in its own session and stopped by its own pid: :meth:`MixedCluster.close`
(never raises) SIGKILLs whatever is still running, whatever happened in the test.

Concurrency: one test thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.kafka_tools import start_kafka_broker
from tests.harness.ports import free_port
from tests.harness.processes import kill_pid, pid_alive, wait_pid_gone
from tests.harness.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "broker.cli.main"]
KAFKA = "kafka"
MILLRACE = "millrace"


@dataclass(slots=True)
class BrokerNode:
    """One broker id: its address and log directory stay, its process and kind change."""

    broker_id: int
    port: int
    data_dir: Path
    home: Path
    kind: str = ""
    proc: subprocess.Popen[bytes] | None = None
    history: list[str] = field(default_factory=list)
    """The kinds this broker id ran as, in order."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class MixedCluster:
    """ZooKeeper plus brokers of either kind (see the module docstring)."""

    def __init__(self, base: Path, broker_props: dict[str, str] | None = None) -> None:
        """``broker_props``: properties given to every broker of either kind."""
        self.base = base
        self.broker_props = dict(broker_props or {})
        self.zk_port = free_port()
        self.zk_proc: subprocess.Popen[bytes] | None = None
        self.nodes: dict[int, BrokerNode] = {}
        self._all_pids: set[int] = set()

    # --- ZooKeeper --------------------------------------------------------------------

    @property
    def zk_connect(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    def start_zookeeper(self) -> None:
        data = self.base / "zookeeper"
        data.mkdir(parents=True, exist_ok=True)
        out = (self.base / "zookeeper.out").open("wb")
        self.zk_proc = subprocess.Popen(
            [*CLI, "zookeeper", "start", "--port", str(self.zk_port), "--data-dir", str(data)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self.base,
            env=self._env(),
            start_new_session=True,
        )
        out.close()
        self._all_pids.add(self.zk_proc.pid)

        def up() -> bool:
            assert self.zk_proc is not None and self.zk_proc.poll() is None, (
                f"ZooKeeper exited: see {self.base}/zookeeper.out"
            )
            return _accepts(self.zk_port)

        wait_for(up, 60, "ZooKeeper listening")

    def zk_get(self, path: str) -> bytes | None:
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=self.zk_connect, timeout=10.0)
        zk.start(timeout=15)
        try:
            data, _stat = zk.get(path)
            return bytes(data)
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()

    def controller_id(self) -> int:
        """The broker id in ``/controller`` (-1 when there is none)."""
        raw = self.zk_get("/controller")
        return -1 if not raw else int(json.loads(raw)["brokerid"])

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        raw = self.zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        assert raw, f"no state znode for {topic}-{partition}"
        return dict(json.loads(raw))

    # --- brokers ----------------------------------------------------------------------

    def node(self, broker_id: int) -> BrokerNode:
        found = self.nodes.get(broker_id)
        if found is None:
            home = self.base / f"broker-{broker_id}"
            home.mkdir(parents=True, exist_ok=True)
            found = self.nodes[broker_id] = BrokerNode(broker_id, free_port(), home / "data", home)
        return found

    def _common_props(self, node: BrokerNode, extra: dict[str, str]) -> dict[str, str]:
        return {
            "broker.id": str(node.broker_id),
            "listeners": f"PLAINTEXT://{node.address}",
            "log.dirs": str(node.data_dir),
            "zookeeper.connect": self.zk_connect,
            **self.broker_props,
            **extra,
        }

    def start_kafka(self, broker_id: int, extra: dict[str, str] | None = None) -> BrokerNode:
        node = self.node(broker_id)
        assert not node.running(), f"broker {broker_id} is running"
        home = node.home / f"kafka-{len(node.history)}"
        home.mkdir(parents=True, exist_ok=True)
        node.proc = start_kafka_broker(home, self._common_props(node, extra or {}))
        node.kind = KAFKA
        node.history.append(KAFKA)
        self._all_pids.add(node.proc.pid)
        return node

    def start_millrace(
        self, broker_id: int, extra: dict[str, str] | None = None, log_level: str = "INFO"
    ) -> BrokerNode:
        node = self.node(broker_id)
        assert not node.running(), f"broker {broker_id} is running"
        run = node.home / f"millrace-{len(node.history)}"
        run.mkdir(parents=True, exist_ok=True)
        config = run / "server.properties"
        props = self._common_props(node, extra or {})
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        out = (run / "broker.out").open("wb")
        node.proc = subprocess.Popen(
            [*CLI, "--log-level", log_level, "broker", "start", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=run,
            env=self._env(),
            start_new_session=True,
        )
        out.close()
        node.kind = MILLRACE
        node.history.append(MILLRACE)
        self._all_pids.add(node.proc.pid)
        return node

    def wait_listening(self, broker_id: int, timeout_s: float = 120.0) -> None:
        node = self.node(broker_id)

        def up() -> bool:
            assert node.running(), f"broker {broker_id} ({node.kind}) exited: {self.tail(node)}"
            return _accepts(node.port)

        wait_for(up, timeout_s, f"broker {broker_id} ({node.kind}) listening")

    def stop(self, broker_id: int, timeout_s: float = 90.0) -> None:
        """SIGTERM (a controlled shutdown, for either kind), SIGKILL after ``timeout_s``."""
        node = self.node(broker_id)
        proc = node.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                kill_pid(proc.pid)
                proc.wait()
        node.proc = None

    def kill(self, broker_id: int) -> None:
        node = self.node(broker_id)
        if node.proc is not None:
            kill_pid(node.proc.pid)
            node.proc.wait()
            node.proc = None

    def close(self) -> None:
        """SIGKILL every process still running (brokers first, then ZooKeeper). Never
        raises."""
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                if node.proc is not None:
                    kill_pid(node.proc.pid)
                    node.proc.wait(10)
        if self.zk_proc is not None:
            with contextlib.suppress(Exception):
                self.zk_proc.send_signal(signal.SIGTERM)
                if not wait_pid_gone(self.zk_proc.pid, 10):
                    kill_pid(self.zk_proc.pid)
                self.zk_proc.wait(10)
        for pid in self._all_pids:
            if pid_alive(pid):
                with contextlib.suppress(Exception):
                    kill_pid(pid)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for _i, n in sorted(self.nodes.items()) if n.running())

    def tail(self, node: BrokerNode, lines: int = 40) -> str:
        """The end of the broker's latest output file."""
        outs = sorted(
            [*node.home.glob("millrace-*/broker.out"), *node.home.glob("kafka-*/kafka.out")],
            key=lambda p: p.stat().st_mtime,
        )
        if not outs:
            return "(no output)"
        text = outs[-1].read_text(errors="replace").splitlines()[-lines:]
        return f"{outs[-1]}:\n" + "\n".join(text)

    def tails(self) -> str:
        return "\n\n".join(self.tail(n) for _i, n in sorted(self.nodes.items()))

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        return env


def wait_brokers_registered(
    cluster: MixedCluster, ids: list[int], timeout_s: float = 120.0
) -> None:
    """Until ``/brokers/ids`` lists exactly ``ids``."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect, timeout=10.0)
    zk.start(timeout=15)
    try:

        def registered() -> bool:
            for broker_id in ids:
                node = cluster.nodes.get(broker_id)
                if node is not None and node.proc is not None:
                    assert node.running(), (
                        f"broker {broker_id} ({node.kind}) exited: {cluster.tail(node)}"
                    )
            have = (
                sorted(int(x) for x in zk.get_children("/brokers/ids"))
                if zk.exists("/brokers/ids")
                else []
            )
            return have == sorted(ids)

        wait_for(registered, timeout_s, f"brokers {ids} registered")
    finally:
        zk.stop()
        zk.close()


def sleep_until(predicate: Any, timeout_s: float, what: str, step: float = 0.25) -> Any:
    """``wait_for`` with a smaller step (re-exported for the tests)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step)
